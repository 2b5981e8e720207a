"""Settings of the scheduled cleanup jobs: `settings.ASSISTANT_CLEANUP`, and
the Celery beat schedule built from it.

Imported by config/settings.py, so nothing here touches models or the
database. Periods are in seconds, retentions in days, grace periods in
seconds. A period of None disables the job's beat entry; a retention of None
disables the job itself (originals are kept forever by default). Each key is
declared and checked as ASSISTANT_COMPACTION's are (assistant.settings.keys).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from assistant.settings.keys import key, validated


@dataclass(frozen=True)
class CleanupConfig:
    # Purge conversations soft-deleted longer than this (with messages and events).
    PURGE_PERIOD_SECONDS: float | None = key(3600, above=0)
    PURGE_RETENTION_DAYS: float | None = key(30, at_least=0)
    # Conversations per purge transaction (each takes its messages along).
    PURGE_BATCH_SIZE: int = key(50, at_least=1)
    # Drop the verbatim originals of messages compacted longer ago than this.
    DROP_ORIGINALS_PERIOD_SECONDS: float | None = key(86400, above=0)
    DROP_ORIGINALS_RETENTION_DAYS: float | None = key(None, at_least=0)
    # Re-enqueue post-exchange work that never ran, once this old.
    SWEEP_PERIOD_SECONDS: float | None = key(300, above=0)
    SWEEP_GRACE_SECONDS: float = key(120, at_least=0)
    # Enqueue deferred fork summaries still missing after this long.
    FORK_SUMMARY_PERIOD_SECONDS: float | None = key(300, above=0)
    FORK_SUMMARY_GRACE_SECONDS: float = key(120, at_least=0)
    # Release expired summary leases; clear cached summaries of a vanished split.
    STALE_STATE_PERIOD_SECONDS: float | None = key(600, above=0)
    # Embed the texts semantic recall searches that are still without vectors of the
    # current model (catch-up, a change of model), and delete the replaced ones.
    EMBEDDING_PERIOD_SECONDS: float | None = key(300, above=0)
    # A conversation touched (message, exchange) this recently is in use: never purged.
    IN_USE_GRACE_SECONDS: float = key(3600, at_least=0)
    # Rows per batch for every other job; a task re-enqueues itself while work remains.
    BATCH_SIZE: int = key(500, at_least=1)


def cleanup_config(overrides: dict[str, Any] | None = None) -> CleanupConfig:
    """Defaults merged with `overrides` (or settings.ASSISTANT_CLEANUP when not
    given), every key checked as ASSISTANT_COMPACTION's are (assistant.settings.keys)."""
    if overrides is None:
        from django.conf import settings

        overrides = getattr(settings, "ASSISTANT_CLEANUP", None) or {}
    return CleanupConfig(**validated("ASSISTANT_CLEANUP", CleanupConfig, overrides))


def cleanup_settings(overrides: dict[str, Any]) -> dict[str, Any]:
    """The full, validated ASSISTANT_CLEANUP dict for settings.py."""
    return asdict(cleanup_config(overrides))


# (beat entry name, task name, period key, key that must not be None for the job to run)
_JOBS = (
    (
        "assistant-purge-deleted-conversations",
        "assistant.tasks.purge_deleted_conversations_task",
        "PURGE_PERIOD_SECONDS",
        "PURGE_RETENTION_DAYS",
    ),
    (
        "assistant-drop-compacted-originals",
        "assistant.tasks.drop_compacted_originals_task",
        "DROP_ORIGINALS_PERIOD_SECONDS",
        "DROP_ORIGINALS_RETENTION_DAYS",
    ),
    (
        "assistant-sweep-missed-exchanges",
        "assistant.tasks.sweep_missed_exchanges_task",
        "SWEEP_PERIOD_SECONDS",
        None,
    ),
    (
        "assistant-missing-fork-summaries",
        "assistant.tasks.missing_fork_summaries_task",
        "FORK_SUMMARY_PERIOD_SECONDS",
        None,
    ),
    (
        "assistant-clear-stale-state",
        "assistant.tasks.clear_stale_state_task",
        "STALE_STATE_PERIOD_SECONDS",
        None,
    ),
    (
        "assistant-embed-texts",
        "assistant.tasks.embed_texts_task",
        "EMBEDDING_PERIOD_SECONDS",
        None,
    ),
)


def beat_schedule(config: dict[str, Any] | CleanupConfig) -> dict[str, dict[str, Any]]:
    """CELERY_BEAT_SCHEDULE entries for the enabled jobs. Each run expires
    after one period, so runs queued during an outage do not pile up."""
    if isinstance(config, dict):
        config = cleanup_config(config)
    schedule: dict[str, dict[str, Any]] = {}
    for entry, task, period_key, enabled_key in _JOBS:
        period = getattr(config, period_key)
        if period is None or (enabled_key and getattr(config, enabled_key) is None):
            continue
        schedule[entry] = {
            "task": task,
            "schedule": float(period),
            "options": {"expires": float(period)},
        }
    return schedule
