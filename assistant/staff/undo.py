"""Undo the last compaction (docs/compaction.rst, "Undoing the last compaction"):
the window shift it made is taken back, the summary, split, anchor and artifact
index it replaced put back from its event's details (`undo`), so the next request
is the one sent before it, with the messages that came since verbatim after it.
One action, one `restore` event naming the event it undid. The split it restored
then waits until the context has grown past the trigger (or its size at the undo,
if larger) by UNDO_MARGIN before it shifts again, so the same shift is not made
at the next call."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from assistant.history import compacting, record_compaction, token_change, write_state
from assistant.models import CompactionEvent, Conversation, MetadataKeys, SummaryVersion
from assistant.settings.conf import compaction_config
from assistant.staff.previews import Outcome, Preview
from assistant.summary import record_version
from assistant.tool_results import put_back_originals, restorable
from assistant.window import WindowState, load_window, refresh_size

# How far past the trigger (or past the context's size at the undo, if larger) the
# context must grow, in tokens or in messages, before the restored split shifts again.
UNDO_MARGIN = 0.10


# What a pre-built or offline summary of the undone split holds: stale once it is undone.
_STALE = (
    MetadataKeys.PENDING_SUMMARY,
    MetadataKeys.PENDING_THROUGH_MESSAGE_ID,
    MetadataKeys.PENDING_BASE_MESSAGE_ID,
    MetadataKeys.PENDING_USAGE,
    MetadataKeys.PENDING_ANCHOR_MESSAGE_ID,
    MetadataKeys.PENDING_ARTIFACT_INDEX,
    MetadataKeys.OFFLINE_SHIFT,
)


@dataclass(frozen=True)
class UndoPreview(Preview):
    event_id: int | None = None  # the compaction it undoes
    through_id: int | None = None  # the split it puts back (None: no summary)
    summary: str | None = None  # the summary it puts back


# The compactions whose events name the messages they compacted (`message_id(s)`).
_RESULT_KINDS = frozenset(
    {CompactionEvent.Kind.TOOL_RESULTS, CompactionEvent.Kind.DEDUP, CompactionEvent.Kind.MEDIA}
)


@dataclass(frozen=True)
class _Last:
    """The conversation's last compaction, what it changed and what it replaced."""

    event: CompactionEvent
    before: dict[str, Any] | None  # the window state its shift replaced (None: no shift)
    made: int | None  # the split its shift made
    compacted: list[int]  # the messages it compacted whose originals are still kept


def _compacted_ids(event: CompactionEvent) -> list[int]:
    """The messages the event (or one of its parts) compacted: tool results, stubs, media."""
    parts = [{**event.details, "kind": event.kind}, *event.details.get("parts", [])]
    ids: set[int] = set()
    for part in parts:
        if part.get("kind") in _RESULT_KINDS:
            ids.update(part.get("message_ids", []))
            if "message_id" in part:
                ids.add(part["message_id"])
    return sorted(ids)


def _last_compaction(conversation: Conversation) -> _Last:
    """The conversation's last compaction: else ValidationError `nothing_to_undo`,
    `already_undone`, `not_undoable` or `summary_moved`."""
    event = (
        CompactionEvent.objects.compactions()
        .filter(conversation_id=conversation.pk)
        .order_by("-id")
        .first()
    )
    if event is None:
        raise ValidationError("The conversation was never compacted.", code="nothing_to_undo")
    parts = [event.details, *event.details.get("parts", [])]
    undid = next((part["undid_event_id"] for part in parts if "undid_event_id" in part), None)
    if undid is not None:
        raise ValidationError(
            f"Its last compaction (event #{undid}) is already undone.", code="already_undone"
        )
    shifts = [part for part in parts if "undo" in part]
    compacted = list(
        restorable(conversation.pk)
        .filter(pk__in=_compacted_ids(event))
        .order_by("id")
        .values_list("id", flat=True)
    )
    if not shifts and not compacted:
        raise ValidationError(
            f"Its last compaction (event #{event.pk}, {event.get_kind_display()}) moved no "
            "window split and left no compacted message whose original is kept.",
            code="not_undoable",
        )
    if not shifts:
        return _Last(event, None, None, compacted)
    made = shifts[-1].get("through_message_id")
    state = load_window(conversation.pk)
    segment = next((part["segment"] for part in shifts if part.get("segment")), None)
    made_segment = state.segment is not None and segment == {
        "after": state.segment.after,
        "through": state.segment.through,
    }
    if state.through_id != made or (segment is not None and not made_segment):
        raise ValidationError(
            "The window moved since its last compaction: reload the page and look again.",
            code="summary_moved",
        )
    return _Last(event, shifts[0]["undo"], made, compacted)


