"""Emergency compaction (the third strategy of docs/compaction.rst): the levels that
shrink a context the provider refused, and how an overflow is recognised in
a response. `assistant.emergency.retry.call_with_overflow_recovery` applies them level
by level and retries. Nothing is ever destroyed: both levels are views over
the append-only history (compacted text beside the original, a window
summary in the conversation's state) and can be undone with `restore_originals`.

- Level 1: every consumed tool result is compacted whatever its size (only
  where its compacted form is shorter), the current turn's too, and the
  window summary is regenerated with a tighter recent window
  (EMERGENCY_RECENT_FRACTION).
- Level 2: everything but the current turn's user message and the newest
  step is summarized, and every consumed tool result is compacted. When the
  request is still larger than the answering model can take (`Limits.bound`),
  the newest step's own tool results, which the model has not read yet, are
  truncated, largest first, until it fits (the originals kept, each marker
  naming its recall handle): the last resort before ContextTooLarge. A pinned
  result, one staff restored and a tool whose policy is "keep" are not; a
  user message is never cut, so one larger than the window is still refused.

A summary that would not make the context smaller is never stored
(assistant.summary.shift), so a level cannot make things worse.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from assistant.history import (
    Lifecycle,
    compacting,
    one_rewrite,
    record_compaction,
    refresh_state,
    remember,
    write_state,
)
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.providers import (
    OVERFLOW_STOP_REASON,
    ChatResult,
    Usage,
    model_context_window,
    read_response,
)
from assistant.settings.conf import compaction_config
from assistant.summary import regenerate_window_summary
from assistant.text import KEEP_VERBATIM
from assistant.tool_results import compact_tool_results, truncate_to_fit
from assistant.window import current_limits, load_window

logger = logging.getLogger(__name__)
LEVELS = (1, 2)
_EVENT_KINDS = {1: CompactionEvent.Kind.EMERGENCY_1, 2: CompactionEvent.Kind.EMERGENCY_2}


class ContextTooLarge(Exception):
    """The conversation cannot fit in the model's context window, even after
    both emergency levels. Nothing was lost; continuing in a fork works."""

    def __init__(self, conversation_id: int, *, levels_applied: tuple[int, ...] = ()) -> None:
        self.conversation_id = conversation_id
        self.levels_applied = levels_applied
        tried = ", ".join(str(level) for level in levels_applied) or "none applicable"
        super().__init__(
            f"Conversation {conversation_id} is too large for the model's context window, "
            f"even after emergency compaction (levels applied: {tried}). Nothing was lost. "
            "Continue in a new conversation that carries a summary of this one: "
            "assistant.services.fork_continuation(conversation, pending_user_message=...), "
            'or the admin action "Continue in a new conversation".'
        )


@dataclass(frozen=True)
class EmergencyOutcome:
    level: int
    tokens_before: int
    tokens_after: int
    tool_results_compacted: int = 0
    summary_regenerated: bool = False
    failed: bool = False

    @property
    def shrank(self) -> bool:
        return not self.failed and self.tokens_after < self.tokens_before


def emergency_compact(conversation: Conversation, level: int = 1) -> bool:
    """Apply one emergency level; returns whether the context shrank. Records a
    CompactionEvent when it did. Best-effort: a failure is logged and returns
    False, and loses nothing."""
    return apply_emergency_level(conversation, level).shrank


def apply_emergency_level(conversation: Conversation, level: int) -> EmergencyOutcome:
    """`emergency_compact` with the measurements: the estimated context before
    and after (estimates on both sides, so they compare like with like)."""
    if type(level) is not int or level not in LEVELS:  # True is not level 1
        raise ValidationError(
            f"Emergency compaction level must be 1 or 2, not {level!r}.", code="invalid_level"
        )
    started = time.monotonic()
    window = load_window(conversation.pk)
    before, request_before = window.estimated_tokens(), window.context_tokens()
    with compacting(conversation.pk, _EVENT_KINDS[level], request_before) as lifecycle:
        return _apply_level(conversation, level, lifecycle, started, (before, request_before))


def _apply_level(
    conversation: Conversation,
    level: int,
    lifecycle: Lifecycle,
    started: float,
    sizes: tuple[int, int],
) -> EmergencyOutcome:
    before, request_before = sizes
    compacted, regenerated = 0, False
    try:
        # The level's window summary reads the request before and after the level.
        with one_rewrite(conversation.pk, request_before, lambda: _request(conversation)):
            compacted, regenerated = _apply(conversation, level)
        window = load_window(conversation.pk)
        after = window.estimated_tokens()
    except Exception as error:
        logger.exception("emergency_failed conversation=%s level=%s", conversation.pk, level)
        lifecycle.fail(f"{type(error).__name__}: {error}")
        return EmergencyOutcome(level, before, before, failed=True)
    refresh_state(conversation)
    outcome = EmergencyOutcome(level, before, after, compacted, regenerated)
    if outcome.shrank:
        record_compaction(
            conversation.pk,
            _EVENT_KINDS[level],
            tokens_before=request_before,  # the request's, as every figure shown
            tokens_after=window.context_tokens(),
            messages_affected=compacted,
            duration_ms=int((time.monotonic() - started) * 1000),
            details={"level": level, "summary_regenerated": regenerated},
        )
    logger.info(
        "emergency_compact conversation=%s level=%s tokens_before=%s tokens_after=%s "
        "tool_results=%s summary=%s",
        conversation.pk,
        level,
        before,
        after,
        compacted,
        regenerated,
    )
    return outcome


def _apply(conversation: Conversation, level: int) -> tuple[int, bool]:
    """Run the level: (tool results compacted, whether the window summary was regenerated)."""
    if level == 1:
        compacted = compact_tool_results(conversation, include_current_turn=True, min_chars=0)
        regenerated = regenerate_window_summary(
            conversation, recent_fraction=compaction_config().EMERGENCY_RECENT_FRACTION
        )
        return compacted, regenerated
    regenerated = regenerate_window_summary(conversation, newest_step_only=True)
    compacted = compact_tool_results(conversation, include_current_turn=True, min_chars=0)
    return compacted + _truncate_newest_step(conversation.pk), regenerated


def _truncate_newest_step(conversation_id: int) -> int:
    """Level 2's last resort: the results after the newest answer truncated until the
    request fits the answering model's bound; 0 when it already fits."""
    excess = load_window(conversation_id).context_tokens() - current_limits(conversation_id).bound
    if excess <= 0:
        return 0
    config = compaction_config()
    newest_answer = (
        Message.objects.filter(conversation_id=conversation_id, role=Message.Role.ASSISTANT)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    unread = Message.objects.filter(
        conversation_id=conversation_id,
        role=Message.Role.TOOL,
        pinned=False,
        compaction="",
        id__gt=newest_answer or 0,
    ).defer("content", "compacted_content", "prepared_content")
    rows = [
        row
        for row in unread
        if config.policy_for(row.tool_name) != "keep" and KEEP_VERBATIM not in (row.metadata or {})
    ]
    return truncate_to_fit(conversation_id, rows, excess, config)


def _request(conversation: Conversation) -> int:
    return load_window(conversation.pk).context_tokens()


def _reported(response: Any) -> ChatResult:
    """What a response reports (any provider's, read by its wire, or our ChatResult);
    of another object, its `usage.prompt_tokens` and `stop_reason` where it has them."""
    result = read_response(response)
    if result is not None:
        return result
    prompt = getattr(getattr(response, "usage", None), "prompt_tokens", None)
    return ChatResult(
        text="",
        usage=Usage(input_tokens=prompt if isinstance(prompt, int) else 0),
        model="",
        stop_reason=getattr(response, "stop_reason", None),
    )


def note_response(
    conversation: Conversation, response: Any, *, window_tokens: int | None = None
) -> bool:
    """Mark the conversation for emergency compaction when a successful
    response shows the context no longer fits: more input tokens reported than
    the window (`window_tokens`, else the window of the model that answered),
    or Anthropic's `model_context_window_exceeded` stop reason."""
    result = _reported(response)
    over = result.stop_reason == OVERFLOW_STOP_REASON
    prompt = result.usage.prompt_tokens or None
    if window_tokens is None and result.model:
        window_tokens = model_context_window(result.model, result.provider)
    if window_tokens is not None and prompt is not None and prompt > window_tokens:
        over = True
    if over:
        mark_needs_emergency_compaction(conversation, reported_tokens=prompt)
    return over


def mark_needs_emergency_compaction(
    conversation: Conversation, *, reported_tokens: int | None = None
) -> None:
    """Set the conversation's `needs_emergency_compaction` flag."""
    flag = {MetadataKeys.NEEDS_EMERGENCY_COMPACTION: True}
    write_state(Conversation.objects.filter(pk=conversation.pk), flag)
    remember(conversation, flag)
    logger.warning(
        "context_over_window conversation=%s reported_tokens=%s", conversation.pk, reported_tokens
    )


def compact_if_flagged(conversation: Conversation) -> bool:
    """For the pre-exchange hook: when the conversation is marked, clear the
    mark (one caller wins) and apply emergency level 1. Returns whether the
    context shrank; False when it was not marked."""
    flagged = Conversation.objects.filter(pk=conversation.pk, needs_emergency_compaction=True)
    flag = [MetadataKeys.NEEDS_EMERGENCY_COMPACTION]
    if write_state(flagged, clear=flag) != 1:
        return False
    remember(conversation, clear=flag)
    return emergency_compact(conversation, level=1)
