"""A conversation replayed through the services as a chat backend drives it:
the pre-call hook and the context it left (`prepare_context`) before each
model call, the assistant message stored with the size of its request (the
bench's token rule, as a provider reports it), its tool results, the
post-exchange pipeline after each user turn."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from assistant import services
from assistant.models import Conversation
from assistant.providers import convert
from bench.chat import finish_turn, store
from bench.payload import CostMeter, anthropic_problems, gemini_problems, payload_tokens
from bench.sessions import SYSTEM_PROMPT

# The three longest real sessions (contexts to 316,000 tokens): one replay of each
# takes 20-30 s on an idle machine and over 30 s under load, so their cases run in
# `make test-slow` (pytest.ini's rule), which CI runs too.
LONG_SESSIONS = frozenset(
    {
        "pi-badlogic-opus45-issue288",
        "pi-badlogic-sonnet45-selectors",
        "cc-entire-soph-sonnet45-1to1",
    }
)


def session_params(names: Iterable[str]) -> list[Any]:
    """`names` as pytest parameters, the long sessions' marked `slow`."""
    return [
        pytest.param(name, id=name, marks=[pytest.mark.slow] if name in LONG_SESSIONS else [])
        for name in names
    ]


@dataclass
class Request:
    index: int  # of the assistant message it produced
    tokens: int
    newest_step_tokens: int  # the last assistant message and its results, always sent
    # Nothing verbatim but the turn's user message and the newest step: all the
    # request can shrink to (docs/compaction.rst: when those two alone pass the trigger,
    # the request is they and the summaries).
    minimal: bool = False
    floor_tokens: int = 0  # the system prompt, the turn's user message and the newest step


def replay(
    title: str, messages: list[dict[str, Any]], *, check_prepared: bool = False
) -> tuple[Conversation, list[str], list[Request]]:
    """The conversation, one line per malformed request (either provider's
    shape), and every request's size. `check_prepared`: each request, made from the
    window the hook left (`prepare_context`), is also compared with the one
    build_context loads afresh (a line per difference)."""
    conversation = Conversation.objects.create(title=title, system_prompt=SYSTEM_PROMPT)
    problems: list[str] = []
    requests: list[Request] = []
    meter = CostMeter()
    ends = {i - 1 for i, m in enumerate(messages) if m["role"] == "user" and i > 0}
    ends.add(len(messages) - 1)
    for index, message in enumerate(messages):
        fields: dict[str, Any] = {}
        if message["role"] == "assistant":
            context = services.prepare_context(conversation)
            anthropic = context.to_anthropic()
            if check_prepared and services.build_context(conversation).to_anthropic() != anthropic:
                problems.append(f"message {index}: the prepared context is not the window's")
            for shape, (broken, bad_start) in (
                ("anthropic", anthropic_problems(anthropic)),
                ("gemini", gemini_problems(context.to_gemini())),
            ):
                if broken or bad_start:
                    problems.append(
                        f"message {index}, {shape}: {broken} broken, bad start {bad_start}"
                    )
            tokens = meter.record(anthropic).tokens
            before = messages[:index]
            required = _turn_request_and_newest_step(before)
            requests.append(
                Request(
                    index,
                    tokens,
                    _newest_step_tokens(before),
                    minimal=len(context.messages) == len(required),
                    floor_tokens=_payload_tokens(SYSTEM_PROMPT, required),
                )
            )
            fields["input_tokens"] = tokens
        store(conversation, message, **fields)
        if index in ends:
            finish_turn(conversation)
    return conversation, problems, requests


def _newest_step_tokens(before: list[dict[str, Any]]) -> int:
    steps = [i for i, m in enumerate(before) if m["role"] == "assistant"]
    if not steps:
        return 0
    return _payload_tokens("", before[steps[-1] :])


def _payload_tokens(system: str, messages: list[dict[str, Any]]) -> int:
    neutral = [{k: v for k, v in m.items() if k != "tool_name"} for m in messages]
    return payload_tokens(convert.to_anthropic(system, [], neutral, check=False))


def _empty_answer(message: dict[str, Any]) -> bool:
    """A model answer with no text and no tool calls: stored, never sent."""
    return not (message.get("content") or "").strip() and not message.get("tool_calls")


def _turn_request_and_newest_step(before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages a request must carry verbatim: the current turn's user
    message and, if the turn has one, its newest step (as stored)."""
    user = max((i for i, m in enumerate(before) if m["role"] == "user"), default=0)
    step = max((i for i, m in enumerate(before) if m["role"] == "assistant"), default=-1)
    newest = [m for m in before[step:] if m["role"] == "tool" or not _empty_answer(m)]
    if step < user:
        newest = []
    return [before[user], *newest]
