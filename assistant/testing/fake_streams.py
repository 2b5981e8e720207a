"""The fake server's streamed answers: each wire's server-sent events for an answer it
would have sent whole (docs/chat-loop.rst, "Testing the loop without a key").

- Anthropic (`"stream": true`): message_start (its usage with the input and cache
  counts and one output token), the content blocks in deltas, message_delta with the
  whole output count, message_stop.
- OpenAI Chat Completions (`"stream": true`): chat.completion.chunk objects, the text
  and the tool calls in pieces, a chunk with the finish reason, then (with
  `stream_options: {"include_usage": true}`) the usage in a last chunk with
  `choices: []`, and `data: [DONE]`. An overflow arrives as an error event after the
  stream began: `data: {"error": {..., "code": "context_length_exceeded"}}`.
- OpenAI Responses (`"stream": true`): response.created, response.output_text.delta
  events, response.completed with the whole response and its usage; an overflow is an
  `error` event after response.created.
- Gemini (`:streamGenerateContent?alt=sse`): GenerateContentResponse chunks, each with
  a piece of the text; the last carries the function calls, the finish reason and
  the usage.

- Gemini Interactions (`"stream": true`, google/genai/_gaos/types/interactions/
  interactionsseevent.py's events): interaction.created, interaction.status_update,
  per output step step.start, step.delta (the text a `text` delta a word at a time, a
  call's arguments one `arguments_delta` of JSON) and step.stop, then
  interaction.completed with the status and usage and no steps (the SDK's own stream
  fixtures, tests/interactions/test_automatic_continuation.py, send none).

The text goes a word at a time. A reply's `pace` spaces the events in time; its
`break_after` (a number of events) drops the connection after that many, as a
network failure would, before the answer's end.
"""

from __future__ import annotations

import json
import re
from typing import Any

from assistant.testing import fake_openai

#: The media type of a streamed reply.
SSE = "text/event-stream"
_WORD = re.compile(r"\S+\s*|\s+")


def words(text: str) -> list[str]:
    """The text deltas a streamed text goes in: a word at a time, spaces kept."""
    return _WORD.findall(text or "")


def _event(data: Any, name: str | None = None) -> str:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n"


def anthropic_events(message: dict[str, Any]) -> list[str]:
    """A Messages API answer as the events of `stream: true` (what the SDK's
    `messages.stream(...)` reads and `get_final_message()` assembles)."""
    usage = message["usage"]
    start_usage = {**usage, "output_tokens": 1}
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {**message, "content": [], "stop_reason": None, "usage": start_usage},
        }
    ]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        start, deltas = dict(block), []
        if kind == "text":
            start["text"] = ""
            deltas = [{"type": "text_delta", "text": piece} for piece in words(block["text"])]
        elif kind == "tool_use":
            start["input"] = {}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        elif kind == "compaction":
            start["content"] = None
            delta = {"type": "compaction_delta", "content": block["content"]}
            deltas = [{**delta, "encrypted_content": block.get("encrypted_content")}]
        elif kind == "thinking":
            start.update(thinking="", signature="")
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {
                "output_tokens": usage.get("output_tokens", 0),
                **({"iterations": usage["iterations"]} if "iterations" in usage else {}),
            },
        }
    )
    events.append({"type": "message_stop"})
    return [_event(event, event["type"]) for event in events]


