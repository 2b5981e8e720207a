"""The app's Django settings other than the two dicts, each with its type, default
and range, declared and checked as the dicts' keys are (assistant.settings.keys).

A host project sets only the ones it changes (usually an API key); reading one
that is not set gives the default below, and a wrong one raises ImproperlyConfigured
naming it (`manage.py check` reports each: assistant.E001 and E002). The thresholds live in
`ASSISTANT_COMPACTION` (assistant/settings/conf.py) and the cleanup schedule in
`ASSISTANT_CLEANUP` (assistant/settings/cleanup.py). This repository's demo project
reads each from the environment, with these defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from assistant.settings.keys import checked, declared_keys, declared_types, default_of, key

# pgvector's HNSW index takes vectors of up to 2,000 dimensions
# (assistant.recall.vectors.MAX_INDEXED_DIMENSIONS): the most an embedding may have.
MAX_EMBEDDING_DIMENSIONS = 2_000


@dataclass(frozen=True)
class AppSettings:
    # Which summarizer answers: anthropic, openai, gemini, gemini_interactions (Gemini's
    # Interactions API, with GEMINI_*'s key and models), offline, or auto (the first provider
    # whose key is found: settings first, then the SDKs' environment variables). Any case;
    # blank is auto.
    ASSISTANT_SUMMARIZER: Literal[
        "anthropic", "openai", "gemini", "gemini_interactions", "offline", "auto"
    ] = key("auto", any_case=True, blank_is_default=True)
    # Answer with the offline summarizer when the provider fails.
    ASSISTANT_SUMMARY_FALLBACK: bool = True
    # Window of a model missing from the built-in table.
    ASSISTANT_DEFAULT_CONTEXT_WINDOW: int = key(200_000, at_least=1)
    # First delay before a rate-limited summarizer is retried by the post-exchange task.
    ASSISTANT_PROVIDER_RETRY_SECONDS: float = key(10.0, at_least=0)
    # Deliveries of one task (retries and redeliveries included) before it is dropped.
    ASSISTANT_MAX_TASK_DELIVERIES: int = key(20, at_least=1)
    ASSISTANT_HEALTHZ_CHECK_WORKER: bool = True
    # Bound of each Redis round trip of /readyz's worker check.
    ASSISTANT_HEALTHZ_WORKER_TIMEOUT: float = key(0.3, above=0)
    # The worker check's answer is reused this long per web process.
    ASSISTANT_HEALTH_WORKER_CACHE_SECONDS: float = key(10.0, at_least=0)
    # Bound of each Redis round trip of an enqueue on the chat path.
    ASSISTANT_ENQUEUE_TIMEOUT_SECONDS: float = key(0.5, above=0)
    # While a conversation's task waits in the queue, enqueueing it again is skipped.
    ASSISTANT_QUEUED_MARKER_SECONDS: int = key(900, at_least=1)
    ANTHROPIC_API_KEY: str = key("", secret=True)
    ANTHROPIC_BASE_URL: str | None = None
    ANTHROPIC_SUMMARY_MODEL: str = "claude-haiku-4-5"
    ANTHROPIC_CHAT_MODEL: str = "claude-sonnet-4-6"
    GEMINI_API_KEY: str = key("", secret=True)
    GEMINI_BASE_URL: str | None = None
    GEMINI_SUMMARY_MODEL: str = "gemini-2.5-flash-lite"
    GEMINI_CHAT_MODEL: str = "gemini-2.5-flash"
    OPENAI_API_KEY: str = key("", secret=True)
    # Any OpenAI-compatible server (vLLM, Ollama, OpenRouter, LiteLLM's proxy).
    OPENAI_BASE_URL: str | None = None
    OPENAI_SUMMARY_MODEL: str = "gpt-4.1-mini"
    OPENAI_CHAT_MODEL: str = "gpt-4.1"
    LLM_TIMEOUT_SECONDS: float = key(30.0, above=0)
    LLM_MAX_RETRIES: int = key(2, at_least=0)
    LLM_RETRY_INITIAL_DELAY: float = key(1.0, at_least=0)
    LLM_RETRY_MAX_DELAY: float = key(8.0, at_least=0)
    SUMMARY_MAX_OUTPUT_TOKENS: int = key(2048, at_least=1)
    # Redis transport's own default; retry countdowns stay below half of it.
    CELERY_BROKER_VISIBILITY_TIMEOUT: int = key(3600, at_least=1)
    # Semantic recall's embeddings (docs/operations.rst, "Where embeddings come from"): which
    # provider's model embeds the summaries and originals (its key and base URL are the
    # summarizer's: OPENAI_*, GEMINI_*, VOYAGE_*; "local": the local-embeddings extra's
    # all-MiniLM-L6-v2), or off. One model per deployment. Any case; blank is off.
    ASSISTANT_EMBEDDINGS: Literal["off", "openai", "gemini", "voyage", "local"] = key(
        "off", any_case=True, blank_is_default=True
    )
    # Blank: the provider's default (text-embedding-3-small, gemini-embedding-001,
    # voyage-3.5, all-MiniLM-L6-v2).
    ASSISTANT_EMBEDDING_MODEL: str = ""
    # 0: the model's default (1536, 768, 1024, 384); a count the model cannot produce is
    # refused, and so is one over pgvector's HNSW limit.
    ASSISTANT_EMBEDDING_DIMENSIONS: int = key(0, at_least=0, at_most=MAX_EMBEDDING_DIMENSIONS)
    # Tokens the worker may send to the embedding model per day (the cap of its requests).
    ASSISTANT_EMBEDDING_DAILY_TOKENS: int = key(2_000_000, at_least=0)
    VOYAGE_API_KEY: str = key("", secret=True)
    VOYAGE_BASE_URL: str | None = None
    # USD per million tokens, per model, over the providers' own tables (assistant/providers/:
    # docs/providers.rst): {"model": {"input", "output", "cache_read", "cache_write"}}. A
    # dated name like claude-haiku-4-5-20251001 takes the price of its longest listed prefix.
    ASSISTANT_MODEL_PRICES: dict[str, dict[str, float]] = field(default_factory=dict)


# What ASSISTANT_SUMMARIZER may say.
SUMMARIZERS: tuple[str, ...] = get_args(declared_types(AppSettings)["ASSISTANT_SUMMARIZER"])
# What ASSISTANT_EMBEDDINGS may say.
EMBEDDING_CHOICES: tuple[str, ...] = get_args(declared_types(AppSettings)["ASSISTANT_EMBEDDINGS"])


def app_setting(name: str) -> Any:
    """settings.<name> when the project sets it, else its default; checked on every
    read (assistant.settings.keys), so a wrong one raises ImproperlyConfigured naming it."""
    spec = declared_keys(AppSettings)[name]
    value = getattr(settings, name, default_of(spec))
    return checked(name, declared_types(AppSettings)[name], spec, value)


def default(name: str) -> Any:
    """The default of one setting (for a project's settings module that reads the environment)."""
    return default_of(declared_keys(AppSettings)[name])


def app_setting_problems() -> dict[str, str]:
    """Each plain setting the project sets that the app refuses, with the reason
    (for `manage.py check`)."""
    problems: dict[str, str] = {}
    for name in declared_keys(AppSettings):
        try:
            app_setting(name)
        except ImproperlyConfigured as refused:
            problems[name] = str(refused)
    return problems
