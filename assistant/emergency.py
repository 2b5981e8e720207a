"""Emergency compaction and overflow recovery (strategy 3 of DESIGN section 6).

When a provider rejects a request as too large, `call_with_overflow_recovery`
compacts harder, level by level, and retries only when a level made the
context smaller (and, when the provider said by how much it was over, only
when the smaller context can fit). When nothing helps it raises
`ContextTooLarge`, which offers a fork. Nothing is ever destroyed: both levels
are views over the append-only history (compacted text beside the original,
a window summary in metadata) and can be undone with `restore_originals`.

- Level 1: every tool result is compacted whatever its size, the current
  turn's too, and the window summary is regenerated with a tighter recent
  window (EMERGENCY_RECENT_FRACTION).
- Level 2: everything but the last 2 messages is summarized (never splitting
  a tool call from its result) and every tool result is compacted.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from assistant.conf import compaction_config
from assistant.metadata import merge_metadata, read_metadata
from assistant.models import CompactionEvent, Conversation, MetadataKeys

if TYPE_CHECKING:
    from assistant.context import Context

logger = logging.getLogger(__name__)

T = TypeVar("T")
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
    """`emergency_compact` with the measurements (context tokens before and after)."""
    if level not in LEVELS:
        raise ValueError(f"Emergency compaction level must be 1 or 2, not {level!r}.")
    from assistant.compaction import compact_tool_results
    from assistant.context import context_tokens
    from assistant.summaries import regenerate_window_summary

    started = time.monotonic()
    before = context_tokens(conversation)
    compacted, regenerated = 0, False
    try:
        if level == 1:
            compacted = compact_tool_results(conversation, include_current_turn=True, min_chars=0)
            regenerated = _summary_if_smaller(
                conversation,
                lambda: regenerate_window_summary(
                    conversation, recent_fraction=compaction_config().EMERGENCY_RECENT_FRACTION
                ),
            )
        else:
            regenerated = _summary_if_smaller(
                conversation, lambda: regenerate_window_summary(conversation, keep_last=2)
            )
            compacted = compact_tool_results(conversation, include_current_turn=True, min_chars=0)
        _refresh(conversation)
        after = context_tokens(conversation)
    except Exception:
        logger.exception("emergency_failed conversation=%s level=%s", conversation.pk, level)
        return EmergencyOutcome(level, before, before, failed=True)
    outcome = EmergencyOutcome(level, before, after, compacted, bool(regenerated))
    if outcome.shrank:
        CompactionEvent.objects.create(
            conversation_id=conversation.pk,
            kind=_EVENT_KINDS[level],
            tokens_before=before,
            tokens_after=after,
            messages_affected=compacted,
            duration_ms=int((time.monotonic() - started) * 1000),
            details={"level": level, "summary_regenerated": bool(regenerated)},
        )
    logger.info(
        "emergency_compact conversation=%s level=%s tokens_before=%s tokens_after=%s "
        "tool_results=%s summary=%s",
        conversation.pk,
        level,
        before,
        after,
        compacted,
        bool(regenerated),
    )
    return outcome


def call_with_overflow_recovery(
    conversation: Conversation,
    call: Callable[[Context], T],
    *,
    window_tokens: int | None = None,
) -> T:
    """Run `call(build_context(conversation))`. On a context-overflow error
    apply emergency level 1 and retry, then level 2 and retry, then raise
    ContextTooLarge. A level that did not shrink the context is not retried,
    nor one whose smaller context still cannot fit by the provider's own
    count. Any other error passes through untouched. A successful response
    that reports more input tokens than `window_tokens` marks the conversation
    for emergency compaction before its next exchange."""
    from assistant.context import build_context
    from assistant.llm.overflow import context_overflow

    try:
        result = call(build_context(conversation))
    except Exception as exc:
        if not context_overflow(exc):
            raise
        error: BaseException = exc
    else:
        note_response(conversation, result, window_tokens=window_tokens)
        return result

    applied: list[int] = []
    # Our estimate of the context the failing request carried: the provider's
    # count in `error` describes that request, so a retry is judged against it.
    tokens_sent: int | None = None
    for level in LEVELS:
        outcome = apply_emergency_level(conversation, level)
        if tokens_sent is None:
            tokens_sent = outcome.tokens_before
        if not outcome.shrank:
            logger.info("overflow_level_skipped conversation=%s level=%s", conversation.pk, level)
            continue
        applied.append(level)
        if not retry_can_fit(error, tokens_sent, outcome.tokens_after):
            logger.info("overflow_retry_skipped conversation=%s level=%s", conversation.pk, level)
            continue
        try:
            result = call(build_context(conversation))
        except Exception as exc:
            if not context_overflow(exc):
                raise
            error, tokens_sent = exc, outcome.tokens_after
            continue
        note_response(conversation, result, window_tokens=window_tokens)
        return result
    raise ContextTooLarge(conversation.pk, levels_applied=tuple(applied)) from error


def retry_can_fit(error: BaseException, tokens_before: int, tokens_after: int) -> bool:
    """Whether a retry after shrinking the context from `tokens_before` to
    `tokens_after` (our estimates) can fit, by the counts in the provider's
    overflow message scaled by the same ratio. True when the error gives no
    counts: then only the provider can tell."""
    counts = overflow_token_counts(error)
    if counts is None or tokens_before <= 0:
        return True
    sent, limit = counts
    return sent * tokens_after / tokens_before <= limit


# (tokens sent, maximum) as each provider words its overflow.
_COUNT_PATTERNS = (
    # Anthropic: "prompt is too long: 208310 tokens > 200000 maximum"
    (re.compile(r"(\d+)\s*tokens\s*>\s*(\d+)\s*maximum"), 1, 2),
    # Gemini: "The input token count (1200293) exceeds the maximum number of
    # tokens allowed (1048576)"
    (re.compile(r"input token count \((\d+)\) exceeds the maximum .*? allowed \((\d+)\)"), 1, 2),
    # OpenAI: "maximum context length is 8192 tokens. However, your messages
    # resulted in 9000 tokens"
    (re.compile(r"maximum context length is (\d+) tokens.*?resulted in (\d+) tokens", re.S), 2, 1),
)


def overflow_token_counts(error: BaseException) -> tuple[int, int] | None:
    """(tokens sent, model maximum) from an overflow error or any error in its
    cause chain, when the provider's message states them."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts = [str(current), str(getattr(current, "message", "") or "")]
        for text in texts:
            for pattern, sent_group, limit_group in _COUNT_PATTERNS:
                match = pattern.search(text)
                if match:
                    return int(match.group(sent_group)), int(match.group(limit_group))
        current = current.__cause__ or current.__context__
    return None


