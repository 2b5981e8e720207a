"""The public service API (docs/api.rst). Other code, the admin, tasks
and tests call these names; the work is done in the modules behind them.

The actions staff run by hand take `acting_user=None`: the compaction events
they record name that user (see `assistant.history.events.acting_as`). Those that
change a conversation refuse a deleted one (`conversation_deleted`), as
add_message, finish_exchange, chat_step and the pre-call hook do: `@_live`,
over `assistant.history.deletion.require_live`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from assistant.chat import (
    Step,
    achat_step,
    answer_tool_calls,
    chat_step,
    model_request,
    remember_chat_tools,
)
from assistant.cleanup import restore_deleted
from assistant.emergency import (
    ContextTooLarge,
    acall_with_overflow_recovery,
    call_with_overflow_recovery,
    compact_if_flagged,
)
from assistant.emergency import emergency_compact as _emergency_compact
from assistant.fork import (
    Resumed,
    SessionInfo,
    TreeNode,
    conversation_tree,
    generate_parent_summary,
    list_sessions,
)
from assistant.fork import fork_continuation as _fork_continuation
from assistant.fork import fork_from_message as _fork_from_message
from assistant.fork import new_session as _new_session
from assistant.fork import resume_session as _resume_session
from assistant.fork import set_active_branch as _set_active_branch
from assistant.history import (
    acting_as,
    add_message,
    enqueue_on_commit,
    entry_point,
    mark_deleted,
    require_live,
    require_live_id,
)
from assistant.models import Conversation, Message, SummaryVersion
from assistant.pins import pin_message as _pin
from assistant.post_exchange import finish_exchange, process_exchange
from assistant.precall import NextRequest, ensure_context_summary, next_request, prepare_context
from assistant.providers import StreamInterrupted, call_instructions, context_overflow
from assistant.recall import run_tool_call, tool_definitions
from assistant.responses import record_response
from assistant.staff import (
    CutPreview,
    Outcome,
    Preview,
    RunPlan,
    UndoPreview,
    check_action,
    emergency_preview,
    plan_run,
    regenerate_preview,
    restore_preview,
    run_staff_action,
    summarize_after_preview,
    summarize_before_preview,
    undo_compaction_preview,
)
from assistant.staff import summarize_after as _summarize_after
from assistant.staff import summarize_before as _summarize_before
from assistant.staff import undo_compaction as _undo_compaction
from assistant.summary import (
    compaction_cutoff_id,
    prebuild_window_summary,
    summarize_messages,
)
from assistant.summary import correct_summary as _correct
from assistant.summary import regenerate_window_summary as _regenerate_window_summary
from assistant.summary import revert_summary as _revert
from assistant.summary import review_summary as _review
from assistant.tasks import staff_action_task
from assistant.tool_results import compact_tool_results as _compact_tool_results
from assistant.tool_results import restore_originals as _restore_originals
from assistant.window import (
    Context,
    ContextStatus,
    IncompleteToolCall,
    build_context,
    context_status,
    context_tokens,
)

# Whom a staff action acts for: a django.contrib.auth user, a user id, or None.
User = Any
F = TypeVar("F", bound=Callable[..., Any])


def _live(service: F) -> F:
    """The service binds its arguments (assistant.history.arguments.entry_point: an unknown
    keyword is `unknown_field`) and refuses a conversation that is not saved or is
    deleted, before it runs: the one guard of the services that write."""
    return entry_point(conversation=lambda _, conversation: require_live(conversation))(service)


@_live
def compact_tool_results(
    conversation: Conversation,
    *,
    include_current_turn: bool = False,
    min_chars: int | None = None,
    acting_user: User = None,
    instructions: str | None = None,
) -> int:
    """`instructions`: added to the prompt of every tool result summarized here."""
    with acting_as(acting_user), call_instructions(instructions):
        return _compact_tool_results(
            conversation, include_current_turn=include_current_turn, min_chars=min_chars
        )


@_live
def restore_originals(
    conversation: Conversation,
    message_ids: list[int] | None = None,
    *,
    acting_user: User = None,
) -> int:
    with acting_as(acting_user):
        return _restore_originals(conversation, message_ids)


@_live
def emergency_compact(
    conversation: Conversation,
    level: int = 1,
    *,
    acting_user: User = None,
    instructions: str | None = None,
) -> bool:
    with acting_as(acting_user), call_instructions(instructions):
        return _emergency_compact(conversation, level=level)


@_live
def regenerate_window_summary(
    conversation: Conversation,
    *,
    recent_fraction: float | None = None,
    keep_last: int | None = None,
    newest_step_only: bool = False,
    acting_user: User = None,
    instructions: str | None = None,
) -> bool:
    """`instructions`: this summary's focus (Claude Code's `/compact focus`), added to
    the prompt after SUMMARY_INSTRUCTIONS."""
    with acting_as(acting_user), call_instructions(instructions):
        return _regenerate_window_summary(
            conversation,
            recent_fraction=recent_fraction,
            keep_last=keep_last,
            newest_step_only=newest_step_only,
        )


@_live
def fork_continuation(
    conversation: Conversation,
    pending_user_message: str | None = None,
    tool_services: Iterable[str] = (),
    summarize: bool = True,
    *,
    acting_user: User = None,
) -> Conversation | None:
    with acting_as(acting_user):
        return _fork_continuation(
            conversation,
            pending_user_message=pending_user_message,
            tool_services=tool_services,
            summarize=summarize,
        )


@_live
def fork_from_message(
    conversation: Conversation, message_id: Any, summarize: bool = True, *, acting_user: User = None
) -> tuple[Conversation, str] | None:
    with acting_as(acting_user):
        return _fork_from_message(conversation, message_id, summarize=summarize)


@_live
def new_session(
    conversation: Conversation, *, carry_summary: bool = True, acting_user: User = None
) -> Conversation:
    """Close this session and open the next (/new; /clear: `carry_summary=False`, which
    carries nothing). The messages stay where they were; the new session carries the
    closed one's summary, made by the worker (the offline summary until it lands).
    Session links do not count toward MAX_FORK_DEPTH."""
    with acting_as(acting_user):
        return _new_session(conversation, carry_summary=carry_summary)


@_live
def resume_session(conversation: Conversation, *, acting_user: User = None) -> Resumed:
    """/resume: `conversation` itself reopened with its full context when it is under
    the trigger (`reopened=True`), else a new session carrying its summary
    (`reopened=False`). `.conversation` is where the chat goes on."""
    with acting_as(acting_user):
        return _resume_session(conversation)


@_live
def set_active_branch(conversation: Conversation, *, acting_user: User = None) -> None:
    """Make `conversation` the shown sibling at its departure point (and its
    ancestors on the path from the root): a chat UI's "< 2/3 >"."""
    with acting_as(acting_user):
        _set_active_branch(conversation)


