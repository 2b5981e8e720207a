"""Build conversations for tests through the real service API."""

from __future__ import annotations

import itertools

from assistant.models import Conversation, Message
from assistant.services import add_message

_ids = itertools.count(1)


def tool_turn(
    conversation: Conversation,
    question: str,
    calls: list[tuple[str, dict, str]],
    answer: str = "Done.",
    **answer_usage,
) -> list[Message]:
    """One user turn: the question, an assistant message calling each tool,
    the results, and the final answer. Returns the messages in order."""
    messages = [add_message(conversation, "user", question)]
    if calls:
        tool_calls = [
            {"id": f"call_{next(_ids)}", "name": name, "arguments": args} for name, args, _ in calls
        ]
        messages.append(add_message(conversation, "assistant", "", tool_calls=tool_calls))
        for call, (_, _, result) in zip(tool_calls, calls, strict=True):
            messages.append(add_message(conversation, "tool", result, tool_call_id=call["id"]))
    messages.append(add_message(conversation, "assistant", answer, **answer_usage))
    return messages


def chat_turns(
    conversation: Conversation, count: int, size: int = 20, prefix: str = ""
) -> list[Message]:
    """`count` plain question/answer turns of about `size` characters each."""
    messages = []
    for turn in range(count):
        messages.append(add_message(conversation, "user", f"{prefix}q{turn} " + "x" * size))
        messages.append(add_message(conversation, "assistant", f"{prefix}a{turn} " + "y" * size))
    return messages


def html(size: int, marker: str = "") -> str:
    body = "<p>Lorem ipsum dolor sit amet.</p>" * (size // 34 + 1)
    return f"<article>{marker}{body}</article>"[:size]
