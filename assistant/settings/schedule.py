"""Settings of the scheduled cleanup jobs: `settings.ASSISTANT_CLEANUP`, and
the Celery beat schedule built from it.

Imported by config/settings.py, so nothing here touches models or the
database. Periods are in seconds, retentions in days, grace periods in
seconds. A period of None disables the job's beat entry; a retention of None
disables the job itself (originals are kept forever by default).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class CleanupConfig:
    # Purge conversations soft-deleted longer than this (with messages and events).
    PURGE_PERIOD_SECONDS: float | None = 3600
    PURGE_RETENTION_DAYS: float | None = 30
    # Conversations per purge transaction (each takes its messages along).
    PURGE_BATCH_SIZE: int = 50
    # Drop the verbatim originals of messages compacted longer ago than this.
    DROP_ORIGINALS_PERIOD_SECONDS: float | None = 86400
    DROP_ORIGINALS_RETENTION_DAYS: float | None = None
    # Re-enqueue post-exchange work that never ran, once this old.
    SWEEP_PERIOD_SECONDS: float | None = 300
    SWEEP_GRACE_SECONDS: float = 120
    # Enqueue deferred fork summaries still missing after this long.
    FORK_SUMMARY_PERIOD_SECONDS: float | None = 300
    FORK_SUMMARY_GRACE_SECONDS: float = 120
    # Release expired summary leases; clear cached summaries of a vanished split.
    STALE_STATE_PERIOD_SECONDS: float | None = 600
    # A conversation touched (message, exchange) this recently is in use: never purged.
    IN_USE_GRACE_SECONDS: float = 3600
    # Rows per batch for every other job; a task re-enqueues itself while work remains.
    BATCH_SIZE: int = 500


_POSITIVE_INTS = {"PURGE_BATCH_SIZE", "BATCH_SIZE"}
_OPTIONAL = {
    "PURGE_PERIOD_SECONDS",
    "PURGE_RETENTION_DAYS",
    "DROP_ORIGINALS_PERIOD_SECONDS",
    "DROP_ORIGINALS_RETENTION_DAYS",
    "SWEEP_PERIOD_SECONDS",
    "FORK_SUMMARY_PERIOD_SECONDS",
    "STALE_STATE_PERIOD_SECONDS",
}


def _number(name: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ImproperlyConfigured(
            f"ASSISTANT_CLEANUP[{name!r}] must be a number, got {type(value).__name__}"
        )
    return value


def cleanup_config(overrides: dict[str, Any] | None = None) -> CleanupConfig:
    """Defaults merged with `overrides` (or settings.ASSISTANT_CLEANUP when
    not given); unknown keys and wrong types raise ImproperlyConfigured."""
    if overrides is None:
        from django.conf import settings

        overrides = getattr(settings, "ASSISTANT_CLEANUP", None) or {}
    if not isinstance(overrides, dict):
        raise ImproperlyConfigured("ASSISTANT_CLEANUP must be a dict (a JSON object)")
    known = {f.name for f in fields(CleanupConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ImproperlyConfigured(f"Unknown ASSISTANT_CLEANUP keys: {', '.join(unknown)}")
    values: dict[str, Any] = {name: _checked(name, value) for name, value in overrides.items()}
    return CleanupConfig(**values)


def _checked(name: str, value: Any) -> int | float | None:
    """One ASSISTANT_CLEANUP value, as its key allows it; ImproperlyConfigured when not."""
    if value is None:
        if name not in _OPTIONAL:
            raise ImproperlyConfigured(f"ASSISTANT_CLEANUP[{name!r}] cannot be null")
        return None
    number = _number(name, value)
    if name in _POSITIVE_INTS:
        if not isinstance(number, int) or number < 1:
            raise ImproperlyConfigured(
                f"ASSISTANT_CLEANUP[{name!r}] must be a positive integer, got {value!r}"
            )
    elif name.endswith("_PERIOD_SECONDS") and number <= 0:
        raise ImproperlyConfigured(
            f"ASSISTANT_CLEANUP[{name!r}] must be positive (or null to disable), got {value!r}"
        )
    elif number < 0:
        raise ImproperlyConfigured(
            f"ASSISTANT_CLEANUP[{name!r}] must not be negative, got {value!r}"
        )
    return number


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
