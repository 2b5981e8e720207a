"""A failed window summary backs off: which split failed, how many times,
and when the next try may run (doubling delays up to 2**10 x
SUMMARY_RETRY_SECONDS). See docs/architecture.rst."""

from __future__ import annotations

import time

from assistant.history import write_state
from assistant.models import MetadataKeys
from assistant.ops.logs import log_event
from assistant.summary.leases import Lease
from assistant.window import WindowState


def failure_blocks(state: WindowState, over_trigger_split: int | None = None) -> bool:
    """A summary failed lately from the current split: wait before the next
    try. Only a split made because the context is over the trigger
    (`over_trigger_split`, the last message it summarizes) goes on after a
    summary of another split was refused as not smaller: the newest step
    was too large to leave then, and a later split can summarize it. After an
    undone compaction (`hold_below_tokens`), the split it restored waits until the
    context has grown past that size, or that many messages (docs/compaction.rst,
    "Undoing the last compaction")."""
    failure = state.meta.summary_failure
    if "hold_below_tokens" in failure and failure.get("base") == state.through_id:
        return (
            state.context_tokens() < failure["hold_below_tokens"]
            and len(state.rows) < failure["hold_below_messages"]
        )
    if not state.meta.summary_backing_off(time.time()):
        return False
    refused = state.meta.summary_failure.get("through")
    return refused is None or over_trigger_split is None or refused == over_trigger_split


def record_failure(lease: Lease, state: WindowState, *, through: int | None = None) -> None:
    """Remember a failed summary from the current split, with a doubling
    delay; `through`: the split whose summary was refused as not smaller
    (None: the summarizer itself failed)."""
    failure = state.columns.get(MetadataKeys.SUMMARY_FAILURE) or {}
    attempts = failure.get("attempts", 0) + 1 if failure.get("base") == state.through_id else 1
    delay = state.config.SUMMARY_RETRY_SECONDS * 2 ** min(attempts - 1, 10)
    write_state(
        lease.holding(),
        {
            MetadataKeys.SUMMARY_FAILURE: {
                "base": state.through_id,
                "through": through,
                "attempts": attempts,
                "retry_at": time.time() + delay,
            }
        },
    )
    log_event("summary_failure_recorded", conversation_id=state.conversation_id, attempts=attempts)