def undo_compaction_preview(conversation: Conversation) -> UndoPreview:
    """What `undo_compaction` will put back (read-only); refused as it refuses."""
    last = _last_compaction(conversation)
    state = load_window(conversation.pk)
    changes = []
    before = last.before
    if before is not None:
        through = before["through"]
        back = (
            f"the window summary of the messages up to #{through}"
            if through is not None
            else "no window summary"
        )
        changes.append(
            f"event #{last.event.pk} undone: messages #{(through or 0) + 1} to #{last.made} "
            f"are sent verbatim again after {back}"
        )
        if state.segment is not None and before.get("segment") is None:
            changes[-1] = (
                f"event #{last.event.pk} undone: the messages after #{state.segment.after} up "
                f"to #{state.segment.through} are sent verbatim again in place of their "
                "segment summary"
            )
    if last.compacted:
        ids = ", ".join(f"#{pk}" for pk in last.compacted)
        changes.append(
            f"{'' if changes else f'event #{last.event.pk} undone: '}the message(s) it "
            f"compacted ({ids}) are sent whole again, and kept whole from now on"
        )
    return UndoPreview(
        conversation.pk,
        state.context_tokens(),
        changes,
        "",
        event_id=last.event.pk,
        through_id=before["through"] if before is not None else state.through_id,
        summary=before["summary"] if before is not None else state.summary,
    )


def undo_words(conversation: Conversation) -> Preview:
    """The preview for a confirmation page: a refusal is why nothing would change."""
    try:
        return undo_compaction_preview(conversation)
    except ValidationError as refused:
        tokens = load_window(conversation.pk).context_tokens()
        return Preview(conversation.pk, tokens, [], " ".join(refused.messages))


def undo_compaction(conversation: Conversation) -> Outcome:
    """Put back what the last compaction replaced (the window state its shift replaced,
    the originals of the messages it compacted), as one `restore` event."""
    last = _last_compaction(conversation)
    config = compaction_config()
    state = load_window(conversation.pk, config)
    tokens = state.context_tokens()
    with compacting(conversation.pk, CompactionEvent.Kind.RESTORE, tokens):
        with transaction.atomic():
            if last.before is not None:
                _put_back_window(conversation, state, last)
            restored = put_back_originals(conversation.pk, last.compacted)
        refresh_size(conversation.pk)
        after = load_window(conversation.pk, config)
        if last.before is not None:
            _hold(conversation.pk, last.before["through"], after.context_tokens(), len(after.rows))
        through = last.before["through"] if last.before is not None else state.through_id
        record_compaction(
            conversation.pk,
            CompactionEvent.Kind.RESTORE,
            tokens_before=tokens,
            tokens_after=after.context_tokens(),
            messages_affected=max(len(after.verbatim) - len(state.verbatim), 0) + len(restored),
            duration_ms=0,
            details={
                "undid_event_id": last.event.pk,
                "through_message_id": through,
                **({"message_ids": restored} if restored else {}),
            },
        )
    return Outcome(
        conversation.pk,
        True,
        f"compaction #{last.event.pk} undone, "
        f"{token_change(tokens, after.context_tokens(), 'the request')}",
    )


def _put_back_window(conversation: Conversation, state: WindowState, last: _Last) -> None:
    """The window state the shift replaced, written while the split is still the one
    it made (else ValidationError `summary_moved`), with its summary versions."""
    before = last.before
    assert before is not None  # the caller's check
    values = {
        MetadataKeys.COMPACTION_SUMMARY: before["summary"],
        MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: before["through"],
        MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID: before["anchor"],
        MetadataKeys.ARTIFACT_INDEX: before["artifact_index"],
        MetadataKeys.SEGMENT_SUMMARY: before.get("segment"),
    }
    same_split = Conversation.objects.filter(
        pk=conversation.pk, **{MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: last.made}
    )
    if not write_state(same_split, values, clear=_STALE):
        raise ValidationError(
            "The window shifted meanwhile: reload the page and look again.",
            code="summary_moved",
        )
    if before["summary"] and (before["summary"], before["through"]) != (
        state.summary,
        state.through_id,
    ):
        record_version(
            conversation.pk, before["summary"], before["through"], kind=SummaryVersion.Kind.REVERT
        )
    segment = before.get("segment")
    if segment is not None and state.segment is None:
        record_version(
            conversation.pk,
            segment["summary"],
            segment["through"],
            kind=SummaryVersion.Kind.REVERT,
            after=segment["after"],
        )


def _hold(conversation_id: int, base: int | None, tokens: int, rows: int) -> None:
    """The restored split shifts again only once the context has grown past the
    trigger, or its size now if larger, by UNDO_MARGIN (`failure_blocks`)."""
    config = compaction_config()
    hold = {
        "base": base,
        "through": None,
        "attempts": 0,
        "retry_at": 0,
        "hold_below_tokens": math.ceil(
            max(config.CONTEXT_TOKEN_THRESHOLD, tokens) * (1 + UNDO_MARGIN)
        ),
        "hold_below_messages": math.ceil(
            max(config.MAX_MESSAGES_BEFORE_SUMMARY, rows) * (1 + UNDO_MARGIN)
        ),
    }
    write_state(
        Conversation.objects.filter(
            pk=conversation_id, **{MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: base}
        ),
        {MetadataKeys.SUMMARY_FAILURE: hold},
    )
