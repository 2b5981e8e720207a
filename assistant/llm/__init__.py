"""LLM providers: Anthropic, Gemini, and an offline summarizer, behind one interface."""

from assistant.llm.base import (
    ChatResult,
    Provider,
    ProviderError,
    SummaryRejected,
    SummaryResult,
    Usage,
)
from assistant.llm.catalog import model_context_window
from assistant.llm.identifiers import extract_identifiers
from assistant.llm.offline import OfflineProvider
from assistant.llm.overflow import (
    context_overflow,
    overflow_token_counts,
)
from assistant.llm.prompts import build_summary_prompt, render_transcript, validate_summary
from assistant.llm.registry import (
    forget_clients,
    get_provider,
    import_sdk,
    offline_reason,
    provider_name,
    summarize,
    summarize_cached,
)
from assistant.llm.suffix import CachedRequest

__all__ = [
    "CachedRequest",
    "ChatResult",
    "OfflineProvider",
    "Provider",
    "ProviderError",
    "SummaryRejected",
    "SummaryResult",
    "Usage",
    "build_summary_prompt",
    "context_overflow",
    "extract_identifiers",
    "forget_clients",
    "get_provider",
    "import_sdk",
    "model_context_window",
    "offline_reason",
    "overflow_token_counts",
    "provider_name",
    "render_transcript",
    "summarize",
    "summarize_cached",
    "validate_summary",
]
