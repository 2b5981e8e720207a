"""The scheduled cleanup jobs (Celery beat and `manage.py cleanup`), and the purge
retention a deleted conversation is kept for. The schedule and its settings
are in assistant.settings.cleanup: the project's settings import it before
Django's apps are loaded.

- jobs: purge, dropping compacted originals, the missed-exchange sweep,
  missing fork summaries, stale state;
- retention: how long a deleted conversation is kept, and restoring one.

May import: history, metadata_keys, models, ops, settings, window.
See docs/architecture.rst.
"""

from assistant.cleanup.jobs import (
    JOBS,
    clear_stale_state,
    drop_compacted_originals,
    enqueue_missing_fork_summaries,
    pending_counts,
    purge_deleted_conversations,
    run_job,
    sweep_missed_exchanges,
)
from assistant.cleanup.retention import purge_after, purge_date, restore_deleted

__all__ = [
    "JOBS",
    "clear_stale_state",
    "drop_compacted_originals",
    "enqueue_missing_fork_summaries",
    "pending_counts",
    "purge_after",
    "purge_date",
    "purge_deleted_conversations",
    "restore_deleted",
    "run_job",
    "sweep_missed_exchanges",
]
