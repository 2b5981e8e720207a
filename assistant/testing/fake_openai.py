"""The fake server's OpenAI wires: Chat Completions (`POST /v1/chat/completions`, what
every OpenAI-compatible server speaks), the Responses API (`POST /v1/responses`) and
`responses.compact` (`POST /v1/responses/compact`), with OpenAI's real error bodies:
{"error": {"message", "type", "param", "code"}}.
Point the SDK at it with `openai.OpenAI(api_key="any", base_url=fake.url + "/v1")`."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from assistant.testing import fake_compaction

CHAT = "openai.chat"
RESPONSES = "openai.responses"
# `responses.compact` (POST /v1/responses/compact), a script queue apart.
RESPONSES_COMPACT = "openai.responses.compact"
PATHS = {
    "/v1/responses/compact": RESPONSES_COMPACT,
    "/responses/compact": RESPONSES_COMPACT,
    "/v1/chat/completions": CHAT,
    "/chat/completions": CHAT,
    "/v1/responses": RESPONSES,
    "/responses": RESPONSES,
}
OVERFLOW_CODE = "context_length_exceeded"
CHAT_OVERFLOW = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted "
    "in 8227 tokens. Please reduce the length of the messages."
)
RESPONSES_OVERFLOW = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
RATE_LIMITED = (
    "Rate limit reached for gpt-4o in organization org-fake on tokens per min (TPM): "
    "Limit 30000, Used 30000, Requested 1200. Please try again in 2.4s."
)


def openai_error(
    message: str, error_type: str, code: str | None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def request_problem(kind: str, body: Any) -> str | None:  # noqa: C901
    """What OpenAI would refuse in this body: a result without its call, a call without
    its result."""
    if not isinstance(body, dict) or not body.get("model"):
        return "you must provide a model parameter"
    if kind == CHAT:
        waiting: list[str] = []
        for index, message in enumerate(body.get("messages") or []):
            if message.get("role") == "tool":
                if message.get("tool_call_id") not in waiting:
                    return (
                        f"Invalid parameter: messages with role 'tool' must be a response to "
                        f"a preceeding message with 'tool_calls'. (messages[{index}])"
                    )
                waiting.remove(message["tool_call_id"])
                continue
            if waiting:
                return (
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    f"responding to each 'tool_call_id'. The following tool_call_ids did not "
                    f"have response messages: {', '.join(waiting)}"
                )
            waiting = [call["id"] for call in message.get("tool_calls") or []]
        return f"tool_call_ids without response messages: {waiting}" if waiting else None
    calls: set[str] = set()
    answered: set[str] = set()
    for item in body.get("input") or []:
        if item.get("type") == "function_call":
            calls.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            if item["call_id"] not in calls:
                return (
                    f"No tool call found for function call output with call_id {item['call_id']}."
                )
            answered.add(item["call_id"])
    missing = calls - answered
    return f"No tool output found for function call {sorted(missing)[0]}." if missing else None


def default_usage(kind: str, tokens: int) -> dict[str, Any]:
    if kind == CHAT:
        return {
            "prompt_tokens": tokens,
            "completion_tokens": 50,
            "total_tokens": tokens + 50,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
    return {
        "input_tokens": tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 50,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens + 50,
    }


def render(
    reply: Any, kind: str, body: Any, usage: dict[str, Any], default_text: str
) -> tuple[int, dict[str, str], dict[str, Any]]:
    """(status, headers, body) of a scripted reply on OpenAI's wire `kind`."""
    problem = request_problem(kind, body) or (
        fake_compaction.responses_problem(body) if kind == RESPONSES else None
    )
    if problem:
        return 400, {}, openai_error(problem, "invalid_request_error", None, "messages")
    if reply.kind == "overflow":
        text, param = (CHAT_OVERFLOW, "messages") if kind == CHAT else (RESPONSES_OVERFLOW, "input")
        return (
            400,
            {},
            openai_error(text, "invalid_request_error", OVERFLOW_CODE, param),
        )
    if reply.kind == "rate_limited":
        headers = {"retry-after-ms": str(int((reply.retry_after or 0) * 1000))}
        return 429, headers, openai_error(RATE_LIMITED, "tokens", "rate_limit_exceeded")
    if reply.kind == "overloaded":
        headers = {"retry-after-ms": str(int((reply.retry_after or 0) * 1000))}
        message = "The server is overloaded or not ready yet."
        return 503, headers, openai_error(message, "server_error", None)
    text = default_text if reply.text is None and not reply.tool_calls else reply.text or ""
    calls = [
        {
            "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
            "name": call["name"],
            "arguments": json.dumps(call["arguments"]),
        }
        for call in reply.tool_calls
    ]
    model = body.get("model", "gpt")
    usage = reply.usage or usage
    if kind == RESPONSES_COMPACT:
        return 200, {}, fake_compaction.compacted_response(body, usage)
    if kind == CHAT:
        return 200, {}, _chat_completion(model, text, calls, usage, reply.stop_reason)
    response = _response(model, text, calls, usage, reply.thinking)
    item = fake_compaction.responses_compaction(body)
    if item is not None:  # the server compacted first: the item opens the output
        response["output"].insert(0, item)
    return 200, {}, response


def _chat_completion(
    model: str,
    text: str,
    calls: list[dict[str, Any]],
    usage: dict[str, Any],
    stop_reason: str | None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for call in calls
        ]
    finish = stop_reason or ("tool_calls" if calls else "stop")
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
    }


def _response(
    model: str,
    text: str,
    calls: list[dict[str, Any]],
    usage: dict[str, Any],
    thinking: str | None,
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if thinking:
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{uuid.uuid4().hex[:24]}",
                "summary": [{"type": "summary_text", "text": thinking}],
                "encrypted_content": f"enc_{uuid.uuid4().hex}",
            }
        )
    if text:
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:24]}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    output.extend(
        {
            "type": "function_call",
            "id": f"fc_{uuid.uuid4().hex[:24]}",
            "call_id": call["id"],
            "name": call["name"],
            "arguments": call["arguments"],
            "status": "completed",
        }
        for call in calls
    )
    return {
        "id": f"resp_{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }
