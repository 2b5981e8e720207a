"""The compaction actions staff run by hand (admin actions and their worker
tasks), one conversation at a time: each refuses a deleted conversation, runs
the strategy on behalf of the user (their name goes on its one compaction
event, which lists what the action touched),
writes an admin history entry (`LogEntry`) with the result, and says why
nothing changed when nothing did."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.core.exceptions import ValidationError

from assistant.emergency import apply_emergency_level
from assistant.fork import can_fork, fork_continuation, fork_from_message
from assistant.history import acting_as, acting_user_of, an_id, one_event, token_change, token_count
from assistant.models import CompactionEvent, Conversation
from assistant.ops import telemetry
from assistant.providers import call_instructions, check_instructions
from assistant.settings.conf import compaction_config
from assistant.staff.cut import summarize_after, summarize_before
from assistant.staff.previews import (
    Outcome,
    compact_preview,
    emergency_preview,
    regenerate_preview,
    restore_preview,
)
from assistant.staff.undo import undo_compaction
from assistant.summary import regenerate_window_summary
from assistant.tool_results import compact_tool_results, restore_originals
from assistant.window import load_window

EMERGENCY_1 = "emergency_1"
EMERGENCY_2 = "emergency_2"
REGENERATE_SUMMARY = "regenerate_summary"
COMPACT_TOOL_RESULTS = "compact_tool_results"
RESTORE_ORIGINALS = "restore_originals"
FORK_CONTINUATION = "fork_continuation"
FORK_FROM_MESSAGE = "fork_from_message"
SUMMARIZE_BEFORE = "summarize_before"
SUMMARIZE_AFTER = "summarize_after"
UNDO_COMPACTION = "undo_compaction"
# The actions given a message id: where to branch, where to cut.
AT_A_MESSAGE = frozenset({FORK_FROM_MESSAGE, SUMMARIZE_BEFORE, SUMMARIZE_AFTER})
ACTIONS = (
    EMERGENCY_1,
    EMERGENCY_2,
    REGENERATE_SUMMARY,
    COMPACT_TOOL_RESULTS,
    RESTORE_ORIGINALS,
    FORK_CONTINUATION,
    FORK_FROM_MESSAGE,
    SUMMARIZE_BEFORE,
    SUMMARIZE_AFTER,
    UNDO_COMPACTION,
)
# These call the summarizer: never inside a web request.
CALLS_THE_MODEL = frozenset(
    {
        EMERGENCY_1,
        EMERGENCY_2,
        REGENERATE_SUMMARY,
        FORK_CONTINUATION,
        FORK_FROM_MESSAGE,
        SUMMARIZE_BEFORE,
        SUMMARIZE_AFTER,
    }
)

LABELS = {
    EMERGENCY_1: "Emergency compaction level 1",
    EMERGENCY_2: "Emergency compaction level 2",
    REGENERATE_SUMMARY: "Regenerate window summary",
    COMPACT_TOOL_RESULTS: "Compact tool results",
    RESTORE_ORIGINALS: "Restore compacted originals",
    FORK_CONTINUATION: "Continue in a new conversation",
    FORK_FROM_MESSAGE: "Branch from a message",
    SUMMARIZE_BEFORE: "Summarize before a message",
    SUMMARIZE_AFTER: "Summarize after a message",
    UNDO_COMPACTION: "Undo the last compaction",
}


def check_action(
    action: str,
    conversation_id: int,
    instructions: str = "",
    user_id: Any = None,
    message_id: int | None = None,
) -> int | None:
    """A known action on a conversation id (and, to branch, a message id) for a stored
    user (or None), else ValidationError (before anything runs); returns the user's id."""
    if not isinstance(instructions, str):
        raise ValidationError("instructions must be a text.", code="invalid_instructions")
    check_instructions(instructions)
    if action not in ACTIONS:
        raise ValidationError(
            f"Unknown staff action {action!r}; expected one of {', '.join(ACTIONS)}.",
            code="unknown_action",
        )
    an_id("conversation_id", conversation_id)
    if (action in AT_A_MESSAGE) != (message_id is not None) or (
        message_id is not None and type(message_id) is not int
    ):
        raise ValidationError(
            f"message_id must be an integer id to branch from or cut before, and given "
            f"only for {' and '.join(sorted(AT_A_MESSAGE))}; got {message_id!r} for {action}.",
            code="invalid_message_id",
        )
    return acting_user_of(user_id)


