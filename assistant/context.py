"""What the model sees next, in a fixed, cache-friendly order: the system
prompt, the parent summary (forks), the window summary, then the verbatim
messages after the cutoff with their model-facing text.

The result is validated before it is returned: a provider rejects a history
that starts with an assistant or tool message, a tool result without its
call, or a call without its result, so none of those is ever sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from assistant.models import Conversation, Message
from assistant.summaries import as_neutral
from assistant.tokens import estimate_tokens
from assistant.window import WindowState, load_window

MISSING_RESULT = "[No result was recorded for this tool call]"


class IncompleteToolCall(Exception):
    """The last assistant message asked for tools whose results are not in yet."""


@dataclass(frozen=True)
class TokenBreakdown:
    system: int
    summaries: int
    messages: int
    tool_results: int

    @property
    def total(self) -> int:
        return self.system + self.summaries + self.messages + self.tool_results


@dataclass
class Context:
    conversation_id: int
    system: str
    parent_summary: str | None
    window_summary: str | None
    cutoff_id: int | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    message_ids: list[int] = field(default_factory=list)
    tokens: TokenBreakdown = field(default_factory=lambda: TokenBreakdown(0, 0, 0, 0))

    @property
    def summaries(self) -> list[str]:
        labelled = []
        if self.parent_summary:
            labelled.append(
                f"Summary of the conversation this one continues:\n{self.parent_summary}"
            )
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

    def to_anthropic(self) -> dict[str, Any]:
        from assistant.llm.convert import to_anthropic

        return to_anthropic(self.system, self.summaries, self.messages)

    def to_gemini(self) -> dict[str, Any]:
        from assistant.llm.convert import to_gemini

        return to_gemini(self.system, self.summaries, self.messages)


def build_context(conversation: Conversation) -> Context:
    """The context for the next request. Two queries with a warm cache,
    whatever the length of the conversation."""
    state = load_window(conversation.pk)
    rows = _repaired(state)
    system_parts = [state.system_prompt] + [r.model_content for r in rows if r.role == "system"]
    system = "\n\n".join(part for part in system_parts if part)
    chat_rows = [row for row in rows if row.role != Message.Role.SYSTEM]
    messages = _with_missing_results([as_neutral(row) for row in chat_rows])
    tokens = TokenBreakdown(
        system=estimate_tokens(system),
        summaries=estimate_tokens(state.parent_summary or "")
        + estimate_tokens(state.summary or ""),
        messages=sum(r.token_estimate for r in chat_rows if r.role != Message.Role.TOOL),
        tool_results=sum(r.token_estimate for r in chat_rows if r.role == Message.Role.TOOL),
    )
    return Context(
        conversation_id=conversation.pk,
        system=system,
        parent_summary=state.parent_summary,
        window_summary=state.summary,
        cutoff_id=state.through_id,
        messages=messages,
        message_ids=[row.pk for row in chat_rows],
        tokens=tokens,
    )


def context_tokens(conversation: Conversation) -> int:
    """How large the next request's context is, in tokens (the provider's
    latest count where it is still current, estimates for the rest)."""
    return load_window(conversation.pk).context_tokens()


def _repaired(state: WindowState) -> list[Message]:
    """The window, starting at a user message and with no tool result whose
    call fell before the cutoff. Repairs move the cutoff back to an earlier
    user turn (the model sees a little twice and loses nothing); only when
    there is no earlier user message does it move forward past the replies."""
    rows = state.rows
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
    calls: set[str] = set()
    for row in rows:
        calls.update(call["id"] for call in row.tool_calls or ())
        if row.role == Message.Role.TOOL and row.tool_call_id not in calls:
            return True
    return False


def _with_missing_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool call must be answered before the conversation goes on. A
    call whose result was never recorded gets a placeholder in the context
    (not in the history); calls still pending at the end are an error."""
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    repaired: list[dict[str, Any]] = []
    owed: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] != "tool" and owed:
            repaired.extend(
                {
                    "role": "tool",
                    "content": MISSING_RESULT,
                    "tool_call_id": call["id"],
                    "tool_name": call["name"],
                }
                for call in owed
            )
            owed = []
        repaired.append(message)
        owed.extend(c for c in message.get("tool_calls", ()) if c["id"] not in answered)
    if owed:
        raise IncompleteToolCall(
            "The last assistant message has tool calls without results "
            f"({', '.join(c['id'] for c in owed)}); add them before building the context."
        )
    return repaired
