"""Where to cut (docs/compaction.rst, "Choosing where to cut"): staff, or a host's
user, choose a message. Before it: the first message that stays verbatim;
everything before it goes into the window summary. After it: the last message of
the earlier part that stays as it is; the messages after it, up to the newest
step, become a summarized segment (assistant.summary.segment). Each is a new
summary version that `undo_compaction` takes back. A cut falls on a split boundary
(a turn's user message, or a step of the last turn), so no tool call is parted
from its results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from assistant.history import an_id, token_change
from assistant.models import Conversation, Message
from assistant.settings.conf import compaction_config
from assistant.staff.previews import Outcome, Preview
from assistant.summary import cut_start, segment_after, shift_window, summarize_segment
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


def _cut_preview(
    conversation: Conversation, state: WindowState, summarized: list[Message], sentence: str
) -> CutPreview:
    """The preview of a cut that summarizes `summarized`: the rest is sent verbatim."""
    ids = {row.pk for row in summarized}
    kept = tuple(row.pk for row in state.verbatim if row.pk not in ids)
    return CutPreview(
        conversation.pk,
        state.context_tokens(),
        [sentence.format(kept=len(kept))],
        "",
        tuple(row.pk for row in summarized),
        kept,
    )


def _span(rows: list[Message]) -> str:
    return f"messages #{rows[0].pk} to #{rows[-1].pk} ({len(rows)})"


def summarize_before_preview(conversation: Conversation, message_id: int) -> CutPreview:
    """What `summarize_before` will do, computed as it computes it (read-only)."""
    state = _checked(conversation, message_id)
    start = cut_start(state, message_id)
    summarized = split_parts(state, start)[0] if start is not None else []
    if not summarized:
        return CutPreview(
            conversation.pk,
            state.context_tokens(),
            [],
            f"nothing before message #{message_id} is left to summarize (the cut falls on "
            "the window's first turn)",
            verbatim=tuple(row.pk for row in state.verbatim),
        )
    first_kept = next(row.pk for row in state.rows if row.pk > summarized[-1].pk)
    sentence = (
        f"{_span(summarized)} go into the window summary; {{kept}} from #{first_kept} on "
        "stay verbatim"
    )
    return _cut_preview(conversation, state, summarized, sentence)


def summarize_after_preview(conversation: Conversation, message_id: int) -> CutPreview:
    """What `summarize_after` will do, computed as it computes it (read-only). Refused,
    as it refuses: `message_not_found`, `already_summarized`, `not_in_window`,
    `segment_exists`, `nothing_after`."""
    state = _checked(conversation, message_id)
    summarized = segment_after(state, message_id)
    sentence = (
        f"{_span(summarized)} after #{message_id} become a summarized segment; {{kept}} "
        "stay as they are (those up to it, and the newest step)"
    )
    return _cut_preview(conversation, state, summarized, sentence)


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


def summarize_after(conversation: Conversation, message_id: int) -> Outcome:
    """Summarize the messages after the message, up to the newest step, as a segment
    (a summary version); those up to it and the newest step stay as they are. Kept
    only if the request gets smaller."""
    preview = summarize_after_preview(conversation, message_id)
    if not summarize_segment(conversation.pk, message_id, preview.summarized):
        return Outcome(
            conversation.pk,
            False,
            "nothing changed: the summarizer gave no usable summary, or it would not make "
            "the request smaller",
        )
    after = load_window(conversation.pk).context_tokens()
    return Outcome(
        conversation.pk,
        True,
        f"{len(preview.summarized)} message(s) after #{message_id} summarized as a segment, "
        f"{token_change(preview.context_tokens, after, 'the request')}",
    )
