"""LLM providers: Anthropic, Gemini, and an offline summarizer, behind one interface."""

from assistant.providers.base import (
    ChatResult,
    Provider,
    ProviderError,
    SummaryRejected,
    SummaryResult,
    Usage,
)
from assistant.providers.cached_request import CachedRequest
from assistant.providers.catalog import model_context_window
from assistant.providers.offline.provider import OfflineProvider
from assistant.providers.overflow import (
    context_overflow,
    overflow_token_counts,
)
from assistant.providers.registry import (
    forget_clients,
    get_provider,
    import_sdk,
    offline_reason,
    provider_name,
    summarize,
    summarize_cached,
)
from assistant.providers.summary_prompt import (
    build_summary_prompt,
    render_transcript,
    validate_summary,
)
from assistant.text.verbatim import extract_identifiers

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
