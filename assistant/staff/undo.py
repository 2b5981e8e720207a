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
from assistant.window import load_window, refresh_size

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


def _last_shift(conversation: Conversation) -> tuple[CompactionEvent, dict[str, Any], int]:
    """The conversation's last compaction, the window state it replaced and the split it
    made: else ValidationError `nothing_to_undo`, `already_undone`, `not_undoable`
    or `summary_moved`."""
    event = CompactionEvent.objects.filter(conversation_id=conversation.pk).order_by("-id").first()
    if event is None:
        raise ValidationError("The conversation was never compacted.", code="nothing_to_undo")
    parts = [event.details, *event.details.get("parts", [])]
    undid = next((part["undid_event_id"] for part in parts if "undid_event_id" in part), None)
    if undid is not None:
        raise ValidationError(
            f"Its last compaction (event #{undid}) is already undone.", code="already_undone"
        )
    shifts = [part for part in parts if "undo" in part]
    if not shifts:
        raise ValidationError(
            f"Its last compaction (event #{event.pk}, {event.get_kind_display()}) moved no "
            "window split: restore compacted originals instead.",
            code="not_undoable",
        )
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
    return event, shifts[0]["undo"], made


def undo_compaction_preview(conversation: Conversation) -> UndoPreview:
    """What `undo_compaction` will put back (read-only); refused as it refuses."""
    event, before, made = _last_shift(conversation)
    state = load_window(conversation.pk)
    through = before["through"]
    back = (
        f"the window summary of the messages up to #{through}"
        if through is not None
        else "no window summary"
    )
    change = (
        f"event #{event.pk} undone: messages #{(through or 0) + 1} to #{made} are sent verbatim "
        f"again after {back}"
    )
    if state.segment is not None and before.get("segment") is None:
        change = (
            f"event #{event.pk} undone: the messages after #{state.segment.after} up to "
            f"#{state.segment.through} are sent verbatim again in place of their segment summary"
        )
    return UndoPreview(
        conversation.pk,
        state.context_tokens(),
        [change],
        "",
        event_id=event.pk,
        through_id=through,
        summary=before["summary"],
    )


def undo_words(conversation: Conversation) -> Preview:
    """The preview for a confirmation page: a refusal is why nothing would change."""
    try:
        return undo_compaction_preview(conversation)
    except ValidationError as refused:
        tokens = load_window(conversation.pk).context_tokens()
        return Preview(conversation.pk, tokens, [], " ".join(refused.messages))


def undo_compaction(conversation: Conversation) -> Outcome:
    """Put back the window state the last compaction replaced, as one `restore` event."""
    event, before, made = _last_shift(conversation)
    config = compaction_config()
    state = load_window(conversation.pk, config)
    tokens = state.context_tokens()
    with compacting(conversation.pk, CompactionEvent.Kind.RESTORE, tokens):
        values = {
            MetadataKeys.COMPACTION_SUMMARY: before["summary"],
            MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: before["through"],
            MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID: before["anchor"],
            MetadataKeys.ARTIFACT_INDEX: before["artifact_index"],
            MetadataKeys.SEGMENT_SUMMARY: before.get("segment"),
        }
        same_split = Conversation.objects.filter(
            pk=conversation.pk, **{MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: made}
        )
        with transaction.atomic():
            stored = write_state(
                same_split,
                values,
                clear=_STALE,
            )
            if not stored:
                raise ValidationError(
                    "The window shifted meanwhile: reload the page and look again.",
                    code="summary_moved",
                )
            if before["summary"] and (before["summary"], before["through"]) != (
                state.summary,
                state.through_id,
            ):
                record_version(
                    conversation.pk,
                    before["summary"],
                    before["through"],
                    kind=SummaryVersion.Kind.REVERT,
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
        refresh_size(conversation.pk)
        after = load_window(conversation.pk, config)
        _hold(conversation.pk, before["through"], after.context_tokens(), len(after.rows))
        record_compaction(
            conversation.pk,
            CompactionEvent.Kind.RESTORE,
            tokens_before=tokens,
            tokens_after=after.context_tokens(),
            messages_affected=len(after.verbatim) - len(state.verbatim),
            duration_ms=0,
            details={"undid_event_id": event.pk, "through_message_id": before["through"]},
        )
    return Outcome(
        conversation.pk,
        True,
        f"compaction #{event.pk} undone, "
        f"{token_change(tokens, after.context_tokens(), 'the request')}",
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