def queue_staff_action(
    action: str,
    conversation_id: int,
    *,
    acting_user: User = None,
    instructions: str = "",
    message_id: int | None = None,
) -> None:
    """Run a staff action on the worker once the current transaction commits
    (`instructions`: for the summaries it makes; `message_id`: the user message
    "fork_from_message" branches at)."""
    user_id = check_action(action, conversation_id, instructions, acting_user, message_id)
    require_live_id(conversation_id)
    if message_id is None:
        enqueue_on_commit(staff_action_task, action, conversation_id, user_id, instructions)
    else:
        enqueue_on_commit(
            staff_action_task, action, conversation_id, user_id, instructions, message_id
        )


@_live
def summarize_before(
    conversation: Conversation,
    message_id: Any,
    *,
    instructions: str | None = None,
    acting_user: User = None,
) -> Outcome:
    """Summarize everything before the message; it and all after it stay verbatim
    (docs/compaction.rst, "Choosing where to cut"). A message the window summary
    already covers: ValidationError `already_summarized`."""
    with acting_as(acting_user), call_instructions(instructions):
        return _summarize_before(conversation, message_id)


@_live
def summarize_after(
    conversation: Conversation,
    message_id: Any,
    *,
    instructions: str | None = None,
    acting_user: User = None,
) -> Outcome:
    """Summarize the messages after the message, up to the newest step, as a segment
    sent in their place; those up to it and the newest step stay as they are
    (docs/compaction.rst, "Summarizing after a message"). Nothing after it but the
    newest step: ValidationError `nothing_after`."""
    with acting_as(acting_user), call_instructions(instructions):
        return _summarize_after(conversation, message_id)


