"""The public service API (DESIGN section 5). Other code, the admin, tasks
and tests call these names; the work is done in the modules behind them.

The actions staff run by hand take `acting_user=None`: the compaction events
they record name that user (see `assistant.events.acting_as`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from assistant import compaction, emergency, forking, summaries
from assistant.context import Context, IncompleteToolCall, build_context, context_tokens
from assistant.deletion import mark_deleted, restore_deleted
from assistant.emergency import ContextTooLarge, compact_if_flagged
from assistant.events import acting_as
from assistant.forking import generate_parent_summary
from assistant.history import add_message, finish_exchange
from assistant.hooks import call_with_overflow_recovery, ensure_context_summary, process_exchange
from assistant.llm.overflow import context_overflow
from assistant.models import Conversation
from assistant.previews import restore_preview
from assistant.queue import enqueue_on_commit
from assistant.recall import run_tool_call, tool_definitions
from assistant.staff_actions import Outcome, run_staff_action
from assistant.summaries import (
    compaction_cutoff_id,
    prebuild_window_summary,
    summarize_messages,
)
from assistant.tasks import staff_action_task

# Whom a staff action acts for: a django.contrib.auth user, a user id, or None.
User = Any


def compact_tool_results(
    conversation: Conversation,
    *,
    include_current_turn: bool = False,
    min_chars: int | None = None,
    acting_user: User = None,
) -> int:
    with acting_as(acting_user):
        return compaction.compact_tool_results(
            conversation, include_current_turn=include_current_turn, min_chars=min_chars
        )


def restore_originals(
    conversation: Conversation,
    message_ids: list[int] | None = None,
    *,
    acting_user: User = None,
) -> int:
    with acting_as(acting_user):
        return compaction.restore_originals(conversation, message_ids)


def emergency_compact(
    conversation: Conversation, level: int = 1, *, acting_user: User = None
) -> bool:
    with acting_as(acting_user):
        return emergency.emergency_compact(conversation, level=level)


def regenerate_window_summary(
    conversation: Conversation,
    *,
    recent_fraction: float | None = None,
    keep_last: int | None = None,
    newest_step_only: bool = False,
    acting_user: User = None,
) -> bool:
    with acting_as(acting_user):
        return summaries.regenerate_window_summary(
            conversation,
            recent_fraction=recent_fraction,
            keep_last=keep_last,
            newest_step_only=newest_step_only,
        )


def fork_continuation(
    conversation: Conversation,
    pending_user_message: str | None = None,
    tool_services: Iterable[str] = (),
    summarize: bool = True,
    *,
    acting_user: User = None,
) -> Conversation | None:
    with acting_as(acting_user):
        return forking.fork_continuation(
            conversation,
            pending_user_message=pending_user_message,
            tool_services=tool_services,
            summarize=summarize,
        )


def fork_from_message(
    conversation: Conversation, message_id: Any, summarize: bool = True, *, acting_user: User = None
) -> tuple[Conversation, str] | None:
    with acting_as(acting_user):
        return forking.fork_from_message(conversation, message_id, summarize=summarize)


def queue_staff_action(action: str, conversation_id: int, *, acting_user: User = None) -> None:
    """Run a staff action on the worker once the current transaction commits."""
    user_id = getattr(acting_user, "pk", acting_user)
    enqueue_on_commit(staff_action_task, action, conversation_id, user_id)


__all__ = [
    "Context",
    "ContextTooLarge",
    "IncompleteToolCall",
    "Outcome",
    "add_message",
    "build_context",
    "call_with_overflow_recovery",
    "compact_if_flagged",
    "compact_tool_results",
    "compaction_cutoff_id",
    "context_overflow",
    "context_tokens",
    "emergency_compact",
    "ensure_context_summary",
    "finish_exchange",
    "fork_continuation",
    "fork_from_message",
    "generate_parent_summary",
    "mark_deleted",
    "prebuild_window_summary",
    "process_exchange",
    "queue_staff_action",
    "regenerate_window_summary",
    "restore_deleted",
    "restore_originals",
    "restore_preview",
    "run_staff_action",
    "run_tool_call",
    "summarize_messages",
    "tool_definitions",
]
