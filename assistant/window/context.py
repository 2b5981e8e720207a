"""What the model sees next, in a fixed, cache-friendly order: the system
prompt, the parent summary (forks), the pinned messages the window has moved
past (verbatim, oldest first: byte-stable until the next shift or pin), the
window summary, then the verbatim messages after the cutoff with their
model-facing text.

The result is validated before it is returned: a provider rejects a history
that starts with an assistant or tool message, a tool result without its
call, or a call without its result, so none of those is ever sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from assistant.models import Conversation, Message, handle
from assistant.providers import ANTHROPIC, GEMINI, Wire, summary_text
from assistant.text import estimate_tokens
from assistant.window.loading import WindowState, saved_window

MISSING_RESULT = "[No result was recorded for this tool call]"


def as_neutral(message: Message) -> dict:
    """A message as the model sees it, in the neutral format of assistant.providers."""
    content = getattr(message, "model_content", None)
    if content is None:  # not loaded through model_view()
        content = message.compacted_content
    if content is None:
        content = message.content
    neutral: dict = {"role": message.role, "content": content}
    blocks = getattr(message, "model_blocks", None)
    if blocks is None and not hasattr(message, "model_blocks"):  # not loaded through model_view()
        blocks = message.blocks if message.compacted_blocks is None else message.compacted_blocks
    if blocks:
        neutral["blocks"] = blocks
    if message.tool_calls:
        neutral["tool_calls"] = message.tool_calls
    if message.role == Message.Role.TOOL:
        neutral["tool_call_id"] = message.tool_call_id
        neutral["tool_name"] = message.tool_name
    if message.provider_live:
        neutral["compaction"] = message.provider_compaction
    return neutral


def with_provider_compaction(messages: list[dict[str, Any]], wire: Wire) -> list[dict[str, Any]]:
    """The messages as `wire` takes the provider's compaction: only the first message
    carries one (the window starts at it); a compaction another wire made goes as a
    user message before it, its summary in words (docs/provider-compaction.rst)."""
    kept = [
        {k: v for k, v in m.items() if k != "compaction"} if i and "compaction" in m else m
        for i, m in enumerate(messages)
    ]
    compaction = kept[0].get("compaction") if kept else None
    if compaction is None or compaction["wire"] == wire.name:
        return kept
    first = {k: v for k, v in kept[0].items() if k != "compaction"}
    return [{"role": "user", "content": summary_text(compaction)}, first, *kept[1:]]


class IncompleteToolCall(ValidationError):
    """The last assistant message asked for tools whose results are not in yet
    (code `incomplete_tool_call`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="incomplete_tool_call")


@dataclass(frozen=True)
class TokenBreakdown:
    system: int
    summaries: int
    messages: int
    tool_results: int

    @property
    def total(self) -> int:
        return self.system + self.summaries + self.messages + self.tool_results

    def scaled_to(self, total: int) -> TokenBreakdown:
        """The parts in the same proportions, summing to `total` (the size the
        hook decides on, `context_tokens`: the provider's count where there is
        one), rounded by largest remainders so the sum is exact."""
        parts = [self.system, self.summaries, self.messages, self.tool_results]
        estimated = sum(parts)
        if estimated == 0:
            return TokenBreakdown(0, 0, total, 0)
        shares = [part * total / estimated for part in parts]
        floors = [int(share) for share in shares]
        by_remainder = sorted(range(4), key=lambda i: floors[i] - shares[i])
        for i in by_remainder[: total - sum(floors)]:
            floors[i] += 1
        return TokenBreakdown(*floors)


