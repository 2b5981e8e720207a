"""TODO docstring."""

from assistant.provider_compaction.choice import ProviderStep, provider_compacts, provider_step
from assistant.provider_compaction.recording import record_event

__all__ = ["ProviderStep", "provider_compacts", "provider_step", "record_event"]
