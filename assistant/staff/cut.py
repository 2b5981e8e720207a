"""Where to cut (docs/admin.rst, "Summarize before a message"): staff, or a host's
user, choose the first message that stays verbatim; everything before it goes into
the window summary (a new summary version, undone by reverting it). The cut falls
on the split boundary at or before the message (a turn's user message, or a step
of the last turn), so no tool call is parted from its results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from assistant.history import an_id, token_change
from assistant.models import Conversation, Message
from assistant.settings.conf import compaction_config
from assistant.staff.previews import Outcome, Preview
from assistant.summary import cut_start, shift_window
from assistant.window import WindowState, load_window, split_parts


@dataclass(frozen=True)
class CutPreview(Preview):
    # The message ids the cut summarizes, and those the next request keeps verbatim.
    summarized: tuple[int, ...] = ()
    verbatim: tuple[int, ...] = ()


def _checked(conversation: Conversation, message_id: Any) -> WindowState:
    """The window, once `message_id` is one of the conversation's messages after its
    split: else ValidationError `message_not_found` or `already_summarized`."""
    an_id("message_id", message_id)
    if not Message.objects.filter(conversation_id=conversation.pk, pk=message_id).exists():
        raise ValidationError(
            f"Message {message_id} is not one of conversation {conversation.pk}'s.",
            code="message_not_found",
        )
    state = load_window(conversation.pk)
    if state.through_id is not None and message_id <= state.through_id:
        raise ValidationError(
            f"Message {message_id} is already summarized: the window summary covers the "
            f"messages up to #{state.through_id}.",
            code="already_summarized",
        )
    return state


def summarize_before_preview(conversation: Conversation, message_id: int) -> CutPreview:
    """What `summarize_before` will do, computed as it computes it (read-only)."""
    state = _checked(conversation, message_id)
    start = cut_start(state, message_id)
    summarized = split_parts(state, start)[0] if start is not None else []
    tokens = state.context_tokens()
    if not summarized:
        return CutPreview(
            conversation.pk,
            tokens,
            [],
            f"nothing before message #{message_id} is left to summarize (the cut falls on "
            "the window's first turn)",
            verbatim=tuple(row.pk for row in state.rows),
        )
    ids = {row.pk for row in summarized}
    kept = tuple(row.pk for row in state.rows if row.pk not in ids)
    sentence = (
        f"messages #{summarized[0].pk} to #{summarized[-1].pk} ({len(summarized)}) go into "
        f"the window summary; {len(kept)} from #{kept[0]} on stay verbatim"
    )
    return CutPreview(
        conversation.pk, tokens, [sentence], "", tuple(row.pk for row in summarized), kept
    )


def summarize_before(conversation: Conversation, message_id: int) -> Outcome:
    """Summarize everything before the message (a summary version); the message and
    all after it stay verbatim. Kept only if the request gets smaller."""
    preview = summarize_before_preview(conversation, message_id)
    if not preview.summarized:
        return Outcome(conversation.pk, False, f"nothing changed: {preview.nothing_because}")
    before = preview.context_tokens
    shift_window(conversation.pk, compaction_config(), start_at=message_id, on_chat_path=False)
    state = load_window(conversation.pk)
    if state.through_id != preview.summarized[-1]:
        return Outcome(
            conversation.pk,
            False,
            "nothing changed: the summarizer gave no usable summary, or it would not make "
            "the request smaller",
        )
    return Outcome(
        conversation.pk,
        True,
        f"{len(preview.summarized)} message(s) before #{preview.verbatim[0]} summarized, "
        f"{token_change(before, state.context_tokens(), 'the request')}",
    )
