"""Gemini's Interactions API (`client.interactions.create`, google-genai 3.4's
`GeminiNextGenInteractions`, POST /v1/interactions): request shape, response and stream
reading, usage. Its models, media rates and overflow errors are generateContent's.

Server-side state: every request is sent with `store=False` and without
`previous_interaction_id`: the whole compacted context goes as `input` each time, so
no request after a window shift carries the history the server would have kept
(docs/providers.rst, "Gemini's Interactions API")."""

from __future__ import annotations

import json
from typing import Any

from assistant.providers import convert
from assistant.providers.base import ChatResult, Usage, new_tool_call_id
from assistant.providers.gemini.wire import GeminiWire
from assistant.providers.wire import StreamReader


def input_steps(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """generateContent's contents (checked: every call has its result) as Interactions
    input steps: user_input and model_output with their text, function_call and
    function_result steps."""
    steps: list[dict[str, Any]] = []
    for content in contents:
        texts = [{"type": "text", "text": p["text"]} for p in content["parts"] if "text" in p]
        if texts:
            kind = "model_output" if content["role"] == "model" else "user_input"
            steps.append({"type": kind, "content": texts})
        for part in content["parts"]:
            if "function_call" in part:
                call = part["function_call"]
                steps.append(
                    {
                        "type": "function_call",
                        "id": call["id"],
                        "name": call["name"],
                        "arguments": call["args"],
                    }
                )
            elif "function_response" in part:
                answer = part["function_response"]
                step = {
                    "type": "function_result",
                    "call_id": answer["id"],
                    "result": str(answer["response"].get("result", "")),
                }
                if answer.get("name"):
                    step["name"] = answer["name"]
                steps.append(step)
    return steps


def interaction_usage(usage: Any) -> Usage:
    """`usage`: total_input_tokens includes the cached part (total_cached_tokens)."""
    if usage is None:
        return Usage(0, 0)
    cached = getattr(usage, "total_cached_tokens", None) or 0
    total = getattr(usage, "total_input_tokens", None) or 0
    output = (getattr(usage, "total_output_tokens", None) or 0) + (
        getattr(usage, "total_thought_tokens", None) or 0
    )
    return Usage(max(total - cached, 0), output, cache_read_tokens=cached)


def is_interaction(response: Any) -> bool:
    return type(response).__name__ == "Interaction" and hasattr(response, "steps")


def interaction_result(response: Any, model: str = "") -> ChatResult:
    """The steps' model_output text (thoughts left out) and function calls."""
    text, calls = [], []
    for step in getattr(response, "steps", None) or []:
        kind = getattr(step, "type", "")
        if kind == "model_output":
            text += [c.text for c in step.content or [] if getattr(c, "type", "") == "text"]
        elif kind == "function_call":
            calls.append(
                {
                    "id": step.id or new_tool_call_id(),
                    "name": step.name or "",
                    "arguments": dict(step.arguments or {}),
                }
            )
    status = getattr(response, "status", None)
    return ChatResult(
        text="".join(t or "" for t in text),
        usage=interaction_usage(getattr(response, "usage", None)),
        model=getattr(response, "model", None) or model,
        stop_reason=getattr(status, "value", status),
        tool_calls=calls,
        provider=GEMINI_INTERACTIONS.name,
    )


class InteractionsStream(StreamReader):
    """`interactions.create(stream=True)`: server-sent events (google/genai/_gaos/types/
    interactions/interactionsseevent.py): interaction.created, interaction.status_update,
    then per output step step.start (the step: a model_output, or a function_call with
    its id and name), step.delta (a `text` delta, or an `arguments_delta` with a piece of
    the call's JSON arguments) and step.stop; last interaction.completed, with the status
    and usage. Its interaction may omit the steps (interactionsseeventinteraction.py:
    "Streaming lifecycle payloads may omit fields"), so the answer is assembled from the
    step events. With the SDK's automatic continuation, hops follow one another, each
    from interaction.created to an interaction.completed whose status is
    requires_continuation but the last; each hop's usage is its own, summed here."""

    def __init__(self, source: Any) -> None:
        super().__init__(source)
        self.steps: list[dict[str, Any]] = []  # {type, text | id, name, arguments, pieces}
        self.hop: dict[int, dict[str, Any]] = {}  # this hop's steps, by index
        self.usages: list[Usage] = []
        self.completed: Any = None  # the last hop's interaction.completed interaction
        self.model = ""  # interaction.created's

    def text(self, event: Any) -> str:
        kind = getattr(event, "event_type", None) or getattr(event, "type", "")
        if kind == "interaction.created":
            self.hop = {}
            self.model = getattr(getattr(event, "interaction", None), "model", None) or self.model
        elif kind == "step.start":
            self._start(getattr(event, "index", 0), getattr(event, "step", None))
        elif kind == "step.delta":
            return self._delta(getattr(event, "index", 0), getattr(event, "delta", None))
        elif kind == "interaction.completed":
            interaction = getattr(event, "interaction", None)
            self.usages.append(interaction_usage(getattr(interaction, "usage", None)))
            status = getattr(interaction, "status", None)
            if getattr(status, "value", status) != "requires_continuation":
                self.completed = interaction
        return ""

    def _start(self, index: int, step: Any) -> None:
        kind = getattr(step, "type", "")
        entry: dict[str, Any] = {"type": kind, "text": [], "pieces": []}
        if kind == "function_call":
            entry.update(
                id=getattr(step, "id", None) or new_tool_call_id(),
                name=getattr(step, "name", None) or "",
                arguments=dict(getattr(step, "arguments", None) or {}),
            )
        self.steps.append(entry)
        self.hop[index] = entry

    def _delta(self, index: int, delta: Any) -> str:
        if index not in self.hop:  # a delta with no step.start before it: a text step
            self._start(index, None)
        entry = self.hop[index]
        kind = getattr(delta, "type", "")
        if kind == "text" and entry["type"] in ("model_output", ""):
            piece = str(getattr(delta, "text", "") or "")
            entry["text"].append(piece)
            return piece
        if kind == "arguments_delta":
            entry["pieces"].append(str(getattr(delta, "arguments", "") or ""))
        return ""

    def final(self) -> ChatResult | None:
        if self.completed is None:
            return None
        if not self.steps and getattr(self.completed, "steps", None):
            return interaction_result(self.completed)  # an interaction that carries them
        calls = [
            {
                "id": step["id"],
                "name": step["name"],
                "arguments": json.loads("".join(step["pieces"]))
                if step["pieces"]
                else step["arguments"],
            }
            for step in self.steps
            if step["type"] == "function_call"
        ]
        status = getattr(self.completed, "status", None)
        return ChatResult(
            text="".join("".join(step["text"]) for step in self.steps),
            usage=Usage(
                sum(u.input_tokens for u in self.usages),
                sum(u.output_tokens for u in self.usages),
                cache_read_tokens=sum(u.cache_read_tokens for u in self.usages),
            ),
            model=getattr(self.completed, "model", None) or self.model,
            stop_reason=getattr(status, "value", status),
            tool_calls=calls,
            provider=GEMINI_INTERACTIONS.name,
        )


class GeminiInteractionsWire(GeminiWire):
    """Gemini's models on the Interactions API's wire."""

    name = "gemini_interactions"

    def request(
        self,
        system: str,
        summaries: list[str],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        check: bool = True,
    ) -> dict[str, Any]:
        """`interactions.create`'s: system_instruction (system and summaries), the whole
        compacted context as `input` steps, tools, store=False, no previous_interaction_id
        (see the module doc)."""
        shape = convert.to_gemini(system, summaries, messages, check=check)
        request: dict[str, Any] = {"input": input_steps(shape["contents"]), "store": False}
        if shape["system_instruction"]:
            request["system_instruction"] = shape["system_instruction"]
        if tools:
            request["tools"] = self.tool_definitions(tools)
        return request

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("parameters"),
            }
            for t in tools or []
        ]

    def with_timeout(self, request: dict[str, Any], seconds: float) -> dict[str, Any]:
        """The SDK's per-call `timeout`, in seconds."""
        return {**request, "timeout": seconds}

    def recognizes(self, response: Any) -> bool:
        return is_interaction(response)

    def result(self, response: Any) -> ChatResult:
        return interaction_result(response)

    def stream_reader(self, returned: Any) -> StreamReader | None:
        name = type(returned).__name__
        return InteractionsStream(returned) if "Stream" in name else None


GEMINI_INTERACTIONS = GeminiInteractionsWire()
