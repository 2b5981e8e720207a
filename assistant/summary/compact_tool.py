"""The compact tool: the model asks for room itself (docs/chat-loop.rst, "The compact
tool"). Its call is answered as a recall call is, by the app: the window shifts as a
staff shift does (the worker's pre-built summary adopted when there is one and no
`focus` was given; else a summary made now, `focus` its call's instructions), priced
and recorded as any shift, its event's details saying {"requested_by": "model"}. At
most once per turn, and only when the shift would free at least
COMPACT_MIN_FREE_TOKENS; a refusal is a text the model reads, never an exception."""

from __future__ import annotations

import json
from typing import Any

from assistant.history import compacting, noted
from assistant.models import CompactionEvent, Conversation, Message
from assistant.providers import call_instructions, check_instructions
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.summary.generate import context_after
from assistant.summary.leases import summary_lease
from assistant.summary.pending import adoption, adopts
from assistant.summary.shift import adopt_pending, shift_window
from assistant.window import WindowState, choose_split, load_window, split_parts, verbatim_budget

#: The event details of a shift the model asked for.
REQUESTED_BY_MODEL = "model"


def run_compact(conversation: Conversation, arguments: Any) -> str:
    """Answer one `compact` call with the text of its tool result: what the shift
    freed, or why none was made (an error text the model can act on)."""
    focus = _focus(arguments)
    if focus is not None and focus.startswith("Error:"):
        return focus
    config = compaction_config()
    turn = _turn_id(conversation.pk)
    if CompactionEvent.objects.filter(
        conversation_id=conversation.pk,
        details__requested_by=REQUESTED_BY_MODEL,
        details__turn_message_id=turn,
    ).exists():
        return (
            "Error: compact was already made in this turn (at most once per turn); "
            "go on with the task."
        )
    state = load_window(conversation.pk, config)
    before = state.context_tokens()
    freed = _would_free(state, config, prebuilt=not focus)
    if freed < config.COMPACT_MIN_FREE_TOKENS:
        return (
            f"Error: compacting now would free about {max(freed, 0)} tokens, less than the "
            f"{config.COMPACT_MIN_FREE_TOKENS} it must free; the context "
            f"({before} tokens) stays as it is. Go on with the task."
        )
    with (
        noted(conversation.pk, requested_by=REQUESTED_BY_MODEL, turn_message_id=turn),
        call_instructions(focus),
    ):
        if not (not focus and _adopt(state)):
            shift_window(conversation.pk, config, on_chat_path=True)
    after = load_window(conversation.pk, config)
    if after.through_id == state.through_id:
        return (
            "Error: the compaction could not be made now (the summary failed or would not "
            "make the context smaller); the context stays as it is. Go on with the task."
        )
    return (
        f"Compacted: the messages through ref m{after.through_id} are summarized (recall "
        f"reads their originals); the context went from {before} to about "
        f"{after.context_tokens()} tokens. Your next request carries the summary."
    )


def _focus(arguments: Any) -> str | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            return "Error: the arguments must be a JSON object."
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return "Error: the arguments must be a JSON object."
    focus = arguments.get("focus")
    if focus is None:
        return None
    if not isinstance(focus, str):
        return "Error: focus must be a text (what the summary should keep)."
    try:
        check_instructions(focus)
    except Exception as refused:  # ValidationError: its message, for the model
        return f"Error: {' '.join(getattr(refused, 'messages', [str(refused)]))}"
    return focus.strip() or None


def _turn_id(conversation_id: int) -> int:
    """The turn's user message (0 before any): a compact call is made once per turn."""
    newest = (
        Message.objects.filter(conversation_id=conversation_id, role=Message.Role.USER)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    return newest or 0


def _would_free(state: WindowState, config: CompactionConfig, *, prebuilt: bool) -> int:
    """The tokens the shift would free, by the window's estimates: the pre-built
    summary's when it would be adopted, else the newly old messages less the summary
    they become (SUMMARY_ESTIMATE_TOKENS, or the current summary's size if larger)."""
    found = adoption(state) if prebuilt else None
    if found is not None and adopts(state, found):
        sent = [found.anchor, *found.kept] if found.anchor else found.kept
        return state.estimated_tokens() - context_after(state, found.summary, sent)
    start = choose_split(state.rows, config, budget=verbatim_budget(state, config))
    if start is None:
        return 0
    newly_old, _ = split_parts(state, start)
    summary = max(config.SUMMARY_ESTIMATE_TOKENS, state.tokens(state.summary))
    return sum(row.token_estimate for row in newly_old) - (summary - state.tokens(state.summary))


def _adopt(state: WindowState) -> bool:
    """The worker's pre-built summary taken as this shift, as one compaction; False
    when there is none that fits (the lease held, or another split since)."""
    found = adoption(state)
    if found is None or not adopts(state, found):
        return False
    kind = CompactionEvent.Kind.WINDOW_SUMMARY
    with summary_lease(state.conversation_id) as lease:
        if lease is None:
            return False
        with compacting(state.conversation_id, kind, state.context_tokens()):
            fresh = load_window(state.conversation_id, state.config)
            return adopt_pending(fresh, lease) is not None
