"""A conversation replayed through the services as a chat backend drives it:
the pre-call hook and build_context before each model call, the assistant
message stored with the size of its request (the bench's token rule, as a
provider reports it), its tool results, the post-exchange pipeline after
each user turn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from assistant import services
from assistant.llm import convert
from assistant.models import Conversation
from bench.chat import finish_turn, store
from bench.payload import CostMeter, anthropic_problems, gemini_problems, payload_tokens
from bench.sessions import SYSTEM_PROMPT


@dataclass
class Request:
    index: int  # of the assistant message it produced
    tokens: int
    newest_step_tokens: int  # the last assistant message and its results, always sent


def replay(
    title: str, messages: list[dict[str, Any]]
) -> tuple[Conversation, list[str], list[Request]]:
    """The conversation, one line per malformed request (either provider's
    shape), and every request's size."""
    conversation = Conversation.objects.create(title=title, system_prompt=SYSTEM_PROMPT)
    problems: list[str] = []
    requests: list[Request] = []
    meter = CostMeter()
    ends = {i - 1 for i, m in enumerate(messages) if m["role"] == "user" and i > 0}
    ends.add(len(messages) - 1)
    for index, message in enumerate(messages):
        fields: dict[str, Any] = {}
        if message["role"] == "assistant":
            services.ensure_context_summary(conversation)
            context = services.build_context(conversation)
            anthropic = context.to_anthropic()
            for shape, (broken, bad_start) in (
                ("anthropic", anthropic_problems(anthropic)),
                ("gemini", gemini_problems(context.to_gemini())),
            ):
                if broken or bad_start:
                    problems.append(
                        f"message {index}, {shape}: {broken} broken, bad start {bad_start}"
                    )
            tokens = meter.record(anthropic).tokens
            requests.append(Request(index, tokens, _newest_step_tokens(messages[:index])))
            fields["input_tokens"] = tokens
        store(conversation, message, **fields)
        if index in ends:
            finish_turn(conversation)
    return conversation, problems, requests


def _newest_step_tokens(before: list[dict[str, Any]]) -> int:
    steps = [i for i, m in enumerate(before) if m["role"] == "assistant"]
    if not steps:
        return 0
    step = [{k: v for k, v in m.items() if k != "tool_name"} for m in before[steps[-1] :]]
    return payload_tokens(convert.to_anthropic("", [], step, check=False))
