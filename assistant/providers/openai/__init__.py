"""OpenAI: Chat Completions (the wire every OpenAI-compatible server speaks) and
the Responses API (responses_api), and the summarizer client (provider).

A folder of assistant.providers, under its contract.
"""
