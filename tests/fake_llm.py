"""A loopback HTTP server speaking the Anthropic and Gemini wire formats, for tests.

Both SDKs send through their own HTTP stacks, so the tests point the real SDKs at this
server (`base_url`) instead of mocking a transport. It records every request and answers
from a per-kind script queue, else with a well-formed summary.

    def test_x(fake_llm, settings):
        fake_llm.use_anthropic(settings)          # or use_gemini
        fake_llm.script_anthropic(rate_limited(), ok(text=...))
        ...
        assert fake_llm.count("anthropic.messages") == 2

The URL is a real socket, so a worker subprocess can use it too.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.fake_content import anthropic_content_problem, gemini_content_problem, thinking_block

KINDS = ("anthropic.messages", "anthropic.count_tokens", "gemini.generate", "gemini.count_tokens")

DEFAULT_SUMMARY = """## Goal
- Summarize the conversation (fake server).

## Constraints
- none

## Progress
- The fake provider produced this summary.

## Key decisions
- none

## Next steps
- none

## Critical context
- none"""

ANTHROPIC_OVERFLOW = "prompt is too long: 208310 tokens > 200000 maximum"
GEMINI_OVERFLOW = (
    "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576)."
)


@dataclass
class Reply:
    """One scripted answer; rendered in the wire format of whoever asked."""

    kind: str  # ok | overflow | rate_limited | overloaded | malformed | raw
    text: str | None = None
    usage: dict[str, Any] | None = None
    stop_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    thinking: str | None = None  # Anthropic: a signed thinking block opens the answer
    delay: float = 0.0
    retry_after: float | None = None
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def ok(
    text: str | None = None,
    *,
    usage: dict[str, Any] | None = None,
    stop_reason: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    thinking: str | None = None,
) -> Reply:
    """A normal response; `usage` is the provider's raw usage object (wire field names)."""
    return Reply(
        "ok",
        text=text,
        usage=usage,
        stop_reason=stop_reason,
        tool_calls=tool_calls or [],
        thinking=thinking,
    )


def overflow() -> Reply:
    return Reply("overflow")


def rate_limited(retry_after: float = 0.001) -> Reply:
    return Reply("rate_limited", retry_after=retry_after)


def overloaded(retry_after: float = 0.001) -> Reply:
    return Reply("overloaded", retry_after=retry_after)


def slow(seconds: float, then: Reply | None = None) -> Reply:
    reply = then or ok()
    reply.delay = seconds
    return reply


def malformed() -> Reply:
    return Reply("malformed")


