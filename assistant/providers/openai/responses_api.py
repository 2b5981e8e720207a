"""OpenAI's Responses API: `input` items (messages, `function_call`,
`function_call_output`, reasoning items sent back as received), flat tools,
`store=False` by default, and its response's output items read back."""

from __future__ import annotations

import json
from typing import Any

from assistant.providers import convert
from assistant.providers.base import ChatResult
from assistant.providers.compaction_blocks import Record
from assistant.providers.openai.wire import (
    OPENAI,
    OpenAIWire,
    function_spec,
    parsed_arguments,
    sdk_stream,
    usage_from_openai,
)
from assistant.providers.wire import StreamReader, loaded_sdk
from assistant.text import MEDIA_TYPES, describe

REASONING = convert.REASONING


def _user_content(content: str, blocks: list[dict[str, Any]] | None) -> str | list[dict]:
    media = [block for block in blocks or [] if block["type"] in MEDIA_TYPES]
    if not media:
        return content
    parts: list[dict[str, Any]] = []
    for block in media:
        source = block["source"]
        if block["type"] == "image" and source["type"] == "url":
            parts.append({"type": "input_image", "image_url": source["url"]})
        elif block["type"] == "image":
            url = f"data:{source['media_type']};base64,{source['data']}"
            parts.append({"type": "input_image", "image_url": url})
        elif source["type"] == "text":
            parts.append({"type": "input_text", "text": source["data"]})
        elif source["type"] == "base64":
            parts.append(
                {
                    "type": "input_file",
                    "filename": block.get("title") or "document.pdf",
                    "file_data": f"data:{source['media_type']};base64,{source['data']}",
                }
            )
        else:
            parts.append({"type": "input_text", "text": f"[{describe(block)}]"})
    if content.strip():
        parts.append({"type": "input_text", "text": content})
    return parts


def input_items(messages: list[dict[str, Any]], *, check: bool = True) -> list[dict[str, Any]]:
    """The neutral messages as `input` items, each answer's reasoning items first."""
    items: list[dict[str, Any]] = []
    for message in convert.with_unique_call_ids(messages):
        role, content = message["role"], message.get("content") or ""
        blocks = message.get("blocks")
        if message.get("compaction"):
            # The compaction item, as received, first in `input` (after the user
            # messages `responses.compact` kept before it, as it returned them).
            items.extend(dict(item) for item in message["compaction"].get("retained") or [])
            items.append(dict(message["compaction"]["block"]))
        if role == "tool":
            names = [f"[{describe(b)}]" for b in blocks or [] if b["type"] in MEDIA_TYPES]
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": "\n".join([content, *names]) if names else content,
                }
            )
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if not content.strip() and not calls:
                continue  # reasoning alone has nothing to follow
            items.extend(b["item"] for b in blocks or [] if b["type"] == REASONING)
            if content.strip():
                items.append({"role": "assistant", "content": content})
            items.extend(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": call["name"],
                    "arguments": json.dumps(call.get("arguments") or {}),
                }
                for call in calls
            )
        else:
            items.append({"role": "user", "content": _user_content(content, blocks)})
    if check:
        check_input_items(items)
    return items


def check_input_items(items: list[dict[str, Any]]) -> None:
    """Raise InvalidRequest unless every function_call has its function_call_output
    after it, and every output answers a call before it."""
    waiting: set[str] = set()
    for index, item in enumerate(items):
        if item.get("type") == "function_call":
            waiting.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            if item["call_id"] not in waiting:
                raise convert.InvalidRequest(
                    f"input[{index}] answers {item['call_id']!r}, not a call before it"
                )
            waiting.discard(item["call_id"])
    if waiting:
        raise convert.InvalidRequest(f"calls without outputs: {sorted(waiting)}")


def is_response(response: Any) -> bool:
    return getattr(response, "object", None) == "response" and isinstance(
        getattr(response, "output", None), list
    )


def _dump(item: Any) -> dict[str, Any]:
    dump = getattr(item, "model_dump", None)
    data = dump(exclude_none=True) if dump else dict(item)
    return data


