"""TODO docstring."""

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