def chat_chunks(completion: dict[str, Any], include_usage: bool) -> list[str]:
    """A chat.completion as the chunks of `stream: true`."""
    head = {key: completion[key] for key in ("id", "created", "model")}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        chosen = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return _event(
            {**head, "object": "chat.completion.chunk", "choices": [chosen], "usage": None}
        )

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in words(message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        opening = {"id": call["id"], "type": "function", "function": {"name": function["name"]}}
        chunks.append(chunk({"tool_calls": [{"index": index, **opening}]}))
        arguments = {"function": {"arguments": function["arguments"]}}
        chunks.append(chunk({"tool_calls": [{"index": index, **arguments}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        last = {**head, "object": "chat.completion.chunk", "choices": []}
        chunks.append(_event({**last, "usage": completion["usage"]}))
    return [*chunks, "data: [DONE]\n\n"]


def response_events(response: dict[str, Any]) -> list[str]:
    """A Responses API response as the events of `stream: true`."""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
    for index, item in enumerate(response["output"]):
        if item["type"] != "message":
            continue
        for part in item["content"]:
            events += [
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": piece,
                    "logprobs": [],
                }
                for piece in words(part["text"])
            ]
    events.append({"type": "response.completed", "response": response})
    return [
        _event({**event, "sequence_number": number}, event["type"])
        for number, event in enumerate(events)
    ]


def chat_overflow_events(model: str) -> list[str]:
    """Chat Completions' overflow after the stream began: the SDK raises APIError."""
    started = {
        "id": "chatcmpl-overflow",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [],
        "usage": None,
    }
    error = fake_openai.openai_error(
        fake_openai.CHAT_OVERFLOW, "invalid_request_error", fake_openai.OVERFLOW_CODE
    )
    return [_event(started), _event(error)]


def response_overflow_events(model: str) -> list[str]:
    """The Responses API's overflow after response.created: an `error` event."""
    started = {
        "id": "resp_overflow",
        "object": "response",
        "created_at": 0,
        "status": "in_progress",
        "model": model,
        "output": [],
    }
    error = {
        "type": "error",
        "code": fake_openai.OVERFLOW_CODE,
        "message": fake_openai.RESPONSES_OVERFLOW,
        "param": None,
    }
    return [
        _event(
            {"type": "response.created", "response": started, "sequence_number": 0},
            "response.created",
        ),
        _event({**error, "sequence_number": 1}, "error"),
    ]


def gemini_chunks(response: dict[str, Any]) -> list[str]:
    """A generateContent response as `:streamGenerateContent?alt=sse` chunks."""
    candidate = response["candidates"][0]
    parts = candidate["content"]["parts"]
    texts = [piece for part in parts if "text" in part for piece in words(part["text"])]
    calls = [part for part in parts if "text" not in part]
    head = {"modelVersion": response["modelVersion"], "responseId": response["responseId"]}

    def chunk(chunk_parts: list[dict[str, Any]], **last: Any) -> str:
        content = {"content": {"role": "model", "parts": chunk_parts}, "index": 0}
        usage = last.pop("usageMetadata", None)
        body = {"candidates": [{**content, **last}], **head}
        if usage is not None:
            body["usageMetadata"] = usage
        return _event(body)

    chunks = [chunk([{"text": piece}]) for piece in texts[:-1]]
    closing = [{"text": texts[-1]}] if texts else []
    chunks.append(
        chunk(
            closing + calls,
            finishReason=candidate["finishReason"],
            usageMetadata=response["usageMetadata"],
        )
    )
    return chunks


def interaction_events(interaction: dict[str, Any]) -> list[str]:
    """An Interaction as the server-sent events of `interactions.create(stream=True)`."""
    head = {"id": interaction["id"], "model": interaction["model"], "object": "interaction"}
    events: list[dict[str, Any]] = [
        {
            "event_type": "interaction.created",
            "interaction": {**head, "status": "in_progress"},
        },
        {
            "event_type": "interaction.status_update",
            "interaction_id": interaction["id"],
            "status": "in_progress",
        },
    ]
    for index, step in enumerate(interaction["steps"]):
        if step["type"] == "function_call":
            opening = {**step, "arguments": {}}
            deltas = [{"type": "arguments_delta", "arguments": json.dumps(step["arguments"])}]
        else:
            opening = {"type": step["type"], "content": []}
            texts = [c["text"] for c in step.get("content") or [] if c["type"] == "text"]
            deltas = [{"type": "text", "text": piece} for text in texts for piece in words(text)]
        events.append({"event_type": "step.start", "index": index, "step": opening})
        events += [{"event_type": "step.delta", "index": index, "delta": d} for d in deltas]
        events.append({"event_type": "step.stop", "index": index})
    completed = {**head, "status": interaction["status"], "usage": interaction["usage"]}
    events.append({"event_type": "interaction.completed", "interaction": completed})
    return [_event(event, event["event_type"]) for event in events]
