"""What every in-memory strategy answers before a model call: the request it
would send (system prompt, summaries, messages), given the history so far."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from assistant.providers.convert import to_anthropic


@dataclass
class Request:
    system: str
    summaries: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)

    def to_anthropic(self) -> dict[str, Any]:
        """The payload, through the product's own converter (arguments that a
        workload keeps as JSON text are parsed, as add_message stores them)."""
        return to_anthropic(
            self.system, self.summaries, [_parsed(m) for m in self.messages], check=False
        )


class PayloadBuilder:
    """`Request.to_anthropic()` for one conversation's requests in order, fast:
    the leading messages that are the very same objects as in the previous
    request keep their converted form, and only the rest goes through the
    product's converter. The result equals a full conversion, except that a
    reused message never carries the cache_control marker (the bench ignores
    the markers). Strategies must replace a message dict they change, never
    mutate it."""

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] = []
        self._converted: list[dict[str, Any]] = []
        self._starts: list[int | None] = []  # converted index a message starts, if any
        self._first_use: dict[str, int] = {}  # tool-call id -> first message using it

    def build(self, request: Request) -> dict[str, Any]:  # noqa: C901
        messages = request.messages
        same = 0
        for before, now in zip(self._messages, messages, strict=False):
            if before is not now:
                break
            same += 1
        # Restart at a message that began a converted message of its own, so
        # merging with the one before cannot differ; never reuse the last
        # converted message (it carries the cache marker and may merge on).
        keep_from = 0
        for index in range(min(same, len(self._messages)) - 1, -1, -1):
            start = self._starts[index]
            if start is not None and start < len(self._converted) - 1:
                keep_from = index
                break
        first_use = {k: v for k, v in self._first_use.items() if v < keep_from}
        for index, message in enumerate(messages[keep_from:], start=keep_from):
            for call_id in _call_ids(message):
                if call_id in first_use and first_use[call_id] < keep_from:
                    # A reused id: the converter renames it by what came before, so
                    # the request is converted whole.
                    keep_from = 0
                first_use.setdefault(call_id, index)
        if keep_from == 0:
            first_use = {}
            for index, message in enumerate(messages):
                for call_id in _call_ids(message):
                    first_use.setdefault(call_id, index)
        reused = self._converted[: self._starts[keep_from]] if keep_from else []
        tail = to_anthropic(
            request.system,
            request.summaries,
            [_parsed(m) for m in messages[keep_from:]],
            check=False,
        )
        converted = reused + tail["messages"]
        starts = self._starts[:keep_from]
        role = reused[-1]["role"] if reused else None
        count = len(reused)
        for message in messages[keep_from:]:
            mine = _anthropic_role(message)
            if mine is not None and mine != role:
                starts.append(count)
                count += 1
                role = mine
            else:
                starts.append(None)
        self._messages, self._converted, self._starts = list(messages), converted, starts
        self._first_use = first_use
        return {"system": tail["system"], "messages": converted}


def _call_ids(message: dict[str, Any]) -> list[str]:
    if message["role"] == "tool":
        return [message["tool_call_id"]]
    return [call["id"] for call in message.get("tool_calls") or []]


def _anthropic_role(message: dict[str, Any]) -> str | None:
    """The role of the converted message this one lands in (None: dropped)."""
    if message["role"] == "tool":
        return "user"
    if not (message.get("content") or "").strip() and not message.get("tool_calls"):
        return None
    return "assistant" if message["role"] == "assistant" else "user"


def _parsed(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls or not any(isinstance(c.get("arguments"), str) for c in calls):
        return message
    parsed = [
        {**c, "arguments": json.loads(c["arguments"] or "{}")}
        if isinstance(c.get("arguments"), str)
        else c
        for c in calls
    ]
    return {**message, "tool_calls": parsed}


class Strategy(ABC):
    name = "strategy"

    @abstractmethod
    def request(self, history: list[dict[str, Any]]) -> Request:
        """`history`: every message before the assistant message about to be produced."""

    def end_turn(self, history: list[dict[str, Any]]) -> None:  # noqa: B027 (optional hook)
        """After the last message of a user turn (the exchange is complete)."""
