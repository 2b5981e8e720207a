"""The fake server's Gemini Interactions API (POST /v1/interactions), as the server
does it: each interaction stored (unless `store` is false) with its input and output
steps, and a request naming `previous_interaction_id` answered over the whole chain the
server holds (the history it keeps), which `Request.history` records."""

from __future__ import annotations

import threading
import uuid
from typing import Any

KIND = "gemini.interactions"
PATHS = ("/v1/interactions", "/v1beta/interactions")


class InteractionStore:
    """The interactions the fake server keeps, by id: (previous id, input, output steps)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[str | None, list[Any], list[Any]]] = {}

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    def history(self, previous: str | None) -> list[Any] | None:
        """The steps of the chain ending at `previous`, oldest first; None for an
        interaction the server does not hold (never stored, or unknown)."""
        chain: list[Any] = []
        with self._lock:
            while previous:
                if previous not in self._kept:
                    return None
                before, sent, answered = self._kept[previous]
                chain[:0] = [*sent, *answered]
                previous = before
        return chain

    def keep(self, body: dict[str, Any], steps: list[Any]) -> str:
        interaction_id = f"int_{uuid.uuid4().hex[:16]}"
        if body.get("store", True):
            sent = body.get("input")
            sent = sent if isinstance(sent, list) else [sent]
            with self._lock:
                self._kept[interaction_id] = (body.get("previous_interaction_id"), sent, steps)
        return interaction_id


def problem(body: Any) -> str | None:
    """What the real server refuses: no model, or a function_result no call before it
    (in the chain and this input) answers."""
    if not isinstance(body, dict) or not body.get("model"):
        return "model is required"
    return None


def unanswered(steps: list[Any]) -> str | None:
    calls = set()
    for step in steps:
        if isinstance(step, dict) and step.get("type") == "function_call":
            calls.add(step.get("id"))
        elif (
            isinstance(step, dict)
            and step.get("type") == "function_result"
            and step.get("call_id") not in calls
        ):
            return f"function_result {step.get('call_id')!r} answers no function_call"
    return None


def render(
    store: InteractionStore,
    body: dict[str, Any],
    text: str | None,
    tool_calls: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    tokens: int,
) -> tuple[dict[str, Any], list[Any]]:
    """The Interaction the server returns (its output steps and usage), kept in `store`;
    and the history it answered over."""
    history = store.history(body.get("previous_interaction_id")) or []
    steps: list[dict[str, Any]] = []
    if text:
        steps.append({"type": "model_output", "content": [{"type": "text", "text": text}]})
    for call in tool_calls:
        steps.append(
            {
                "type": "function_call",
                "id": call.get("id") or f"call_{uuid.uuid4().hex[:8]}",
                "name": call["name"],
                "arguments": call.get("arguments") or {},
            }
        )
    interaction_id = store.keep(body, steps)
    figures = dict(usage or {"total_input_tokens": tokens, "total_output_tokens": 50})
    figures.setdefault(
        "total_tokens",
        figures.get("total_input_tokens", 0) + figures.get("total_output_tokens", 0),
    )
    interaction = {
        "id": interaction_id,
        "status": "requires_action" if tool_calls else "completed",
        "model": body.get("model"),
        "steps": steps,
        "usage": figures,
    }
    if body.get("previous_interaction_id"):
        interaction["previous_interaction_id"] = body["previous_interaction_id"]
    return interaction, history