def responses_result(response: Any) -> ChatResult:
    """Text of the message items, function calls, reasoning items verbatim (sent back in
    the next request), and the usage with its cached part split out."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    blocks: list[dict[str, Any]] = []
    compaction = None
    for item in response.output or []:
        kind = getattr(item, "type", None)
        if kind == "message":
            text.extend(
                part.text
                for part in item.content or []
                if getattr(part, "type", "") == "output_text"
            )
        elif kind == "function_call":
            calls.append(
                {
                    "id": item.call_id,
                    "name": item.name,
                    "arguments": parsed_arguments(item.arguments),
                }
            )
        elif kind == REASONING:
            blocks.append({"type": REASONING, "item": _dump(item)})
        elif kind == convert.COMPACTION:
            live = bool(getattr(item, "encrypted_content", None))
            compaction = Record(OPENAI_RESPONSES.name, _dump(item), live).stored()
    incomplete = getattr(response, "incomplete_details", None)
    return ChatResult(
        text="".join(text),
        usage=usage_from_openai(response.usage),
        model=getattr(response, "model", None) or "",
        stop_reason=getattr(incomplete, "reason", None) or getattr(response, "status", None),
        tool_calls=calls,
        blocks=blocks,
        provider=OPENAI_RESPONSES.name,
        compaction=compaction,
        cache_diagnosis=responses_cache_diagnosis(response),
    )


def responses_cache_diagnosis(response: Any) -> dict[str, Any] | None:
    """The Responses API's `prompt_cache_diagnostics` of a cache miss, in the shape of
    Anthropic's diagnosis: `type` is the reason (model_changed, prompt_cache_key_changed,
    tools_changed, input_changed, context_compacted, ...), with `cache_missed_tokens`
    and `comparison_reusable_tokens`. GPT-5.6 and later return it where the request's
    `prompt_cache_options` named a `comparison_response_id`; None for a hit, an
    unavailable diagnosis, or none asked."""
    diagnostics = getattr(response, "prompt_cache_diagnostics", None)
    if diagnostics is None or getattr(diagnostics, "type", None) != "cache_miss":
        return None
    return {
        "type": diagnostics.reason,
        "cache_missed_tokens": diagnostics.cache_missed_tokens,
        "comparison_reusable_tokens": diagnostics.comparison_reusable_tokens,
    }


def compacted_record(compacted: Any) -> dict[str, Any] | None:
    """`responses.compact`'s answer (a CompactedResponse: the user messages it keeps,
    then one compaction item) as stored: the item, the messages kept before it, and the
    compaction's own usage. None when no compaction item came back."""
    items = [
        item.model_dump(exclude_none=True, warnings=False)
        for item in getattr(compacted, "output", None) or []
    ]
    at = next((i for i, item in enumerate(items) if item.get("type") == convert.COMPACTION), None)
    if at is None:
        return None
    item = items[at]
    live = bool(item.get("encrypted_content"))
    usage = usage_from_openai(getattr(compacted, "usage", None))
    return Record(OPENAI_RESPONSES.name, item, live, True, usage, tuple(items[:at])).stored()


class ResponsesStream(StreamReader):
    """`responses.create(stream=True)`: response.output_text.delta events, and the whole
    Response (output items, usage) in response.completed (or response.incomplete). An
    error event or response.failed raises the SDK's APIError with the error's code, as
    an error before the stream would (an overflow is "context_length_exceeded")."""

    response: Any = None

    def text(self, event: Any) -> str:
        kind = getattr(event, "type", None)
        if kind in ("response.completed", "response.incomplete"):
            self.response = event.response
        elif kind in ("error", "response.failed"):
            error = event if kind == "error" else getattr(event.response, "error", None)
            message = getattr(error, "message", None) or "The response failed."
            body = {"code": getattr(error, "code", None), "message": message}
            sdk = loaded_sdk("openai")
            assert sdk is not None  # these events came from its stream
            request = getattr(getattr(self.source, "response", None), "request", None)
            raise sdk.APIError(message, request, body=body)
        return event.delta if kind == "response.output_text.delta" else ""

    def final(self) -> Any:
        return self.response


class OpenAIResponsesWire(OpenAIWire):
    """OpenAI's models, media rates and overflow errors, on the Responses API's wire."""

    name = "openai_responses"
    endpoint_provider = OPENAI.name

    def telemetry_name(self, model: str = "") -> str:
        return OPENAI.name

    def request(
        self,
        system: str,
        summaries: list[str],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        check: bool = True,
    ) -> dict[str, Any]:
        """`responses.create`'s: instructions (system and summaries), input items, tools,
        store=False (nothing kept on OpenAI's side: the reasoning items come back
        encrypted, to be sent again)."""
        request: dict[str, Any] = {
            "input": input_items(messages, check=check),
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        instructions = "\n\n".join(part for part in [system, *summaries] if part)
        if instructions:
            request["instructions"] = instructions
        if tools:
            request["tools"] = self.tool_definitions(tools)
        return request

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"type": "function", **function_spec(t), "strict": False} for t in tools or []]

    def threshold_compaction(self, trigger: int) -> dict[str, Any]:
        """`responses.create`'s server-side compaction at `trigger` input tokens."""
        return {"context_management": [{"type": "compaction", "compact_threshold": trigger}]}

    def compaction_endpoint(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        """`responses.compact`'s keyword arguments: the request's instructions and input."""
        endpoint: dict[str, Any] = {"model": model, "input": request.get("input") or []}
        if request.get("instructions"):
            endpoint["instructions"] = request["instructions"]
        return endpoint

    def compacted(self, returned: Any) -> dict[str, Any] | None:
        return compacted_record(returned)

    def recognizes(self, response: Any) -> bool:
        return is_response(response)

    def result(self, response: Any) -> ChatResult:
        return responses_result(response)

    def stream_reader(self, returned: Any) -> StreamReader | None:
        return ResponsesStream(returned) if sdk_stream(returned) else None


OPENAI_RESPONSES = OpenAIResponsesWire()