def reported_prompt_tokens(response: Any) -> int | None:
    """The whole prompt a provider reported for a response: our ChatResult,
    an Anthropic Message or a Gemini GenerateContentResponse."""
    usage = getattr(response, "usage", None)
    if usage is not None:
        prompt = getattr(usage, "prompt_tokens", None)
        if isinstance(prompt, int):
            return prompt
        if isinstance(getattr(usage, "input_tokens", None), int):
            return (
                usage.input_tokens
                + int(getattr(usage, "cache_read_input_tokens", 0) or 0)
                + int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
            )
    gemini = getattr(response, "usage_metadata", None)
    if gemini is not None and isinstance(getattr(gemini, "prompt_token_count", None), int):
        return gemini.prompt_token_count
    return None


def note_response(
    conversation: Conversation, response: Any, *, window_tokens: int | None = None
) -> bool:
    """Mark the conversation for emergency compaction when a successful
    response shows the context no longer fits: more input tokens reported than
    the window (`window_tokens`, else the window of the model that answered),
    or Anthropic's `model_context_window_exceeded` stop reason."""
    from assistant.llm.overflow import OVERFLOW_STOP_REASON, model_context_window

    over = getattr(response, "stop_reason", None) == OVERFLOW_STOP_REASON
    prompt = reported_prompt_tokens(response)
    if window_tokens is None:
        model = getattr(response, "model", None) or getattr(response, "model_version", None)
        window_tokens = model_context_window(model) if isinstance(model, str) and model else None
    if window_tokens is not None and prompt is not None and prompt > window_tokens:
        over = True
    if over:
        mark_needs_emergency_compaction(conversation, reported_tokens=prompt)
    return over


def mark_needs_emergency_compaction(
    conversation: Conversation, *, reported_tokens: int | None = None
) -> None:
    """Set metadata["needs_emergency_compaction"], merged in the database."""
    merge_metadata(
        Conversation.objects.filter(pk=conversation.pk),
        {MetadataKeys.NEEDS_EMERGENCY_COMPACTION: True},
    )
    conversation.metadata = {**conversation.metadata, MetadataKeys.NEEDS_EMERGENCY_COMPACTION: True}
    logger.warning(
        "context_over_window conversation=%s reported_tokens=%s", conversation.pk, reported_tokens
    )


def compact_if_flagged(conversation: Conversation) -> bool:
    """For the pre-exchange hook: when the conversation is marked, clear the
    mark (one caller wins) and apply emergency level 1. Returns whether the
    context shrank; False when it was not marked."""
    flagged = Conversation.objects.filter(
        pk=conversation.pk, **{f"metadata__{MetadataKeys.NEEDS_EMERGENCY_COMPACTION}": True}
    )
    cleared = merge_metadata(flagged, remove=[MetadataKeys.NEEDS_EMERGENCY_COMPACTION]) == 1
    if not cleared:
        return False
    conversation.metadata.pop(MetadataKeys.NEEDS_EMERGENCY_COMPACTION, None)
    return emergency_compact(conversation, level=1)


# Keys a summary regeneration must not be blamed for (written by others).
_NOT_SUMMARY_KEYS = {
    MetadataKeys.NEEDS_EMERGENCY_COMPACTION,
    MetadataKeys.PARENT_CONVERSATION_SUMMARY,
    MetadataKeys.FORK_MESSAGE_ID,
    MetadataKeys.TOOL_SERVICES,
    MetadataKeys.SUMMARY_DEFERRED,
}


def _summary_if_smaller(conversation: Conversation, regenerate: Callable[[], bool]) -> bool:
    """Regenerate the window summary, and put the previous one back when the
    new one did not make the context smaller (applied only if it shrinks)."""
    from assistant.context import context_tokens

    _refresh(conversation)
    tokens_before = context_tokens(conversation)
    snapshot = dict(conversation.metadata)
    if not regenerate():
        return False
    _refresh(conversation)
    if context_tokens(conversation) < tokens_before:
        return True
    changed = {
        key: snapshot.get(key)
        for key in set(snapshot) | set(conversation.metadata)
        if key not in _NOT_SUMMARY_KEYS and snapshot.get(key) != conversation.metadata.get(key)
    }
    if changed:
        merge_metadata(
            Conversation.objects.filter(pk=conversation.pk),
            {key: value for key, value in changed.items() if value is not None},
            remove=[key for key, value in changed.items() if value is None],
        )
        _refresh(conversation)
    logger.info("emergency_summary_reverted conversation=%s", conversation.pk)
    return False


def _refresh(conversation: Conversation) -> None:
    conversation.metadata = read_metadata(conversation.pk)