def run_staff_action(
    action: str,
    conversation_id: int,
    user_id: int | None,
    instructions: str = "",
    message_id: int | None = None,
) -> Outcome:
    """Run one staff action on one conversation for `user_id` and record it;
    `instructions` go into the prompt of every summary it makes, `message_id` is the
    user message a branch starts at."""
    user_id = check_action(action, conversation_id, instructions, user_id, message_id)
    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is None:
        return Outcome(conversation_id, False, f"conversation {conversation_id} no longer exists")
    if conversation.deleted_at is not None:
        outcome = Outcome(
            conversation_id, False, "refused: the conversation is deleted (restore it first)"
        )
    else:
        with (
            acting_as(user_id),
            call_instructions(instructions),
            telemetry.staff_action(action, conversation_id),
            one_event(conversation_id, lambda: _tokens(conversation), _STARTS_AS[action]),
        ):
            if action == FORK_FROM_MESSAGE:
                assert message_id is not None  # check_action
                outcome = _branch(conversation, message_id, user_id)
            elif action in _CUTS:
                assert message_id is not None  # check_action
                outcome = _cut(_CUTS[action], conversation, message_id)
            else:
                outcome = _RUNNERS[action](conversation, user_id)
    if user_id is not None:
        focus = f' (instructions: "{instructions.strip()}")' if instructions.strip() else ""
        LogEntry.objects.log_actions(
            user_id, [conversation], CHANGE, f"{LABELS[action]}{focus}: {outcome.message}."
        )
    return outcome


def _tokens(conversation: Conversation) -> int:
    return load_window(conversation.pk).context_tokens()


def _emergency(level: int) -> Callable[[Conversation, int | None], Outcome]:
    def run(conversation: Conversation, user_id: int | None) -> Outcome:
        before = _tokens(conversation)
        outcome = apply_emergency_level(conversation, level)
        if outcome.shrank:
            # The figures of its one event (`run_staff_action`): the request's size.
            return Outcome(
                conversation.pk,
                True,
                f"the request shrank, {token_change(before, _tokens(conversation))} "
                f"({outcome.tool_results_compacted} tool result(s) compacted, window "
                f"summary {'regenerated' if outcome.summary_regenerated else 'unchanged'})",
            )
        if outcome.failed:
            return Outcome(conversation.pk, False, "nothing changed: it failed (see the logs)")
        because = emergency_preview(conversation, level).nothing_because or (
            "what it produced was not smaller, so it was not kept "
            f"(the request: {token_count(before)})"
        )
        return Outcome(conversation.pk, False, f"nothing changed: {because}")

    return run


def _regenerate(conversation: Conversation, user_id: int | None) -> Outcome:
    before = _tokens(conversation)
    preview = regenerate_preview(conversation)
    if regenerate_window_summary(conversation, on_chat_path=False):
        return Outcome(
            conversation.pk,
            True,
            "stored a new window summary, "
            f"{token_change(before, _tokens(conversation), 'the request')}",
        )
    because = preview.nothing_because or "the summarizer gave no usable summary"
    return Outcome(conversation.pk, False, f"nothing changed: {because}")


def _compact(conversation: Conversation, user_id: int | None) -> Outcome:
    before = _tokens(conversation)
    count = compact_tool_results(conversation)
    if count:
        return Outcome(
            conversation.pk,
            True,
            f"{count} tool result(s) compacted or stubbed, "
            f"{token_change(before, _tokens(conversation), 'the request')}",
        )
    return Outcome(
        conversation.pk, False, f"nothing changed: {compact_preview(conversation).nothing_because}"
    )


def _restore(conversation: Conversation, user_id: int | None) -> Outcome:
    preview = restore_preview(conversation)
    count = restore_originals(conversation)
    if count:
        return Outcome(
            conversation.pk,
            True,
            f"{count} original(s) restored; the next request is "
            f"{token_count(_tokens(conversation))}",
        )
    return Outcome(conversation.pk, False, f"nothing changed: {preview.nothing_because}")


