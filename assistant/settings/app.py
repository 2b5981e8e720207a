"""The app's Django settings other than the two dicts, each with its default.

A host project sets only the ones it changes (usually an API key); reading one
that is not set gives the default below. The thresholds live in
`ASSISTANT_COMPACTION` (assistant/settings/conf.py) and the cleanup schedule in
`ASSISTANT_CLEANUP` (assistant/settings/schedule.py). This repository's demo project
reads each from the environment, with these defaults.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Which summarizer answers: anthropic, openai, gemini, offline, or auto (the first provider
    # whose key is found: settings first, then the SDKs' environment variables).
    "ASSISTANT_SUMMARIZER": "auto",
    # Answer with the offline summarizer when the provider fails.
    "ASSISTANT_SUMMARY_FALLBACK": True,
    # Window of a model missing from the built-in table.
    "ASSISTANT_DEFAULT_CONTEXT_WINDOW": 200_000,
    # First delay before a rate-limited summarizer is retried by the post-exchange task.
    "ASSISTANT_PROVIDER_RETRY_SECONDS": 10.0,
    # Deliveries of one task (retries and redeliveries included) before it is dropped.
    "ASSISTANT_MAX_TASK_DELIVERIES": 20,
    "ASSISTANT_HEALTHZ_CHECK_WORKER": True,
    # Bound of each Redis round trip of /readyz's worker check.
    "ASSISTANT_HEALTHZ_WORKER_TIMEOUT": 0.3,
    # The worker check's answer is reused this long per web process.
    "ASSISTANT_HEALTH_WORKER_CACHE_SECONDS": 10.0,
    # Bound of each Redis round trip of an enqueue on the chat path.
    "ASSISTANT_ENQUEUE_TIMEOUT_SECONDS": 0.5,
    # While a conversation's task waits in the queue, enqueueing it again is skipped.
    "ASSISTANT_QUEUED_MARKER_SECONDS": 900,
    "ANTHROPIC_API_KEY": "",
    "ANTHROPIC_BASE_URL": None,
    "ANTHROPIC_SUMMARY_MODEL": "claude-haiku-4-5",
    "ANTHROPIC_CHAT_MODEL": "claude-sonnet-4-6",
    "GEMINI_API_KEY": "",
    "GEMINI_BASE_URL": None,
    "GEMINI_SUMMARY_MODEL": "gemini-2.5-flash-lite",
    "GEMINI_CHAT_MODEL": "gemini-2.5-flash",
    "OPENAI_API_KEY": "",
    # Any OpenAI-compatible server (vLLM, Ollama, OpenRouter, LiteLLM's proxy).
    "OPENAI_BASE_URL": None,
    "OPENAI_SUMMARY_MODEL": "gpt-4.1-mini",
    "OPENAI_CHAT_MODEL": "gpt-4.1",
    "LLM_TIMEOUT_SECONDS": 30.0,
    "LLM_MAX_RETRIES": 2,
    "LLM_RETRY_INITIAL_DELAY": 1.0,
    "LLM_RETRY_MAX_DELAY": 8.0,
    "SUMMARY_MAX_OUTPUT_TOKENS": 2048,
    # Redis transport's own default; retry countdowns stay below half of it.
    "CELERY_BROKER_VISIBILITY_TIMEOUT": 3600,
    # USD per million tokens, per model, over the providers' own tables (assistant/llm/:
    # docs/providers.rst): {"model": {"input", "output", "cache_read", "cache_write"}}. A
    # dated name like claude-haiku-4-5-20251001 takes the price of its longest listed prefix.
    "ASSISTANT_MODEL_PRICES": {},
}


def app_setting(name: str) -> Any:
    """settings.<name> when the project sets it, else the default above."""
    return getattr(settings, name, DEFAULTS[name])


def default(name: str) -> Any:
    """The default of one setting (for a project's settings module that reads the environment)."""
    return DEFAULTS[name]
