"""A summary kept as pending, for the next prefix rewrite to adopt: the
state columns it is stored in, a late lease holder's landed summary kept
instead of thrown away, and the worker asked for the model's summary of a
split the offline summarizer wrote (docs/operations.rst, the faults)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from django.db.models import Q

from assistant.history import PREBUILD_TASK, enqueue_on_commit, fresh_state, write_state
from assistant.models import Conversation, Message, MetadataKeys
from assistant.ops.logs import log_event
from assistant.summary.generate import (
    SummaryOutcome,
    bounded_summary,
    context_after,
    summary_room,
)
from assistant.window import WindowState


def pending_values(
    outcome: SummaryOutcome,
    base: int | None,
    through: int,
    anchor: Message | int | None,
    index: dict | None,
) -> dict[str, Any]:
    """The state columns of a pending summary of `base`..`through`."""
    return {
        MetadataKeys.PENDING_SUMMARY: outcome.text,
        MetadataKeys.PENDING_THROUGH_MESSAGE_ID: through,
        MetadataKeys.PENDING_BASE_MESSAGE_ID: base,
        MetadataKeys.PENDING_ANCHOR_MESSAGE_ID: getattr(anchor, "pk", anchor),
        MetadataKeys.PENDING_ARTIFACT_INDEX: index,
        MetadataKeys.PENDING_USAGE: {
            "model": outcome.model,
            "input_tokens": outcome.input_tokens,
            "output_tokens": outcome.output_tokens,
            **outcome.usage_details(),
        },
    }


def landed_on(base: int | None) -> Q:
    """A summary is pending that was built on `base` (the split a shift starts
    from): when that shift is written by the offline summarizer, it is a late
    holder's, landed between the takeover and the offline write, and kept."""
    return Q(pending_summary__isnull=False, pending_base_message_id=base)


def model_summary(state: WindowState) -> str | None:
    """The summary a new one is built on: the model's of the current split when it
    is ready to replace the offline one there (`ConversationMetadata.offline_replacement`)."""
    replacement = state.meta.offline_replacement
    if replacement is not None and replacement.through_id == state.through_id:
        return replacement.text
    return state.summary


def keep_landed_summary(
    state: WindowState,
    outcome: SummaryOutcome | None,
    through: int,
    anchor: Message | None,
    index: dict | None,
) -> bool:
    """A holder whose lease was taken over while its summarizer call ran keeps
    the summary that call returned as pending (built on `state`'s split), when
    the split has not moved since, or when the taker shifted with the offline
    summarizer from the same split: then the model's summary replaces the
    offline one at the next prefix rewrite (`adopt_pending`); when it stops
    short of the offline split, the worker extends it (`build_offline_replacement`).
    Discarded otherwise (a model's summary holds the window). Written without
    the lease, guarded by the split in the same UPDATE."""
    conversation_id = state.conversation_id
    base = state.through_id
    split = Q(compaction_through_message_id=base)  # IS NULL for no split
    # An offline summary (the holder's own fallback) replaces nothing.
    kept = (
        outcome is not None
        and not outcome.fallback
        and write_state(
            Conversation.objects.filter(split | Q(offline_shift__base=base), pk=conversation_id),
            pending_values(outcome, base, through, anchor, index),
        )
    )
    if not kept:
        log_event("summary_discarded", conversation_id=conversation_id, reason="lease_lost")
        return False
    log_event("summary_kept", conversation_id=conversation_id, reason="lease_lost", through=through)
    ask_for_replacement(conversation_id)
    return True


def ask_for_replacement(conversation_id: int) -> None:
    """Ask the worker for the model's summary of an offline split
    (`build_offline_replacement`) when it has one to make: none is pending
    yet, and no late holder's is still to land."""
    meta = fresh_state(conversation_id)
    offline = meta.offline_shift
    if not offline or meta.offline_replacement is not None:
        return
    pending = meta.pending
    started = pending is not None and pending.base_id == offline.get("base")
    if started or not offline.get("awaits_holder"):
        enqueue_on_commit(PREBUILD_TASK, conversation_id, unless_queued=True)


@dataclass(frozen=True)
class Adoption:
    """What adopting the pending summary stores (`adoption`): its text bounded to the
    room the window leaves it, its split and anchor, the rows it keeps verbatim."""

    summary: str
    through: int
    anchor: Message | None
    kept: list[Message]
    index: dict | None
    replaces: bool

    def window(self, state: WindowState) -> WindowState:
        """`state` as the adoption leaves it, in memory (what the next request carries:
        the inspector's view, assistant.precall.next_request)."""
        columns = {
            **state.columns,
            MetadataKeys.COMPACTION_SUMMARY: self.summary,
            MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: self.through,
            MetadataKeys.ARTIFACT_INDEX: self.index,
            MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID: self.anchor.pk if self.anchor else None,
            # As `_store_window` marks it: the provider's counts so far are stale.
            MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: state.rows[-1].pk,
        }
        # Pinned messages the new split moves past go to the pinned section, as loading
        # the stored window puts them (`load_window`).
        passed = [
            row
            for row in state.rows
            if row.pk <= self.through and row.pinned and row is not self.anchor
        ]
        return replace(
            state,
            columns=columns,
            rows=list(self.kept),
            anchor=self.anchor,
            pinned_rows=[*state.pinned_rows, *passed],
        )


def adoption(state: WindowState) -> Adoption | None:
    """The one reading of a pending summary's adoption, for `adopt_pending` and the
    inspector: None when there is none to adopt, or when the split it was built on
    is no longer reachable. (Whether it makes the context smaller is `adopt_pending`'s
    test, on the same figures.)"""
    columns = state.columns
    pending: str = columns.get(MetadataKeys.PENDING_SUMMARY) or ""
    through = columns.get(MetadataKeys.PENDING_THROUGH_MESSAGE_ID)
    replaces = state.meta.offline_replacement is not None
    reachable = {row.pk for row in state.rows}
    if replaces and state.through_id is not None:
        reachable.add(state.through_id)  # the offline split, replaced in place
    if not (state.meta.has_pending_summary or replaces) or through not in reachable:
        return None
    kept = [row for row in state.rows if row.pk > through]
    anchor_id = columns.get(MetadataKeys.PENDING_ANCHOR_MESSAGE_ID)
    anchor = next((row for row in [*state.rows, state.anchor] if row and row.pk == anchor_id), None)
    sent = [anchor, *kept] if anchor else kept
    index = columns.get(MetadataKeys.PENDING_ARTIFACT_INDEX)
    room = summary_room(state, state.config, sent)
    summary = bounded_summary(pending, index, room, state.config)
    return Adoption(summary, through, anchor, kept, index, replaces)


def adopts(state: WindowState, found: Adoption | None) -> bool:
    """Whether `adopt_pending` takes `found`: it makes the context smaller, or it is the
    model's summary replacing an offline one (whatever its size)."""
    if found is None:
        return False
    sent = [found.anchor, *found.kept] if found.anchor else found.kept
    return found.replaces or context_after(state, found.summary, sent) < state.estimated_tokens()
