"""The compaction actions staff run by hand (admin actions and their worker
tasks), one conversation at a time: each refuses a deleted conversation, runs
the strategy on behalf of the user (their name goes on its one compaction
event, which lists what the action touched),
writes an admin history entry (`LogEntry`) with the result, and says why
nothing changed when nothing did."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import ValidationError

from assistant.llm.prompts import call_instructions, check_instructions
from assistant.models import Conversation
from assistant.ops import telemetry
from assistant.store.events import acting_as, acting_user_of, one_event
from assistant.strategies import emergency, shift
from assistant.strategies import tool_results as compaction
from assistant.strategies.previews import (
    compact_preview,
    emergency_preview,
    regenerate_preview,
    restore_preview,
)
from assistant.text.arguments import an_id
from assistant.text.figures import token_change, token_count
from assistant.window import load_window

EMERGENCY_1 = "emergency_1"
EMERGENCY_2 = "emergency_2"
REGENERATE_SUMMARY = "regenerate_summary"
COMPACT_TOOL_RESULTS = "compact_tool_results"
RESTORE_ORIGINALS = "restore_originals"
ACTIONS = (EMERGENCY_1, EMERGENCY_2, REGENERATE_SUMMARY, COMPACT_TOOL_RESULTS, RESTORE_ORIGINALS)
# These call the summarizer: never inside a web request.
CALLS_THE_MODEL = frozenset({EMERGENCY_1, EMERGENCY_2, REGENERATE_SUMMARY})

LABELS = {
    EMERGENCY_1: "Emergency compaction level 1",
    EMERGENCY_2: "Emergency compaction level 2",
    REGENERATE_SUMMARY: "Regenerate window summary",
    COMPACT_TOOL_RESULTS: "Compact tool results",
    RESTORE_ORIGINALS: "Restore compacted originals",
}


@dataclass(frozen=True)
class Outcome:
    conversation_id: int
    changed: bool
    message: str


def check_action(
    action: str, conversation_id: int, instructions: str = "", user_id: Any = None
) -> int | None:
    """A known action on a conversation id for a stored user (or None), else
    ValidationError (before anything runs); returns the user's id."""
    if not isinstance(instructions, str):
        raise ValidationError("instructions must be a text.", code="invalid_instructions")
    check_instructions(instructions)
    if action not in ACTIONS:
        raise ValidationError(
            f"Unknown staff action {action!r}; expected one of {', '.join(ACTIONS)}.",
            code="unknown_action",
        )
    an_id("conversation_id", conversation_id)
    return acting_user_of(user_id)


def run_staff_action(
    action: str, conversation_id: int, user_id: int | None, instructions: str = ""
) -> Outcome:
    """Run one staff action on one conversation for `user_id` and record it;
    `instructions` go into the prompt of every summary it makes."""
    user_id = check_action(action, conversation_id, instructions, user_id)
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
            one_event(conversation_id, lambda: _tokens(conversation)),
        ):
            outcome = _RUNNERS[action](conversation)
    if user_id is not None:
        focus = f' (instructions: "{instructions.strip()}")' if instructions.strip() else ""
        LogEntry.objects.log_actions(
            user_id, [conversation], CHANGE, f"{LABELS[action]}{focus}: {outcome.message}."
        )
    return outcome


def _tokens(conversation: Conversation) -> int:
    return load_window(conversation.pk).context_tokens()


def _emergency(level: int) -> Callable[[Conversation], Outcome]:
    def run(conversation: Conversation) -> Outcome:
        before = _tokens(conversation)
        outcome = emergency.apply_emergency_level(conversation, level)
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


def _regenerate(conversation: Conversation) -> Outcome:
    before = _tokens(conversation)
    preview = regenerate_preview(conversation)
    if shift.regenerate_window_summary(conversation, on_chat_path=False):
        return Outcome(
            conversation.pk,
            True,
            "stored a new window summary, "
            f"{token_change(before, _tokens(conversation), 'the request')}",
        )
    because = preview.nothing_because or "the summarizer gave no usable summary"
    return Outcome(conversation.pk, False, f"nothing changed: {because}")


def _compact(conversation: Conversation) -> Outcome:
    before = _tokens(conversation)
    count = compaction.compact_tool_results(conversation)
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


def _restore(conversation: Conversation) -> Outcome:
    preview = restore_preview(conversation)
    count = compaction.restore_originals(conversation)
    if count:
        return Outcome(
            conversation.pk,
            True,
            f"{count} original(s) restored; the next request is "
            f"{token_count(_tokens(conversation))}",
        )
    return Outcome(conversation.pk, False, f"nothing changed: {preview.nothing_because}")


_RUNNERS = {
    EMERGENCY_1: _emergency(1),
    EMERGENCY_2: _emergency(2),
    REGENERATE_SUMMARY: _regenerate,
    COMPACT_TOOL_RESULTS: _compact,
    RESTORE_ORIGINALS: _restore,
}
