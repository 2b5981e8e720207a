"""The providers: one folder each (anthropic: direct, Bedrock and Vertex;
openai: Chat Completions and Responses; gemini; offline) over one small base.
Each folder holds its wire (the request shape, the answer and stream reading,
usage, overflow words, its compaction blocks) and its summarizer client
(provider). Adding a provider is adding a folder and naming it in the catalog.

- base: the interface (`Provider`, `ProviderError`, `Usage`);
- wire, convert, streaming: what differs between wires, the neutral messages
  turned into each request shape, an answer read as it arrives;
- catalog: the providers by name, their models' windows, output caps and prices;
- registry: which provider summarizes and which model embeds, from settings and the
  SDKs' environment;
- embeddings: the embedding interface (`Embedder`, `EmbeddingResult`, `EmbeddingError`),
  its models' limits and dimensions; each folder's embeddings module implements it
  (openai, gemini, voyage, local: docs/operations.rst, "Where embeddings come from");
- overflow: is this error a context-window overflow;
- summary_prompt, cached_request: what a summarizer client sends;
- compaction_blocks: the providers' own compaction blocks, checked and sized.

May import: ops, settings, text.
See docs/architecture.rst.
"""

from assistant.providers.base import (
    ChatResult,
    Provider,
    ProviderError,
    SummaryRejected,
    SummaryResult,
    Usage,
    new_tool_call_id,
)
from assistant.providers.cached_request import CachedRequest
from assistant.providers.catalog import (
    ANTHROPIC,
    CHAT_PROVIDERS,
    DEFAULT_EMBEDDING_MODELS,
    DEFAULT_PROVIDER,
    EMBEDDING_MODELS,
    MODEL_SETTINGS,
    WIRES,
    Price,
    configured_chat_model,
    media_rates,
    model_context_window,
    model_info,
    model_prices,
    price_of,
    read_response,
    send_bound,
    smallest_send_bound,
    telemetry_name,
    wire_of,
)
from assistant.providers.compaction_blocks import Record, block_tokens, summary_text, validated
from assistant.providers.convert import InvalidRequest
from assistant.providers.embeddings import (
    Embedder,
    EmbeddingError,
    EmbeddingModel,
    EmbeddingResult,
    unit_vector,
)
from assistant.providers.gemini.wire import GEMINI
from assistant.providers.lifetimes import (
    LIFETIMES,
    CacheLifetime,
    asking_lifetime,
    lifetime_named,
    lifetimes_of,
    routes_by_cache_key,
)
from assistant.providers.offline.provider import OfflineProvider
from assistant.providers.overflow import (
    OVERFLOW_STOP_REASON,
    context_overflow,
    overflow_token_counts,
)
from assistant.providers.registry import (
    embedder,
    embedder_settings,
    embeddings_off_reason,
    forget_clients,
    get_provider,
    import_sdk,
    offline_reason,
    provider_name,
    summarize,
    summarize_cached,
)
from assistant.providers.streaming import (
    OnText,
    StreamInterrupted,
    aread_answer,
    asynchronous,
    read_answer,
)
from assistant.providers.summary_prompt import (
    MAX_INSTRUCTIONS_CHARS,
    Guidance,
    build_summary_prompt,
    call_instructions,
    check_instructions,
    current_call_instructions,
    describe_message,
    render_transcript,
    suffix_instruction,
    summary_guidance,
    validate_summary,
)
from assistant.providers.wire import Wire
from assistant.text import extract_identifiers

__all__ = [
    "ANTHROPIC",
    "CHAT_PROVIDERS",
    "DEFAULT_EMBEDDING_MODELS",
    "DEFAULT_PROVIDER",
    "EMBEDDING_MODELS",
    "GEMINI",
    "LIFETIMES",
    "MAX_INSTRUCTIONS_CHARS",
    "MODEL_SETTINGS",
    "OVERFLOW_STOP_REASON",
    "WIRES",
    "CacheLifetime",
    "CachedRequest",
    "ChatResult",
    "Embedder",
    "EmbeddingError",
    "EmbeddingModel",
    "EmbeddingResult",
    "Guidance",
    "InvalidRequest",
    "OfflineProvider",
    "OnText",
    "Price",
    "Provider",
    "ProviderError",
    "Record",
    "StreamInterrupted",
    "SummaryRejected",
    "SummaryResult",
    "Usage",
    "Wire",
    "aread_answer",
    "asking_lifetime",
    "asynchronous",
    "block_tokens",
    "build_summary_prompt",
    "call_instructions",
    "check_instructions",
    "configured_chat_model",
    "context_overflow",
    "current_call_instructions",
    "describe_message",
    "embedder",
    "embedder_settings",
    "embeddings_off_reason",
    "extract_identifiers",
    "forget_clients",
    "get_provider",
    "import_sdk",
    "lifetime_named",
    "lifetimes_of",
    "media_rates",
    "model_context_window",
    "model_info",
    "model_prices",
    "new_tool_call_id",
    "offline_reason",
    "overflow_token_counts",
    "price_of",
    "provider_name",
    "read_answer",
    "read_response",
    "render_transcript",
    "routes_by_cache_key",
    "send_bound",
    "smallest_send_bound",
    "suffix_instruction",
    "summarize",
    "summarize_cached",
    "summary_guidance",
    "summary_text",
    "telemetry_name",
    "unit_vector",
    "validate_summary",
    "validated",
    "wire_of",
]
