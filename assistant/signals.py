"""Django signals a host connects to, to tell its users what happened to
their context (a client notice like "Compacted (157k -> 9.1k)").
`context_compacted` and `emergency_compaction` are sent once the transaction
that recorded the compaction commits (at once outside a transaction; never when
it rolls back), by `assistant.history.events.record_compaction`, the one place
compaction events are recorded. `compaction_event` is sent as a compaction
starts and as it ends (docs/chat-loop.rst, "Compaction events"). Receivers get
keyword arguments only, with `sender=Conversation`. A receiver that raises is
logged and the compaction goes on.

`acp_updates` turns one `CompactionNotice` into the Agent Client Protocol's
session updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.dispatch import Signal

#: A notice's phase: a compaction's start, or its one end.
STARTED = "started"
#: See STARTED.
ENDED = "ended"
#: An end's status: the compaction was made and recorded.
COMPLETED = "completed"
#: An end's status: it failed (`CompactionNotice.error` says why).
FAILED = "failed"
#: An end's status: there was nothing to do, or another worker's compaction landed first.
SKIPPED = "skipped"


@dataclass(frozen=True)
class CompactionNotice:
    """One start or end of a compaction. `compaction_id` (a uuid4, as text) is given
    at the start and carried by its one end; `kind` is a CompactionEvent.Kind value
    (the end's: that of the event recorded, for a staff action its most telling
    part); `tokens_before` the request's size before it. The end adds `status`
    (completed, failed or skipped), `tokens_after` and `event_id` (the CompactionEvent
    row, where one was written: always when completed), `summary` (where one was
    made) or `error` (failed)."""

    compaction_id: str
    conversation_id: int
    phase: str  # STARTED or ENDED
    kind: str
    tokens_before: int
    status: str | None = None  # None at the start
    tokens_after: int | None = None
    summary: str | None = None
    error: str | None = None
    event_id: int | None = None
    acting_user_id: int | None = None


#: compaction_event(sender, notice): a CompactionNotice, at a compaction's start and at
#: its one end, sent as it happens (not on commit), on the chat path and on the worker.
compaction_event = Signal()

# ACP's status of each end (agentclientprotocol.com, "Session Compaction", ACP v1):
# it has no "skipped"; a compaction that changed nothing ends as "cancelled".
_ACP_STATUS = {COMPLETED: "completed", FAILED: "failed", SKIPPED: "cancelled"}


def acp_updates(notice: CompactionNotice) -> list[dict[str, Any]]:
    """The Agent Client Protocol session updates (the `update` of a `session/update`
    notification; the host adds its `sessionId`) for one notice, in order.

    Shapes from ACP v1's session compaction (the Session Compaction RFD, Completed and
    stabilized for ACP v1 and the v2 baseline on 2026-10-09; the schema crate
    agent-client-protocol 3.3.0, `schema::v1::CompactionUpdate` and
    `CompactionSummaryChunk`): a start is a `compaction_update` with
    `status: "in_progress"`; an end with a summary first streams it as one
    `compaction_summary_chunk` (one text content block), then the terminal
    `compaction_update`: `completed`, `failed` with its `error`, or `cancelled` for a
    compaction that was skipped. `_meta` carries what ACP has no field for (the kind
    and the token figures). Clients opt in with
    `clientCapabilities.session.compaction` under ACP v1."""
    meta: dict[str, Any] = {"kind": notice.kind, "tokensBefore": notice.tokens_before}
    if notice.phase == STARTED:
        update = {"compactionId": notice.compaction_id, "status": "in_progress", "_meta": meta}
        return [{"sessionUpdate": "compaction_update", **update}]
    updates: list[dict[str, Any]] = []
    if notice.summary and notice.status == COMPLETED:
        updates.append(
            {
                "sessionUpdate": "compaction_summary_chunk",
                "compactionId": notice.compaction_id,
                "content": {"type": "text", "text": notice.summary},
            }
        )
    if notice.tokens_after is not None:
        meta["tokensAfter"] = notice.tokens_after
    end: dict[str, Any] = {
        "sessionUpdate": "compaction_update",
        "compactionId": notice.compaction_id,
        "status": _ACP_STATUS[notice.status or SKIPPED],
    }
    if notice.status == FAILED and notice.error:
        end["error"] = notice.error
    end["_meta"] = meta
    updates.append(end)
    return updates


#: context_compacted(sender, conversation_id, event_id, kind, tokens_before,
#: tokens_after, window, share_of_window, acting_user_id): any compaction
#: (kind is a CompactionEvent.Kind value); share_of_window is tokens_after
#: over the context window of the conversation's model (that of its newest
#: answer; 0.06 for 6%). What tokens_before and tokens_after measure:
#: assistant.history.figures.measures (docs/admin.rst, "Token figures").
context_compacted = Signal()

#: emergency_compaction(sender, conversation_id, event_id, level, tokens_before,
#: tokens_after, acting_user_id): an emergency level ran (1 or 2), sent
#: after context_compacted for the same event.
emergency_compaction = Signal()