@_live
def undo_compaction(conversation: Conversation, *, acting_user: User = None) -> Outcome:
    """Take the conversation back to the request it sent before its last compaction
    (docs/compaction.rst, "Undoing the last compaction"): one `restore` event."""
    with acting_as(acting_user):
        return _undo_compaction(conversation)


@_live
def pin_message(
    conversation: Conversation, message_id: Any, pinned: bool = True, *, acting_user: User = None
) -> Message:
    """Pin a message (or unpin it, `pinned=False`) and return it: docs/compaction.rst,
    "Pinned messages". Past PINNED_MAX_TOKENS a ValidationError, nothing changed."""
    with acting_as(acting_user):
        return _pin(conversation, message_id, pinned)


@_live
def correct_summary(
    conversation: Conversation, text: str, *, acting_user: User = None
) -> SummaryVersion:
    """Make staff's `text` the window summary the next request carries (a new version)."""
    with acting_as(acting_user):
        return _correct(conversation, text)


@_live
def revert_summary(
    conversation: Conversation, version_id: int, *, acting_user: User = None
) -> SummaryVersion:
    """Make an earlier version of the current split's summary current again."""
    with acting_as(acting_user):
        return _revert(conversation, version_id)


@_live
def review_summary(
    conversation: Conversation, version_id: int, *, acting_user: User = None
) -> SummaryVersion:
    """Mark a summary version reviewed by `acting_user` (it gates nothing)."""
    with acting_as(acting_user):
        return _review(conversation, version_id)


__all__ = [
    "Context",
    "ContextStatus",
    "ContextTooLarge",
    "CutPreview",
    "IncompleteToolCall",
    "NextRequest",
    "Outcome",
    "Preview",
    "Resumed",
    "RunPlan",
    "SessionInfo",
    "Step",
    "StreamInterrupted",
    "TreeNode",
    "UndoPreview",
    "acall_with_overflow_recovery",
    "achat_step",
    "add_message",
    "answer_tool_calls",
    "build_context",
    "call_instructions",
    "call_with_overflow_recovery",
    "chat_step",
    "compact_if_flagged",
    "compact_tool_results",
    "compaction_cutoff_id",
    "context_overflow",
    "context_status",
    "context_tokens",
    "conversation_tree",
    "correct_summary",
    "emergency_compact",
    "emergency_preview",
    "ensure_context_summary",
    "finish_exchange",
    "fork_continuation",
    "fork_from_message",
    "generate_parent_summary",
    "list_sessions",
    "mark_deleted",
    "model_request",
    "new_session",
    "next_request",
    "pin_message",
    "plan_run",
    "prebuild_window_summary",
    "prepare_context",
    "process_exchange",
    "queue_staff_action",
    "record_response",
    "regenerate_preview",
    "regenerate_window_summary",
    "remember_chat_tools",
    "restore_deleted",
    "restore_originals",
    "restore_preview",
    "resume_session",
    "revert_summary",
    "review_summary",
    "run_staff_action",
    "run_tool_call",
    "set_active_branch",
    "summarize_after",
    "summarize_after_preview",
    "summarize_before",
    "summarize_before_preview",
    "summarize_messages",
    "tool_definitions",
    "undo_compaction",
    "undo_compaction_preview",
]


def _bound_entry_points() -> None:
    """Every other function of the API binds its call first too (`unknown_field`,
    `invalid_arguments`, never a TypeError); those that write to a conversation they
    are given refuse a deleted one (`_live`)."""
    names = globals()
    for name in __all__:
        value = names[name]
        if not inspect.isfunction(value) or getattr(value, "__wrapped__", None):
            continue
        names[name] = (_live if name in _WRITERS else entry_point())(value)


# The re-exported services that write to the conversation they are first given and
# have no guard of their own (the pre-call hook's window query refuses a deleted one,
# add_message's insert too).
_WRITERS = frozenset(
    {
        "compact_if_flagged",
        "generate_parent_summary",
        "list_sessions",
        "prebuild_window_summary",
        "remember_chat_tools",
    }
)
_bound_entry_points()
