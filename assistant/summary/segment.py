"""The summarized segment (docs/compaction.rst, "Summarizing after a message"): the
messages after a chosen one, up to the newest step, summarized in place. The
window keeps one summary before its verbatim messages; a segment's summary has
to stand between two verbatim parts, so it is a state of its own
(`MetadataKeys.SEGMENT_SUMMARY`): the request sends the messages up to the chosen
one, the segment's summary as a user message, then the newest step
(assistant.window.context). Its messages stay in the window's rows (a later shift
summarizes them from what they hold, and the segment goes with it once the split
reaches into it); only the request and its size leave them out."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import transaction

from assistant.history import compacting, record_compaction, stopwatch, write_state
from assistant.metadata_keys import Segment
from assistant.models import CompactionEvent, Message, MetadataKeys
from assistant.settings.conf import compaction_config
from assistant.summary.generate import summarize_messages
from assistant.summary.leases import summary_lease
from assistant.summary.shift import undo_record
from assistant.summary.versions import record_version
from assistant.window import WindowState, load_window, refreshed_window, split_boundaries

logger = logging.getLogger(__name__)


def segment_after(state: WindowState, message_id: int) -> list[Message]:
    """The window rows a segment after `message_id` summarizes: from the first split
    boundary after it (so a tool call keeps its results, on the side of the call)
    up to the newest step, which stays verbatim. ValidationError `not_in_window` (a
    system message, or one the provider's compaction stands for), `segment_exists`
    or `nothing_after`."""
    if state.segment is not None:
        raise ValidationError(
            f"Messages after #{state.segment.after} up to #{state.segment.through} are "
            "already summarized as a segment: undo that compaction first.",
            code="segment_exists",
        )
    index = next((i for i, row in enumerate(state.rows) if row.pk == message_id), None)
    if index is None:
        raise ValidationError(
            f"Message {message_id} is not one of the messages the next request sends "
            "verbatim (a system message, or one the provider's compaction stands for).",
            code="not_in_window",
        )
    boundaries = split_boundaries(state.rows)
    start = next((i for i in boundaries if i > index), None)
    if start is None or start >= boundaries[-1]:
        raise ValidationError(
            f"Nothing after message {message_id} is left to summarize: only the newest "
            "step follows it, and it stays verbatim.",
            code="nothing_after",
        )
    return state.rows[start : boundaries[-1]]


def summarize_segment(conversation_id: int, message_id: int, expected: tuple[int, ...]) -> bool:
    """Summarize the segment after `message_id` (a summary version after it, one
    window_summary event whose `undo` puts back the state it replaced), under the
    summary lease. `expected`: the ids its preview named; the window changed since
    (another message, a shift): ValidationError `summary_moved`, nothing written. False:
    the summarizer failed, or its summary would not make the request smaller."""
    config = compaction_config()
    with summary_lease(conversation_id) as lease:
        if lease is None:
            raise ValidationError(
                "A summary of this conversation is being made now: try again in a moment.",
                code="summary_busy",
            )
        state = load_window(conversation_id, config)
        rows = segment_after(state, message_id)
        if tuple(row.pk for row in rows) != expected:
            raise ValidationError(
                "The conversation changed since the preview: reload the page and look again.",
                code="summary_moved",
            )
        tokens = state.context_tokens()
        kind = CompactionEvent.Kind.WINDOW_SUMMARY
        with compacting(conversation_id, kind, tokens) as lifecycle:
            try:
                with stopwatch() as elapsed:
                    outcome = summarize_messages(rows, on_chunk=lease.renew, config=config)
            except Exception as exc:  # a failed summary changes nothing
                logger.warning(
                    "segment_summary_failed conversation=%s error=%s",
                    conversation_id,
                    type(exc).__name__,
                )
                lifecycle.fail("the summarizer gave no usable summary")
                return False
            first = state.rows.index(rows[0])
            segment = Segment(state.rows[first - 1].pk, rows[-1].pk, outcome.text)
            if _estimated_with(state, segment) >= state.estimated_tokens():
                lifecycle.fail("the summary would not make the context smaller")
                return False
            with transaction.atomic():
                stored = write_state(
                    lease.holding().filter(
                        **{
                            MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: state.through_id,
                            f"{MetadataKeys.SEGMENT_SUMMARY}__isnull": True,
                        }
                    ),
                    {
                        MetadataKeys.SEGMENT_SUMMARY: segment.stored(),
                        MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: state.rows[-1].pk,
                    },
                )
                if not stored:
                    raise ValidationError(
                        "The window shifted meanwhile: reload the page and look again.",
                        code="summary_moved",
                    )
                record_version(
                    conversation_id,
                    outcome.text,
                    segment.through,
                    after=segment.after,
                    model=outcome.model,
                    input_tokens=outcome.input_tokens,
                    output_tokens=outcome.output_tokens,
                )
            after = refreshed_window(conversation_id, config)
            record_compaction(
                conversation_id,
                kind,
                tokens_before=tokens,
                tokens_after=after.context_tokens(),
                messages_affected=len(rows),
                duration_ms=elapsed.ms,
                summarizer_model=outcome.model,
                summarizer_input_tokens=outcome.input_tokens,
                summarizer_output_tokens=outcome.output_tokens,
                details={
                    "through_message_id": state.through_id,
                    "segment": {"after": segment.after, "through": segment.through},
                    "calls": outcome.calls,
                    **outcome.usage_details(),
                    **undo_record(state),
                },
                summary=outcome.text,
            )
    return True


def _estimated_with(state: WindowState, segment: Segment) -> int:
    """The context by our estimates once `segment` is summarized (`estimated_tokens`)."""
    held = state.columns.get(MetadataKeys.SEGMENT_SUMMARY)
    state.columns[MetadataKeys.SEGMENT_SUMMARY] = segment.stored()
    try:
        return state.estimated_tokens()
    finally:
        state.columns[MetadataKeys.SEGMENT_SUMMARY] = held