def raw(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    """Any status and body (a dict is sent as JSON), e.g. another vendor's error."""
    return Reply("raw", status=status, body=body, headers=headers or {})


def count(tokens: int) -> Reply:
    return Reply("ok", usage={"tokens": tokens})


@dataclass
class Request:
    kind: str
    path: str
    headers: dict[str, str]
    body: Any


def _retry_headers(seconds: float | None) -> dict[str, str]:
    if seconds is None:
        return {}
    # retry-after-ms is what the Anthropic SDK reads for sub-second waits
    return {"retry-after": str(max(0, round(seconds))), "retry-after-ms": str(int(seconds * 1000))}


def _anthropic_error(status: int, error_type: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": f"req_{uuid.uuid4().hex[:24]}",
    }


def _gemini_error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


_ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def anthropic_request_problem(body: Any) -> str | None:
    """What the Messages API would refuse in this request body (its own wording), or None.
    The checks a converter can get wrong: roles, empty text, tool_use ids and pairs."""
    messages = (body or {}).get("messages") or []
    if messages and messages[0].get("role") != "user":
        return 'messages: first message must use the "user" role'
    seen: set[str] = set()
    calls: list[str] = []
    for index, message in enumerate(messages):
        blocks = message.get("content")
        blocks = [{"type": "text", "text": blocks}] if isinstance(blocks, str) else blocks or []
        if not blocks:
            return f"messages.{index}: all messages must have non-empty content"
        for block in blocks:
            if block.get("type") == "text" and not block.get("text", "").strip():
                return "messages: text content blocks must contain non-whitespace text"
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        stray = [r for r in results if r not in calls]
        if stray:
            return (
                f"messages.{index}.content.0: unexpected `tool_use_id` found in `tool_result` "
                f"blocks: {stray[0]}. Each `tool_result` block must have a corresponding "
                "`tool_use` block in the previous message."
            )
        unanswered = [c for c in calls if c not in results]
        if unanswered:
            return (
                f"messages.{index - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {unanswered[0]}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        calls = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        for position, call_id in enumerate(calls):
            if not _ANTHROPIC_ID.match(call_id):
                return (
                    f"messages.{index}.content.{position}.tool_use.id: String should match "
                    "pattern '^[a-zA-Z0-9_-]+$'"
                )
            if call_id in seen:
                return f"messages.{index}.content.{position}: `tool_use` ids must be unique"
            seen.add(call_id)
    if calls:
        return (
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            f"blocks immediately after: {calls[0]}."
        )
    return None


def gemini_request_problem(body: Any) -> str | None:
    """What generateContent would refuse in this request body (its own wording), or None."""
    contents = (body or {}).get("contents") or []
    if contents and contents[0].get("role") != "user":
        return "Please ensure that multiturn requests alternate between user and model."
    calls: list[tuple[Any, str]] = []
    for index, content in enumerate(contents):
        parts = content.get("parts") or []
        if not parts:
            return f"contents.parts must not be empty (contents[{index}])."
        responses = sorted(
            (p["functionResponse"].get("id"), p["functionResponse"].get("name", ""))
            for p in parts
            if "functionResponse" in p
        )
        if responses != sorted(calls, key=str):
            return (
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn."
            )
        calls = [
            (p["functionCall"].get("id"), p["functionCall"].get("name", ""))
            for p in parts
            if "functionCall" in p
        ]
        ids = [call_id for call_id, _ in calls if call_id]
        if len(set(ids)) != len(ids):
            return "Duplicate function call ids in one turn."
    return None


def _prompt_chars(body: Any) -> int:
    return len(json.dumps(body)) if body is not None else 0


def render_anthropic(reply: Reply, kind: str, body: Any) -> tuple[int, dict[str, str], Any]:
    problem = anthropic_request_problem(body) or anthropic_content_problem(body)
    if problem:
        return 400, {}, _anthropic_error(400, "invalid_request_error", problem)
    if reply.kind == "overflow":
        return 400, {}, _anthropic_error(400, "invalid_request_error", ANTHROPIC_OVERFLOW)
    if reply.kind == "rate_limited":
        message = "Number of request tokens has exceeded your per-minute rate limit"
        error = _anthropic_error(429, "rate_limit_error", message)
        return 429, _retry_headers(reply.retry_after), error
    if reply.kind == "overloaded":
        error = _anthropic_error(529, "overloaded_error", "Overloaded")
        return 529, _retry_headers(reply.retry_after), error
    if kind == "anthropic.count_tokens":
        tokens = (reply.usage or {}).get("tokens", max(1, _prompt_chars(body) // 4))
        return 200, {}, {"input_tokens": tokens}
    content: list[dict[str, Any]] = [thinking_block(reply.thinking)] if reply.thinking else []
    if reply.text is not None or not reply.tool_calls:
        content.append(
            {"type": "text", "text": DEFAULT_SUMMARY if reply.text is None else reply.text}
        )
    for call in reply.tool_calls:
        content.append(
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["arguments"]}
        )
    usage = reply.usage or {
        "input_tokens": max(1, _prompt_chars(body) // 4),
        "output_tokens": 50,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    message = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": (body or {}).get("model", "claude"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
    return 200, {}, message


def render_gemini(
    reply: Reply, kind: str, body: Any, model: str
) -> tuple[int, dict[str, str], Any]:
    problem = gemini_request_problem(body) or gemini_content_problem(body)
    if problem:
        return 400, {}, _gemini_error(400, "INVALID_ARGUMENT", problem)
    if reply.kind == "overflow":
        return 400, {}, _gemini_error(400, "INVALID_ARGUMENT", GEMINI_OVERFLOW)
    if reply.kind == "rate_limited":
        message = "Resource has been exhausted (e.g. check quota)."
        error = _gemini_error(429, "RESOURCE_EXHAUSTED", message)
        return 429, _retry_headers(reply.retry_after), error
    if reply.kind == "overloaded":
        error = _gemini_error(
            503, "UNAVAILABLE", "The model is overloaded. Please try again later."
        )
        return 503, _retry_headers(reply.retry_after), error
    if kind == "gemini.count_tokens":
        tokens = (reply.usage or {}).get("tokens", max(1, _prompt_chars(body) // 4))
        return 200, {}, {"totalTokens": tokens}
    parts: list[dict[str, Any]] = []
    if reply.text is not None or not reply.tool_calls:
        parts.append({"text": DEFAULT_SUMMARY if reply.text is None else reply.text})
    for call in reply.tool_calls:
        # Gemini may send a function call without an id: leave it out when the script does.
        function_call = {"name": call["name"], "args": call["arguments"]}
        if call.get("id"):
            function_call["id"] = call["id"]
        parts.append({"functionCall": function_call})
    usage = reply.usage or {
        "promptTokenCount": max(1, _prompt_chars(body) // 4),
        "candidatesTokenCount": 50,
    }
    usage.setdefault(
        "totalTokenCount", usage.get("promptTokenCount", 0) + usage.get("candidatesTokenCount", 0)
    )
    response = {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": reply.stop_reason or "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": uuid.uuid4().hex[:16],
    }
    return 200, {}, response


_GEMINI_PATH = re.compile(r"^/(?:[^/]+/)*models/([^/:]+):(generateContent|countTokens)$")


class FakeLLM:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeLLM:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # scripting
    def script(self, kind: str, *replies: Reply) -> None:
        assert kind in KINDS, kind
        with self._lock:
            self._scripts[kind].extend(replies)

    def script_anthropic(self, *replies: Reply) -> None:
        self.script("anthropic.messages", *replies)

    def script_gemini(self, *replies: Reply) -> None:
        self.script("gemini.generate", *replies)

    def _next_reply(self, kind: str) -> Reply:
        with self._lock:
            queue = self._scripts[kind]
            return queue.popleft() if queue else ok()

    # inspection
    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def requests_for(self, kind: str) -> list[Request]:
        return [r for r in self.requests if r.kind == kind]

    def count(self, kind: str) -> int:
        return len(self.requests_for(kind))

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()
            self._scripts.clear()

    # settings
    def use_anthropic(self, settings: Any, key: str = "test-key-anthropic") -> None:
        settings.ASSISTANT_SUMMARIZER = "anthropic"
        settings.ANTHROPIC_API_KEY = key
        settings.ANTHROPIC_BASE_URL = self.url

    def use_gemini(self, settings: Any, key: str = "test-key-gemini") -> None:
        settings.ASSISTANT_SUMMARIZER = "gemini"
        settings.GEMINI_API_KEY = key
        settings.GEMINI_BASE_URL = self.url
        settings.LLM_RETRY_INITIAL_DELAY = 0.01
        settings.LLM_RETRY_MAX_DELAY = 0.05

    def env(self, provider: str = "anthropic") -> dict[str, str]:
        """Environment for a worker subprocess pointed at this server."""
        if provider == "gemini":
            return {
                "ASSISTANT_SUMMARIZER": "gemini",
                "GEMINI_API_KEY": "test-key-gemini",
                "GEMINI_BASE_URL": self.url,
            }
        return {
            "ASSISTANT_SUMMARIZER": "anthropic",
            "ANTHROPIC_API_KEY": "test-key-anthropic",
            "ANTHROPIC_BASE_URL": self.url,
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw_body = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw_body) if raw_body else None
                except ValueError:
                    body = raw_body.decode("utf-8", "replace")
                path = self.path.split("?", 1)[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                gemini = _GEMINI_PATH.match(path)
                if path == "/v1/messages":
                    kind = "anthropic.messages"
                elif path == "/v1/messages/count_tokens":
                    kind = "anthropic.count_tokens"
                elif gemini:
                    kind = (
                        "gemini.generate"
                        if gemini.group(2) == "generateContent"
                        else "gemini.count_tokens"
                    )
                else:
                    self._send(404, {}, {"error": {"code": 404, "message": f"no route {path}"}})
                    return
                with fake._lock:
                    fake._requests.append(Request(kind, path, headers, body))
                authorized = (
                    headers.get("x-api-key")
                    or headers.get("authorization", "").startswith("Bearer ")
                    or headers.get("x-goog-api-key")
                )
                if not authorized:
                    error = _anthropic_error(401, "authentication_error", "invalid x-api-key")
                    self._send(401, {}, error)
                    return
                reply = fake._next_reply(kind)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.kind == "malformed":
                    self._send(200, {}, b'{"id": "msg_1", "content": [{"type": "te')
                    return
                if reply.kind == "raw":
                    self._send(reply.status, reply.headers, reply.body)
                    return
                if kind.startswith("anthropic"):
                    self._send(*render_anthropic(reply, kind, body))
                else:
                    self._send(*render_gemini(reply, kind, body, gemini.group(1)))

            def _send(self, status: int, headers: dict[str, str], body: Any) -> None:
                if isinstance(body, bytes | str):
                    data = body.encode() if isinstance(body, str) else body
                else:
                    data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        return Handler


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    fake = FakeLLM().start()
    yield fake
    fake.stop()
