"""What a host needs to test its chat loop without a provider key: the fake
Anthropic / Gemini server (`assistant.testing.fake_provider`), in-process or
alone (`python -m assistant.testing.fake_provider --port N`)."""
