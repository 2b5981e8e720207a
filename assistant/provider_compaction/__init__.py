"""The providers' own compaction (Anthropic's compaction blocks, OpenAI's
Responses compaction), as the app chooses, records and resends it. The blocks'
shapes are each provider's (assistant.providers.compaction_blocks).

- choice: which compaction a chat step runs under PROVIDER_COMPACTION;
- recording: a block attached to the message that carried it, and its event.

May import: history, models, ops, providers, settings, window.
See docs/architecture.rst.
"""

from assistant.provider_compaction.choice import ProviderStep, provider_compacts, provider_step
from assistant.provider_compaction.recording import record_event

__all__ = ["ProviderStep", "provider_compacts", "provider_step", "record_event"]
