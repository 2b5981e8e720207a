"""The overflow flow: the model call (sync, or awaited by a web chat) wrapped
so that a context-overflow error applies the emergency levels
(assistant.emergency.levels) one by one and retries, while a retry can
still fit (`OverflowRecovery`). See docs/architecture.rst."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from asgiref.sync import sync_to_async

from assistant.emergency.levels import (
    LEVELS,
    ContextTooLarge,
    apply_emergency_level,
    note_response,
)
from assistant.models import Conversation
from assistant.providers import context_overflow, overflow_token_counts
from assistant.window import Context, build_context, current_limits, smallest_ceiling

logger = logging.getLogger(__name__)

T = TypeVar("T")


def call_with_overflow_recovery(
    conversation: Conversation,
    call: Callable[[Context], T],
    *,
    window_tokens: int | None = None,
    context: Context | None = None,
) -> T:
    """Run `call(build_context(conversation))`. On a context-overflow error
    apply emergency level 1 and retry, then level 2 and retry, then raise
    ContextTooLarge. A level that did not shrink the context is not retried,
    nor one whose smaller context still cannot fit by the provider's own
    count. Any other error passes through untouched. A successful response
    that reports more input tokens than `window_tokens` marks the conversation
    for emergency compaction before its next exchange. `context`: the first
    attempt's, when the caller has it (`prepare_context`'s); a retry builds its own."""
    recovery = OverflowRecovery(conversation)
    while True:
        if context is None:
            context = build_context(conversation)
        if recovery.over_bound(context):
            recovery.shrink()
            context = None
            continue
        try:
            result = call(context)
        except Exception as exc:
            recovery.failed(exc)
            recovery.shrink()
            context = None
            continue
        note_response(conversation, result, window_tokens=window_tokens)
        return result


async def acall_with_overflow_recovery(
    conversation: Conversation,
    call: Callable[[Context], Awaitable[T]],
    *,
    window_tokens: int | None = None,
    context: Context | None = None,
) -> T:
    """call_with_overflow_recovery for an awaitable `call`: the context is built, the
    emergency levels applied and the response noted in a worker thread
    (`sync_to_async`), never on the event loop."""
    recovery = OverflowRecovery(conversation)
    while True:
        if context is None:
            context = await sync_to_async(build_context)(conversation)
        if await sync_to_async(recovery.over_bound)(context):
            await sync_to_async(recovery.shrink)()
            context = None
            continue
        try:
            result = await call(context)
        except Exception as exc:
            recovery.failed(exc)
            await sync_to_async(recovery.shrink)()
            context = None
            continue
        await sync_to_async(note_response)(conversation, result, window_tokens=window_tokens)
        return result


class OverflowRecovery:
    """The emergency levels a call that overflowed goes through, one retry after each
    level that shrank the context enough to fit."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.levels = iter(LEVELS)
        self.applied: list[int] = []
        self.error: BaseException | None = None
        # Our estimate of the context the failing request carried: the provider's
        # count in the error describes that request, so a retry is judged against it.
        self.tokens_sent: int | None = None
        self.tokens_now: int | None = None

    def over_bound(self, context: Context) -> bool:
        """Whether `context` is larger than the answering model's ceiling
        (CONTEXT_CEILING_FRACTION of its window less its output cap: `Limits.bound`), so
        that it is made to fit before it is sent, through the same levels as an overflow
        the provider reports."""
        tokens = context.tokens.total
        if tokens <= smallest_ceiling():  # under any model's ceiling: no query
            return False
        bound = current_limits(self.conversation.pk).bound
        if tokens <= bound:
            return False
        logger.warning(
            "context_over_bound conversation=%s tokens=%s bound=%s",
            self.conversation.pk,
            tokens,
            bound,
        )
        self.tokens_sent = self.tokens_now = tokens
        return True

    def failed(self, error: Exception) -> None:
        """A call failed: an overflow is recovered from, any other error passes through."""
        if not context_overflow(error):
            raise error
        self.error = error
        if self.tokens_now is not None:
            self.tokens_sent = self.tokens_now

    def shrink(self) -> None:
        """Apply levels until one is worth a retry; ContextTooLarge when none is left."""
        conversation = self.conversation
        for level in self.levels:
            outcome = apply_emergency_level(conversation, level)
            if self.tokens_sent is None:
                self.tokens_sent = outcome.tokens_before
            if not outcome.shrank:
                logger.info(
                    "overflow_level_skipped conversation=%s level=%s", conversation.pk, level
                )
                continue
            self.applied.append(level)
            if not retry_can_fit(self.error, self.tokens_sent, outcome.tokens_after):
                logger.info(
                    "overflow_retry_skipped conversation=%s level=%s", conversation.pk, level
                )
                continue
            self.tokens_now = outcome.tokens_after
            return
        raise ContextTooLarge(conversation.pk, levels_applied=tuple(self.applied)) from self.error


def retry_can_fit(error: BaseException | None, tokens_before: int, tokens_after: int) -> bool:
    """Whether a retry after shrinking the context from `tokens_before` to
    `tokens_after` (our estimates) can fit, by the counts in the provider's
    overflow message scaled by the same ratio. True when the error gives no
    counts: then only the provider can tell."""
    counts = overflow_token_counts(error) if error is not None else None
    if counts is None or tokens_before <= 0:
        return True
    sent, limit = counts
    return sent * tokens_after / tokens_before <= limit
