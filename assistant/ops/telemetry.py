"""OpenTelemetry spans and metrics: every name the app emits is defined here.

Only `opentelemetry-api` is imported: without an SDK configured by the host
every call below is a no-op. The GenAI ones follow the semantic conventions
(gen_ai.client.token.usage, gen_ai.client.operation.duration, gen_ai.*
attributes); the product's own start with `assistant.`.

`gen_ai.client.token.usage` is recorded per call with `gen_ai.token.type`
`input` (the whole prompt, cached parts included, as the conventions define
gen_ai.usage.input_tokens) and `output`, and, for the parts of the input,
`cache_read` and `cache_creation`: sum `input` and `output` for totals.

`provider` arguments are gen_ai.provider.name values as the conventions name them
(anthropic, aws.bedrock, gcp.vertex_ai, gcp.gemini, openai): each provider's module
in assistant.providers names its own (`assistant.providers.catalog.telemetry_name`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import metrics, trace

SCOPE = "assistant"

# Attribute names.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
TOKEN_TYPE = "gen_ai.token.type"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
ERROR_TYPE = "error.type"
CALLER = "assistant.caller"  # chat (the host's recorded calls) or summarizer
KIND = "assistant.compaction.kind"
PHASE = "assistant.phase"  # pre_call, post_exchange, staff_action, or other
ACTION = "assistant.staff_action"
OUTCOME = "assistant.outcome"
# Set (true only) on the chat span of a request that follows a compaction. Defined
# here: opentelemetry-semantic-conventions 0.66b2 (pinned) lacks it. The GenAI
# semantic conventions define it in their registry (open-telemetry/
# semantic-conventions-genai, status development, schema gen-ai-dev/1.42.0-dev at
# revision fee465db333bdd6a7d2faa320edab5cf3101a4f4, over core 1.44.0).
CONVERSATION_COMPACTED = "gen_ai.conversation.compacted"
CONVERSATION_ID = "gen_ai.conversation.id"

# Metric names.
TOKEN_USAGE = "gen_ai.client.token.usage"
OPERATION_DURATION = "gen_ai.client.operation.duration"
TOKENS_SHED = "assistant.compaction.tokens_shed"
COMPACTIONS = "assistant.compactions"
CHAT_PATH_SUMMARIES = "assistant.summaries.chat_path"
LEASE_WAITS = "assistant.summary_lease.waits"
SUMMARIZER_FAILURES = "assistant.summarizer.failures"
SUMMARIZER_FALLBACKS = "assistant.summarizer.fallbacks"
HOOK_DURATION = "assistant.pre_call_hook.duration"
QUEUED_STALE = "assistant.exchanges.queued_stale"
CACHE_BREAKS = "assistant.cache.breaks"
EMBEDDING_TOKENS = "assistant.embeddings.tokens"
EMBEDDINGS_CAPPED = "assistant.embeddings.capped"
EMBEDDING_FAILURES = "assistant.embeddings.failures"
# What "stale" means for QUEUED_STALE: queued longer than this (seconds).
QUEUED_STALE_SECONDS = 60

# Span names.
PRE_CALL_SPAN = "assistant.pre_call_hook"
POST_EXCHANGE_SPAN = "assistant.post_exchange"
STAFF_ACTION_SPAN = "assistant.staff_action"
CHAT_SPAN = "chat"  # the host's model call in a chat step (gen_ai.operation.name chat)

# Explicit bucket boundaries the conventions advise for these histograms.
TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]
SECONDS_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48]

_phase: ContextVar[str] = ContextVar("assistant_phase", default="other")

_tracer = trace.get_tracer(SCOPE)
_meter = metrics.get_meter(SCOPE)
_token_usage = _meter.create_histogram(
    TOKEN_USAGE,
    unit="{token}",
    description="Tokens per model call",
    explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
)
_operation_duration = _meter.create_histogram(
    OPERATION_DURATION,
    unit="s",
    description="Duration of each summarizer call",
    explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
)
_tokens_shed = _meter.create_counter(
    TOKENS_SHED, unit="{token}", description="Context tokens removed by compaction"
)
_compactions = _meter.create_counter(
    COMPACTIONS, unit="{compaction}", description="Compaction events recorded"
)
_chat_path_summaries = _meter.create_counter(
    CHAT_PATH_SUMMARIES,
    unit="{summary}",
    description="Window summaries the pre-call hook made while the chat waited",
)
_lease_waits = _meter.create_counter(
    LEASE_WAITS, unit="{wait}", description="Callers that waited for another's summary"
)
_summarizer_failures = _meter.create_counter(
    SUMMARIZER_FAILURES, unit="{call}", description="Summarizer calls that failed"
)
_summarizer_fallbacks = _meter.create_counter(
    SUMMARIZER_FALLBACKS, unit="{call}", description="Summaries the offline fallback wrote"
)
_cache_breaks = _meter.create_counter(
    CACHE_BREAKS,
    unit="{call}",
    description="Calls that read less from the provider's cache than their unchanged prefix",
)
_embedding_tokens = _meter.create_counter(
    EMBEDDING_TOKENS, unit="{token}", description="Tokens the embedding job's requests took"
)
_embeddings_capped = _meter.create_counter(
    EMBEDDINGS_CAPPED,
    unit="{run}",
    description="Embedding runs stopped at the day's cap (ASSISTANT_EMBEDDING_DAILY_TOKENS)",
)
_embedding_failures = _meter.create_counter(
    EMBEDDING_FAILURES, unit="{request}", description="Embedding requests refused for good"
)
_hook_duration = _meter.create_histogram(
    HOOK_DURATION,
    unit="s",
    description="Time the pre-call hook added to a model call",
    explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
)


def phase() -> str:
    return _phase.get()


@contextmanager
def _in_phase(name: str) -> Iterator[None]:
    token = _phase.set(name)
    try:
        yield
    finally:
        _phase.reset(token)


@contextmanager
def pre_call_hook(conversation_id: int) -> Iterator[None]:
    """The span and duration of one run of the pre-call hook."""
    started = time.perf_counter()
    with (
        _tracer.start_as_current_span(
            PRE_CALL_SPAN, attributes={"assistant.conversation.id": conversation_id}
        ),
        _in_phase("pre_call"),
    ):
        try:
            yield
        finally:
            _hook_duration.record(time.perf_counter() - started)


@contextmanager
def post_exchange(conversation_id: int) -> Iterator[None]:
    with (
        _tracer.start_as_current_span(
            POST_EXCHANGE_SPAN, attributes={"assistant.conversation.id": conversation_id}
        ),
        _in_phase("post_exchange"),
    ):
        yield


@contextmanager
def chat_request(conversation_id: int, provider: str, *, compacted: bool) -> Iterator[None]:
    """The client span of one of the host's model calls made by a chat step (`chat`,
    with its provider as the step names it); `compacted`: a compaction completed
    since the step's previous request (gen_ai.conversation.compacted, set only when
    true, as the conventions ask)."""
    attributes: dict[str, Any] = {
        OPERATION: "chat",
        CALLER: "chat",
        CONVERSATION_ID: str(conversation_id),
        "assistant.provider": provider,
    }
    if compacted:
        attributes[CONVERSATION_COMPACTED] = True
    with _tracer.start_as_current_span(
        CHAT_SPAN, kind=trace.SpanKind.CLIENT, attributes=attributes
    ):
        yield


@contextmanager
def staff_action(action: str, conversation_id: int) -> Iterator[None]:
    with (
        _tracer.start_as_current_span(
            STAFF_ACTION_SPAN,
            attributes={ACTION: action, "assistant.conversation.id": conversation_id},
        ),
        _in_phase("staff_action"),
    ):
        yield


@contextmanager
def summarizer_call(provider: str, model: str) -> Iterator[trace.Span]:
    """The client span of one summarizer call (`chat {model}`, as the
    conventions name it) and its duration; the caller adds its usage with
    `summarizer_usage`. A failure sets error.type and counts."""
    attributes = {
        OPERATION: "chat",
        PROVIDER: provider,
        REQUEST_MODEL: model,
        CALLER: "summarizer",
    }
    started = time.perf_counter()
    error: str | None = None
    with _tracer.start_as_current_span(
        f"chat {model}", kind=trace.SpanKind.CLIENT, attributes=attributes
    ) as span:
        try:
            yield span
        except Exception as exc:
            error = type(exc).__name__
            span.set_attribute(ERROR_TYPE, error)
            _summarizer_failures.add(1, {**attributes, ERROR_TYPE: error})
            raise
        finally:
            duration_attributes = {**attributes, **({ERROR_TYPE: error} if error else {})}
            _operation_duration.record(time.perf_counter() - started, duration_attributes)


def summarizer_usage(span: trace.Span, provider: str, model: str, usage: Any) -> None:
    """The usage one summarizer call reported, on its span and as metrics."""
    span.set_attribute(INPUT_TOKENS, usage.prompt_tokens)
    span.set_attribute(OUTPUT_TOKENS, usage.output_tokens)
    span.set_attribute(CACHE_READ_TOKENS, usage.cache_read_tokens)
    span.set_attribute(CACHE_CREATION_TOKENS, usage.cache_write_tokens)
    token_usage(
        "summarizer",
        provider,
        model,
        prompt=usage.prompt_tokens,
        output=usage.output_tokens,
        cache_read=usage.cache_read_tokens,
        cache_write=usage.cache_write_tokens,
    )


def summarizer_fallback(provider: str, model: str) -> None:
    _summarizer_fallbacks.add(1, {PROVIDER: provider, REQUEST_MODEL: model, CALLER: "summarizer"})


def offline_takeover(reason: str) -> None:
    """The chat path took the summary lease over ("stalled": its holder's
    heartbeat stopped; "late": past SUMMARY_CHAT_DEADLINE_SECONDS) and the
    offline summarizer wrote the shift: a fallback, not a summarizer failure."""
    _summarizer_fallbacks.add(1, {CALLER: "lease_takeover", OUTCOME: reason})


def token_usage(
    caller: str,
    provider: str,
    model: str,
    *,
    prompt: int,
    output: int,
    cache_read: int,
    cache_write: int,
) -> None:
    """gen_ai.client.token.usage for one call: input (the whole prompt),
    output, and the cache read and creation parts of the input."""
    attributes = {
        OPERATION: "chat",
        PROVIDER: provider,
        REQUEST_MODEL: model,
        RESPONSE_MODEL: model,
        CALLER: caller,
    }
    for kind, value in (
        ("input", prompt),
        ("output", output),
        ("cache_read", cache_read),
        ("cache_creation", cache_write),
    ):
        _token_usage.record(value, {**attributes, TOKEN_TYPE: kind})


def compaction(kind: str, *, tokens_before: int, tokens_after: int, prebuilt: bool) -> None:
    """One recorded compaction: counted by kind and phase, its tokens shed,
    and, for a window summary the pre-call hook made itself, a chat-path summary."""
    attributes = {KIND: kind, PHASE: phase()}
    _compactions.add(1, attributes)
    _tokens_shed.add(max(tokens_before - tokens_after, 0), attributes)
    if kind == "window_summary" and phase() == "pre_call" and not prebuilt:
        _chat_path_summaries.add(1)


def cache_break(provider: str, model: str) -> None:
    """A recorded call read less from the provider's cache than the unchanged prefix
    it was sent with (assistant.history.cache_check)."""
    _cache_breaks.add(1, {PROVIDER: provider, RESPONSE_MODEL: model})


def embedding_run(provider: str, model: str, *, tokens: int, capped: bool, failures: int) -> None:
    """One run of the embedding job (assistant.recall.embed_pending): its requests'
    tokens, whether it stopped at the day's cap, its requests refused for good."""
    attributes = {PROVIDER: provider, REQUEST_MODEL: model}
    if tokens:
        _embedding_tokens.add(tokens, attributes)
    if capped:
        _embeddings_capped.add(1, attributes)
    if failures:
        _embedding_failures.add(failures, attributes)


def lease_wait(outcome: str) -> None:
    """A caller waited for another process's summary: it was "released" in
    time, the wait "timed_out", or the holder "stalled" (no progress for
    SUMMARY_STALL_SECONDS, so the caller gave up on it)."""
    _lease_waits.add(1, {OUTCOME: outcome})


def observe_queued_stale(count: Callable[[], int | None]) -> None:
    """The gauge of exchanges queued for the worker longer than QUEUED_STALE_SECONDS,
    `count()` read each time the host's metric reader collects (None: no reading).
    Registered once per process, at start-up (assistant.apps)."""

    def observe(options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        value = count()
        return [] if value is None else [metrics.Observation(value)]

    _meter.create_observable_gauge(
        QUEUED_STALE,
        callbacks=[observe],
        unit="{exchange}",
        description=f"Exchanges queued for the worker longer than {QUEUED_STALE_SECONDS} s",
    )