@dataclass
class Context:
    conversation_id: int
    system: str
    parent_summary: str | None
    window_summary: str | None
    cutoff_id: int | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The pinned section (`pinned_section`), None without pinned messages past the split.
    pinned: str | None = None
    message_ids: list[int] = field(default_factory=list)
    tokens: TokenBreakdown = field(default_factory=lambda: TokenBreakdown(0, 0, 0, 0))
    # Tool calls still waiting for their results (only with allow_pending=True).
    pending_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summaries(self) -> list[str]:
        labelled = []
        if self.parent_summary:
            labelled.append(
                f"Summary of the conversation this one continues:\n{self.parent_summary}"
            )
        if self.pinned:
            labelled.append(f"{PINNED_LABEL}\n{self.pinned}")
        if self.window_summary:
            labelled.append(
                f"Summary of the earlier part of this conversation:\n{self.window_summary}"
            )
        return labelled

    @property
    def prefix(self) -> str:
        """The leading part of every request (system and summaries): while it
        stays byte-identical, the provider's prompt cache holds."""
        return "\n\n".join([self.system, *self.summaries])

    def request(self, wire: Wire, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """This context in `wire`'s request shape (assistant.providers.catalog.wire_of(name)).
        A context built with pending calls is for staff to look at, never to send: it
        is not checked."""
        check = not self.pending_calls
        messages = with_provider_compaction(self.messages, wire)
        return wire.request(self.system, self.summaries, messages, tools, check=check)

    def to_anthropic(self) -> dict[str, Any]:
        """{"system": [text blocks], "messages": [...]}: Anthropic's shape."""
        return self.request(ANTHROPIC)

    def to_gemini(self) -> dict[str, Any]:
        """{"system_instruction": str, "contents": [...]}: Gemini's shape."""
        messages = with_provider_compaction(self.messages, GEMINI)
        return GEMINI.shape(self.system, self.summaries, messages, check=not self.pending_calls)


def build_context(conversation: Conversation, *, allow_pending: bool = False) -> Context:
    """The context for the next request. Two queries with a warm cache,
    whatever the length of the conversation. Tool calls still waiting for
    their results raise IncompleteToolCall, unless `allow_pending` (the
    inspectors): then they are listed in `pending_calls`."""
    return context_from_state(saved_window(conversation), allow_pending=allow_pending)


def context_from_state(state: WindowState, *, allow_pending: bool = False) -> Context:
    """build_context from a window state already loaded (e.g. under the summary lease)."""
    return _context_of(state, _repaired(state), allow_pending)


def context_before(state: WindowState, message_id: int) -> Context:
    """The context of `state` without the message `message_id` and those after it: what
    a compaction that keeps them summarizes."""
    return _context_of(state, [row for row in _repaired(state) if row.pk < message_id], False)


def _context_of(state: WindowState, chat_rows: list[Message], allow_pending: bool) -> Context:
    in_place = {row.pk for row in chat_rows}
    pinned = [row for row in [*state.pinned_rows, *state.segment_pinned] if row.pk not in in_place]
    system = state.system
    neutral = _with_segment(state, chat_rows)
    messages = _with_missing_results(neutral, allow_pending)
    tokens = TokenBreakdown(
        system=estimate_tokens(system),
        summaries=estimate_tokens(state.parent_summary or "")
        + estimate_tokens(state.summary or "")
        + state.pinned_tokens
        + (state.segment_tokens if len(neutral) > len(chat_rows) else 0),
        messages=sum(r.token_estimate for r in chat_rows if r.role != Message.Role.TOOL),
        tool_results=sum(r.token_estimate for r in chat_rows if r.role == Message.Role.TOOL),
    )
    return Context(
        conversation_id=state.conversation_id,
        system=system,
        parent_summary=state.parent_summary,
        window_summary=state.summary,
        cutoff_id=state.through_id,
        messages=messages,
        pinned=pinned_section(pinned),
        message_ids=[row.pk for row in chat_rows],
        tokens=tokens,
        pending_calls=_pending_calls(messages) if allow_pending else [],
    )


SEGMENT_LABEL = "Summary of this conversation's messages after {after} up to {through}:"


def _with_segment(state: WindowState, chat_rows: list[Message]) -> list[dict[str, Any]]:
    """The rows as the model sees them, the summarized segment (`summarize_after`) a
    user message in its place: after the messages before it, before the newest step."""
    neutral = [as_neutral(row) for row in chat_rows]
    segment = state.segment
    if segment is None:
        return neutral
    at = next((i for i, row in enumerate(chat_rows) if row.pk > segment.through), None)
    if at is None:
        return neutral  # nothing after the segment is sent (a context before it)
    label = SEGMENT_LABEL.format(after=handle(segment.after), through=handle(segment.through))
    summary = {"role": Message.Role.USER.value, "content": f"{label}\n{segment.summary}"}
    return [*neutral[:at], summary, *neutral[at:]]


PINNED_LABEL = "Pinned messages of this conversation (verbatim; they stay in force):"


def pinned_section(rows: Sequence[Message]) -> str | None:
    """The pinned messages the window moved past, verbatim, each labelled with its
    role and handle; a tool result names the call it answers (the call stays valid
    without a tool_use block of its own), an assistant message the calls it made."""
    if not rows:
        return None
    parts = []
    for row in rows:
        neutral = as_neutral(row)
        label = f"[{row.role} {handle(row.pk)}"
        if row.role == Message.Role.TOOL:
            arguments = json.dumps(row.tool_arguments or {}, ensure_ascii=False, sort_keys=True)
            label += f", result of {row.tool_name or '?'}({arguments})"
        for call in neutral.get("tool_calls") or ():
            arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False, sort_keys=True)
            label += f", calls {call.get('name', '?')}({arguments})"
        parts.append(f"{label}]\n{neutral['content']}")
    return "\n\n".join(parts)


