"""Provider responses as the SDKs return them, read into one `ChatResult`: the
anthropic SDK's `Message` (also a stream's `get_final_message()`) and
google-genai's `GenerateContentResponse`. Read by their attributes, so the
SDKs' subclasses (parsed or beta messages) read the same."""

from __future__ import annotations

from typing import Any

from assistant.blocks import THINKING_TYPES
from assistant.llm.base import ChatResult, Usage, new_tool_call_id

# What a stored thinking block keeps of the SDK's: assistant.blocks validates these keys.
_THINKING_KEYS = {"thinking": ("thinking", "signature"), "redacted_thinking": ("data",)}


def is_anthropic_message(response: Any) -> bool:
    usage = getattr(response, "usage", None)
    return isinstance(getattr(response, "content", None), list) and hasattr(
        usage, "cache_read_input_tokens"
    )


def is_gemini_response(response: Any) -> bool:
    return hasattr(response, "candidates") and hasattr(response, "usage_metadata")


def anthropic_result(response: Any, model: str = "") -> ChatResult:
    """Text (its text blocks joined), tool_use blocks as {id, name, arguments}, thinking
    and redacted_thinking blocks verbatim, and the usage with its cache fields."""
    content = response.content or []
    return ChatResult(
        text="".join(b.text for b in content if b.type == "text"),
        usage=Usage.from_anthropic(response.usage),
        model=getattr(response, "model", None) or model,
        stop_reason=getattr(response, "stop_reason", None),
        tool_calls=[
            {"id": b.id, "name": b.name, "arguments": dict(b.input or {})}
            for b in content
            if b.type == "tool_use"
        ],
        blocks=[
            {"type": b.type, **{key: getattr(b, key) for key in _THINKING_KEYS[b.type]}}
            for b in content
            if b.type in THINKING_TYPES
        ],
    )


def gemini_result(response: Any, model: str = "") -> ChatResult:
    """The first candidate's text (thought summaries left out) and function calls (an id
    made up when Gemini sent none); usage split into uncached input and cache reads
    (Gemini's promptTokenCount includes the cached part)."""
    candidate = (response.candidates or [None])[0]
    parts = (candidate.content.parts if candidate and candidate.content else None) or []
    calls = [part.function_call for part in parts if part.function_call]
    finish = getattr(candidate, "finish_reason", None)
    return ChatResult(
        text="".join(p.text for p in parts if p.text and not p.thought),
        usage=Usage.from_gemini(response.usage_metadata),
        model=getattr(response, "model_version", None) or model,
        stop_reason=getattr(finish, "value", finish),
        tool_calls=[
            {
                "id": c.id or new_tool_call_id(),
                "name": c.name or "",
                "arguments": dict(c.args or {}),
            }
            for c in calls
        ],
    )


def chat_result(response: Any) -> ChatResult | None:
    """Any supported response as a ChatResult (one already is); None for anything else."""
    if isinstance(response, ChatResult):
        return response
    if is_anthropic_message(response):
        return anthropic_result(response)
    if is_gemini_response(response):
        return gemini_result(response)
    return None
