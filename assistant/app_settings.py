"""The app's Django settings other than the two dicts, each with its default.

A host project sets only the ones it changes (usually an API key); reading one
that is not set gives the default below. The thresholds live in
`ASSISTANT_COMPACTION` (assistant/conf.py) and the cleanup schedule in
`ASSISTANT_CLEANUP` (assistant/cleanup_conf.py). This repository's demo project
reads each from the environment, with these defaults.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Which summarizer answers: anthropic, gemini, offline, or auto (the provider whose key is set).
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
    "ASSISTANT_HEALTHZ_WORKER_TIMEOUT": 1.0,
    # A worker ping's answer is reused this long per web process.
    "ASSISTANT_HEALTH_WORKER_CACHE_SECONDS": 30.0,
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
    "LLM_TIMEOUT_SECONDS": 30.0,
    "LLM_MAX_RETRIES": 2,
    "LLM_RETRY_INITIAL_DELAY": 1.0,
    "LLM_RETRY_MAX_DELAY": 8.0,
    "SUMMARY_MAX_OUTPUT_TOKENS": 2048,
    # Redis transport's own default; retry countdowns stay below half of it.
    "CELERY_BROKER_VISIBILITY_TIMEOUT": 3600,
    # USD per million tokens, per model (a dated name like claude-haiku-4-5-20251001 takes the
    # price of its longest listed prefix). A host's entries replace these model by model.
    # Anthropic: cache read 0.1x, cache write (5-minute cache) 1.25x of input. Gemini 2.5
    # implicit caching: cached input at 0.1x, no write premium (written at the input price).
    "ASSISTANT_MODEL_PRICES": {
        "claude-opus-4-6": {"input": 5.0, "output": 25.0, "cache_read": 0.5, "cache_write": 6.25},
        "claude-opus-4-5": {"input": 5.0, "output": 25.0, "cache_read": 0.5, "cache_write": 6.25},
        "claude-sonnet-4": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75},
        "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cache_read": 0.1, "cache_write": 1.25},
        "gemini-2.5-pro": {"input": 1.25, "output": 10.0, "cache_read": 0.125, "cache_write": 1.25},
        "gemini-2.5-flash": {"input": 0.3, "output": 2.5, "cache_read": 0.03, "cache_write": 0.3},
        "gemini-2.5-flash-lite": {
            "input": 0.1,
            "output": 0.4,
            "cache_read": 0.01,
            "cache_write": 0.1,
        },
        "offline-summarizer": {"input": 0.0, "output": 0.0, "cache_read": 0.0, "cache_write": 0.0},
    },
}


def app_setting(name: str) -> Any:
    """settings.<name> when the project sets it, else the default above."""
    return getattr(settings, name, DEFAULTS[name])


def default(name: str) -> Any:
    """The default of one setting (for a project's settings module that reads the environment)."""
    return DEFAULTS[name]