def context_tokens(conversation: Conversation) -> int:
    """How large the next request's context is, in tokens (the provider's
    latest count where it is still current, estimates for the rest)."""
    return saved_window(conversation).context_tokens()


def _repaired(state: WindowState) -> list[Message]:
    """The window, starting at a user message (the turn's anchor when the
    split falls inside a turn) and with no tool result whose call fell before
    the cutoff. Repairs move the cutoff back to an earlier user turn (the
    model sees a little twice and loses nothing); only when there is no
    earlier user message does it move forward past the replies."""
    rows = state.verbatim
    if rows and rows[0].provider_live:
        return rows  # the provider's compaction stands for everything before it
    while rows and (rows[0].role != Message.Role.USER or _orphaned_results(rows)):
        user_before = (
            Message.objects.filter(
                conversation_id=state.conversation_id, role=Message.Role.USER, id__lt=rows[0].pk
            )
            .order_by("-id")
            .values_list("id", flat=True)
            .first()
        )
        if user_before is None:
            break
        earlier = Message.objects.filter(
            conversation_id=state.conversation_id, id__gte=user_before, id__lt=rows[0].pk
        )
        rows = [*earlier.model_view(), *rows]
    while rows and rows[0].role != Message.Role.USER:
        rows = rows[1:]
    return rows


def _orphaned_results(rows: list[Message]) -> bool:
    """Is there a tool result whose call is not in `rows`? A result names the
    assistant message it answers (a call id alone can be reused); results
    stored before that link existed fall back to the id."""
    messages: set[int] = set()
    calls: set[str] = set()
    for row in rows:
        messages.add(row.pk)
        calls.update(call["id"] for call in row.tool_calls or ())
        if row.role != Message.Role.TOOL:
            continue
        if row.tool_call_message_id is not None:
            if row.tool_call_message_id not in messages:
                return True
        elif row.tool_call_id not in calls:
            return True
    return False


def _pending_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls of the last assistant turn that have no result yet."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] != "tool"), -1)
    if last < 0:
        return []
    answered = {m["tool_call_id"] for m in messages[last + 1 :] if m["role"] == "tool"}
    return [c for c in messages[last].get("tool_calls") or () if c["id"] not in answered]


def _with_missing_results(
    messages: list[dict[str, Any]], allow_pending: bool = False
) -> list[dict[str, Any]]:
    """Every tool call must be answered before the conversation goes on, and
    its result must follow it. Each result answers the latest earlier call
    with its id that has none yet (ids can be reused) and is placed right
    after that call's message; a call whose result was never recorded gets a
    placeholder in the context (not in the history); a result that answers
    no call is left out; calls still pending at the end are an error, unless
    `allow_pending` (the inspectors show them as they are)."""
    results: dict[int, list[dict[str, Any]]] = {}
    open_calls: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            waiting = open_calls.get(message["tool_call_id"])
            if waiting:
                results.setdefault(waiting.pop(), []).append(message)
            continue
        for call in message.get("tool_calls") or ():
            open_calls.setdefault(call["id"], []).append(index)

    last_turn = max((i for i, m in enumerate(messages) if m["role"] != "tool"), default=-1)
    repaired: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            continue
        repaired.append(message)
        calls = message.get("tool_calls") or ()
        if not calls:
            continue
        answers = results.get(index, [])
        repaired.extend(answers)
        answered = {answer["tool_call_id"] for answer in answers}
        missing = [call for call in calls if call["id"] not in answered]
        if missing and index == last_turn:
            if allow_pending:
                continue
            raise IncompleteToolCall(
                "The last assistant message has tool calls without results "
                f"({', '.join(c['id'] for c in missing)}); add them before building the context."
            )
        repaired.extend(
            {
                "role": "tool",
                "content": MISSING_RESULT,
                "tool_call_id": call["id"],
                "tool_name": call["name"],
            }
            for call in missing
        )
    return repaired