def _continue(conversation: Conversation, user_id: int | None) -> Outcome:
    """A new conversation that continues this one with its summary (the summarizer
    called here, on the worker)."""
    continuation = fork_continuation(conversation, tool_services=conversation.tool_services)
    if continuation is None:
        return Outcome(conversation.pk, False, _too_deep())
    _log_created(continuation, user_id, f"Created as the continuation of #{conversation.pk}.")
    return Outcome(conversation.pk, True, f"continued in new conversation #{continuation.pk}")


def _branch(conversation: Conversation, message_id: int, user_id: int | None) -> Outcome:
    """A new conversation branched at one of this conversation's user messages."""
    result = fork_from_message(conversation, message_id)
    if result is None:
        return Outcome(
            conversation.pk,
            False,
            f"nothing changed: message #{message_id} is not one of this conversation's user "
            f"messages, or {_too_deep()}",
        )
    branched, _text = result
    _log_created(
        branched, user_id, f"Created as a branch of #{conversation.pk} at message #{message_id}."
    )
    return Outcome(conversation.pk, True, f"branched into #{branched.pk}")


# Where to cut, by the message given (assistant.staff.cut).
_CUTS: dict[str, Callable[[Conversation, int], Outcome]] = {
    SUMMARIZE_BEFORE: summarize_before,
    SUMMARIZE_AFTER: summarize_after,
}


def _cut(
    cut: Callable[[Conversation, int], Outcome], conversation: Conversation, at: int
) -> Outcome:
    try:
        return cut(conversation, at)
    except ValidationError as refused:
        return Outcome(conversation.pk, False, f"refused: {' '.join(refused.messages)}")


def _undo(conversation: Conversation, user_id: int | None) -> Outcome:
    try:
        return undo_compaction(conversation)
    except ValidationError as refused:
        return Outcome(conversation.pk, False, f"nothing changed: {' '.join(refused.messages)}")


def can_continue(conversation: Conversation) -> bool:
    """Whether a fork of this conversation would be made (under MAX_FORK_DEPTH): the
    admin refuses one past it at once instead of queuing it."""
    return can_fork(conversation)


def _too_deep() -> str:
    return f"refused: more than {compaction_config().MAX_FORK_DEPTH} forks deep"


def _log_created(created: Conversation, user_id: int | None, message: str) -> None:
    if user_id is not None:
        LogEntry.objects.log_actions(user_id, [created], ADDITION, message)


# The kind a staff action's compaction starts as (its end: the kind of its one event).
_STARTS_AS = {
    EMERGENCY_1: CompactionEvent.Kind.EMERGENCY_1,
    EMERGENCY_2: CompactionEvent.Kind.EMERGENCY_2,
    REGENERATE_SUMMARY: CompactionEvent.Kind.WINDOW_SUMMARY,
    COMPACT_TOOL_RESULTS: CompactionEvent.Kind.TOOL_RESULTS,
    RESTORE_ORIGINALS: CompactionEvent.Kind.RESTORE,
    FORK_CONTINUATION: CompactionEvent.Kind.FORK_SUMMARY,
    FORK_FROM_MESSAGE: CompactionEvent.Kind.FORK_SUMMARY,
    SUMMARIZE_BEFORE: CompactionEvent.Kind.WINDOW_SUMMARY,
    SUMMARIZE_AFTER: CompactionEvent.Kind.WINDOW_SUMMARY,
    UNDO_COMPACTION: CompactionEvent.Kind.RESTORE,
}

_RUNNERS: dict[str, Callable[[Conversation, int | None], Outcome]] = {
    EMERGENCY_1: _emergency(1),
    EMERGENCY_2: _emergency(2),
    REGENERATE_SUMMARY: _regenerate,
    COMPACT_TOOL_RESULTS: _compact,
    RESTORE_ORIGINALS: _restore,
    FORK_CONTINUATION: _continue,
    UNDO_COMPACTION: _undo,
}
