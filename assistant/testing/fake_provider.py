"""A loopback HTTP server speaking the Anthropic, Gemini and OpenAI wire formats
(OpenAI's Chat Completions and Responses API: assistant.testing.fake_openai).

The SDKs send through their own HTTP stacks, so tests point the real SDKs at
this server (`base_url`; the openai SDK's is `fake.openai_url`) instead of
mocking a transport. It records every
request and answers from a per-kind script queue, else with a text reply (a
plain answer, `DEFAULT_ANSWER`; to a summary request, a well-formed summary,
`DEFAULT_SUMMARY`), so a chat loop always ends. In-process:

    fake = FakeProvider().start()
    fake.script_anthropic(ok(tool_calls=[{"name": "get_post", "arguments": {}}]), ok("Done."))
    client = anthropic.Anthropic(api_key="any", base_url=fake.url)
    ...
    assert fake.count("anthropic.messages") == 2

Alone, for a host's own tests (any language, any process):

    python -m assistant.testing.fake_provider --port 8765 [--script replies.json] [--prompt-cache]

The wires and each SDK's base URL (`fake.url` is `http://HOST:PORT`): Anthropic's Messages
API (`anthropic.Anthropic(base_url=fake.url)`), OpenAI's Chat Completions and Responses
API (`openai.OpenAI(base_url=fake.url + "/v1")`, `fake.openai_url`), Gemini's
generateContent and Interactions API (`genai.Client(http_options={"base_url": fake.url})`).
The embedding endpoints of OpenAI, Gemini and Voyage (`voyageai.Client(base_url=
fake.voyage_url)`), with deterministic vectors in which related words are near each other,
are assistant.testing.fake_embeddings's (kinds openai.embeddings, gemini.embeddings,
voyage.embeddings; `fake.use_embeddings(settings, "openai")`).

Script it over HTTP: `POST /_fake/script` with `{"provider": "anthropic"
(or "openai", "openai_responses", "gemini", "gemini_interactions"),
"replies": [{"tool_calls": [{"name": "get_post", "arguments": {"id": 1}}]},
{"text": "Done."}], "repeat": false}`. Summary requests (those carrying the summarizer's
instruction, `SUMMARY_REQUEST`) have queues apart: `{"provider"?: ..., "summaries":
[{"text": "## Goal ..."}]}` (without a provider, for any wire; in Python
`fake.script_summaries(ok(...), provider=None, repeat=False)`); a summary request takes
only from those and gets `DEFAULT_SUMMARY` when they are empty, and a chat request never
takes a summary reply (a reply: text, tool_calls, thinking,
usage in the provider's wire names, stop_reason, delay, pace, break_after,
compaction: "failed" (assistant.testing.fake_compaction), or error: overflow,
rate_limited, overloaded, malformed); `GET /_fake/requests` lists
what it received (bodies and the usage it reported, never headers: they hold keys);
`POST /_fake/reset` forgets both. A streamed request (`"stream": true`, Gemini's
`:streamGenerateContent`) gets its answer as its wire's server-sent events
(assistant.testing.fake_streams; a reply's `pace` and `break_after` time and break
them). `--script` takes the same JSON (one object or a list). With `--prompt-cache`
the usage of a default reply follows the provider's prompt caching: Anthropic
reports the prefix it saw before, up to a `cache_control` breakpoint, as
`cache_read_input_tokens`, the rest up to the last breakpoint as
`cache_creation_input_tokens`, only what follows as `input_tokens`; Gemini reports
its implicit cache as `cachedContentTokenCount` (included in `promptTokenCount`).
A token is four characters of the request's JSON (`prompt_tokens`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from assistant.testing import (
    fake_compaction,
    fake_embeddings,
    fake_interactions,
    fake_openai,
    fake_streams,
)
from assistant.testing.content import (
    anthropic_content_problem,
    gemini_content_problem,
    thinking_block,
)
from assistant.testing.fake_compaction import opens_with_compaction
from assistant.testing.fake_streams import SSE, anthropic_events  # noqa: F401  (its names)

#: The kinds of request the fake serves, each with its own script queue.
KINDS = (
    "anthropic.messages",
    fake_compaction.ANTHROPIC_COMPACTION,  # on-demand compaction requests, a queue apart
    "anthropic.count_tokens",
    "gemini.generate",
    "gemini.count_tokens",
    fake_interactions.KIND,
    fake_openai.CHAT,
    fake_openai.RESPONSES,
    fake_openai.RESPONSES_COMPACT,
    *fake_embeddings.KINDS,  # embedding requests (assistant.testing.fake_embeddings)
)

#: The reply to a chat request that scripts none.
DEFAULT_ANSWER = "This is the fake provider's answer."
#: What every summarizer prompt says (assistant/providers/summary_prompt.py): a
#: request that says it is a summary request.
SUMMARY_REQUEST = "Write only the summary"
#: The reply to a summary request that scripts none.
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

#: Anthropic's context-overflow error text.
ANTHROPIC_OVERFLOW = "prompt is too long: 208310 tokens > 200000 maximum"
#: Gemini's context-overflow error text.
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
    compaction: str | None = None  # "failed": a compaction this request makes has no summary
    delay: float = 0.0
    pace: float = 0.0  # a streamed answer: seconds between its events
    break_after: int | None = None  # a streamed answer: the connection drops after N events
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
    pace: float = 0.0,
    break_after: int | None = None,
    compaction: str | None = None,
) -> Reply:
    """A normal response; `usage` is the provider's raw usage object (wire field names).
    `text=""` is an empty answer, as Claude may give one: no text block (with `thinking`,
    only the thinking block; without, no content at all). Streamed (a request that asks
    for a stream), `pace` spaces its events and `break_after` drops the connection after
    that many events (assistant.testing.fake_streams). `compaction="failed"`: a
    compaction this request makes has no summary (assistant.testing.fake_compaction)."""
    return Reply(
        "ok",
        compaction=compaction,
        text=text,
        usage=usage,
        stop_reason=stop_reason,
        tool_calls=tool_calls or [],
        thinking=thinking,
        pace=pace,
        break_after=break_after,
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


_ERRORS: dict[str, Callable[[], Reply]] = {
    "overflow": overflow,
    "rate_limited": rate_limited,
    "overloaded": overloaded,
}
_REPLY_KEYS = {
    "text",
    "tool_calls",
    "thinking",
    "usage",
    "stop_reason",
    "delay",
    "error",
    "pace",
    "break_after",
    "compaction",
}


def reply_from_json(data: dict[str, Any]) -> Reply:
    """A reply as scripted over HTTP or in a --script file, e.g. {"text": "Done."},
    {"tool_calls": [{"name": "get_post", "arguments": {"id": 1}}]} (an id is made up
    when missing, as Gemini may omit it), {"error": "overflow"}."""
    if not isinstance(data, dict) or set(data) - _REPLY_KEYS:
        raise ValueError(f"a reply is an object with keys among {sorted(_REPLY_KEYS)}: {data!r}")
    error = data.get("error")
    if error == "malformed":
        reply = malformed()
    elif error is not None:
        if error not in _ERRORS:
            raise ValueError(f"unknown error {error!r}: one of {sorted(_ERRORS)} or malformed")
        reply = _ERRORS[error]()
    else:
        calls = data.get("tool_calls") or []
        if not all(isinstance(c, dict) and {"name", "arguments"} <= set(c) for c in calls):
            raise ValueError("tool_calls: a list of {name, arguments, id?}")
        reply = ok(
            data.get("text"),
            usage=data.get("usage"),
            stop_reason=data.get("stop_reason"),
            tool_calls=calls,
            thinking=data.get("thinking"),
            pace=float(data.get("pace") or 0),
            break_after=data.get("break_after"),
        )
    reply.delay = float(data.get("delay") or 0)
    if data.get("compaction") not in (None, "failed"):
        raise ValueError('compaction: "failed" (a compaction this request makes has no summary)')
    reply.compaction = data.get("compaction")
    return reply


def prompt_tokens(value: Any) -> int:
    """The fake server's token count of a request body or any part of it: a token per
    four characters of its JSON."""
    return max(1, len(json.dumps(value)) // 4) if value is not None else 0


@dataclass
class Request:
    kind: str
    path: str
    headers: dict[str, str]
    body: Any
    usage: dict[str, Any] | None = None  # what the server reported, for a 200 answer
    summary: bool = False  # a summary request (answered from the summary queues)
    # Gemini Interactions: the steps of the stored chain `previous_interaction_id`
    # named, which the server answered over besides this request's input.
    history: list[Any] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """For GET /_fake/requests: never the headers (they carry the API key)."""
        return {
            "kind": self.kind,
            "path": self.path,
            "body": self.body,
            "usage": self.usage,
            "summary": self.summary,
        }


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
_THINKING = ("thinking", "redacted_thinking")


def anthropic_request_problem(body: Any) -> str | None:  # noqa: C901
    """What the Messages API would refuse in this request body (its own wording), or None.
    The checks a converter can get wrong: roles, empty text, tool_use ids and pairs."""
    messages = (body or {}).get("messages") or []
    if messages and messages[0].get("role") != "user" and not opens_with_compaction(body):
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
        if message.get("role") == "assistant" and blocks[-1].get("type") in _THINKING:
            return (
                f"messages.{index}: The final block in an assistant message cannot be `thinking`."
            )
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


# The lifetime of a cached prefix, as the providers sell it: Anthropic's default 5 minutes,
# `"ttl": "1h"` on a breakpoint an hour; Gemini's implicit cache is held as long as the default.
_DEFAULT_CACHE_SECONDS = 300
_CACHE_SECONDS = {"5m": 300, "1h": 3600}


class PromptCache:
    """Which request prefixes the provider has seen, to report cache reads and writes
    as its prompt caching would (prefixes are hashed; nothing else is kept). A prefix
    expires its lifetime after it was last written or read, on the fake's own clock
    (`now`, seconds, moved by `FakeProvider.advance`); a read renews it."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}  # prefix digest -> when it expires
        self.now = 0.0

    def usage(
        self,
        segments: list[Any],
        breakpoints: Iterable[int],
        lifetimes: dict[int, int] | None = None,
    ) -> tuple[int, int]:
        """(tokens read, tokens written) for a request made of these segments in order,
        cacheable up to the last breakpoint (an index into segments, inclusive).
        `lifetimes`: a breakpoint's lifetime in seconds where it is not the default; a
        segment lives as long as the breakpoint at or after it."""
        marks = sorted(breakpoints)
        last = marks[-1] if marks else -1
        digest = hashlib.sha256()
        read = written = 0
        for index, segment in enumerate(segments[: last + 1]):
            # The breakpoint marker is not part of what is cached (it moves each call).
            if isinstance(segment, dict):
                segment = {k: v for k, v in segment.items() if k != "cache_control"}
            digest.update(json.dumps(segment, sort_keys=True).encode())
            key = digest.hexdigest()
            tokens = len(json.dumps(segment)) // 4
            mark = next(m for m in marks if m >= index)
            seconds = (lifetimes or {}).get(mark, _DEFAULT_CACHE_SECONDS)
            expires = self._seen.get(key)
            if expires is not None and expires >= self.now and not written:
                read += tokens
            else:
                written += tokens
            self._seen[key] = max(self.now + seconds, expires or 0.0)
        return read, written


def anthropic_cache_usage(cache: PromptCache, body: dict[str, Any]) -> tuple[int, int]:
    """Tools, then system blocks, then each message's blocks; a breakpoint on every
    block with cache_control (on a tool: the tools before it too), living as its `ttl`
    says ("1h"; else 5 minutes)."""
    segments: list[Any] = [*(body.get("tools") or [])]
    system = body.get("system") or []
    segments += [{"type": "text", "text": system}] if isinstance(system, str) else system
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        segments += [{"role": message.get("role"), **block} for block in blocks or []]
    marks = [i for i, s in enumerate(segments) if isinstance(s, dict) and s.get("cache_control")]
    lifetimes = {
        i: _CACHE_SECONDS.get(segments[i]["cache_control"].get("ttl", "5m"), _DEFAULT_CACHE_SECONDS)
        for i in marks
    }
    return cache.usage(segments, marks, lifetimes)


def gemini_cache_usage(cache: PromptCache, body: dict[str, Any]) -> int:
    """Implicit caching: the longest prefix (system instruction, tools, contents) seen
    before is read from the cache."""
    config = {k: body.get(k) for k in ("systemInstruction", "tools") if body.get(k)}
    segments = [config, *(body.get("contents") or [])]
    read, _ = cache.usage(segments, [len(segments) - 1])
    return read


def default_usage(kind: str, body: Any, cache: PromptCache | None = None) -> dict[str, Any]:
    """The usage a provider would report for this request, when a reply scripts none."""
    total = prompt_tokens(body)
    if kind.startswith("anthropic"):
        read, written = anthropic_cache_usage(cache, body) if cache else (0, 0)
        return {
            "input_tokens": max(1, total - read - written),
            "output_tokens": 50,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        }
    usage = {"promptTokenCount": total, "candidatesTokenCount": 50}
    if cache:
        usage["cachedContentTokenCount"] = min(gemini_cache_usage(cache, body), total)
    return usage


def default_text(body: Any) -> str:
    """The text of a reply that scripts none: a summary to a summary request, else a
    plain answer."""
    return DEFAULT_SUMMARY if SUMMARY_REQUEST in json.dumps(body) else DEFAULT_ANSWER


def is_summary(kind: str, body: Any) -> bool:
    """Whether this is a summarizer's request: a generation request (chat, not a count
    or a provider compaction) whose body carries the summarizer's instruction."""
    return kind in PROVIDER_KINDS.values() and SUMMARY_REQUEST in json.dumps(body)


def summary_kind(provider: str) -> str:
    """The chat kind whose summary requests a provider name (or that kind) stands for."""
    kind = PROVIDER_KINDS.get(provider, provider)
    if kind not in PROVIDER_KINDS.values():
        raise ValueError(
            f"unknown provider {provider!r}: one of {', '.join(PROVIDER_KINDS)} (or its kind)"
        )
    return kind


def render_anthropic(
    reply: Reply, kind: str, body: Any, usage: dict[str, Any] | None = None
) -> tuple[int, dict[str, str], Any]:
    problem = (
        anthropic_request_problem(body)
        or anthropic_content_problem(body)
        or fake_compaction.anthropic_problem(body)
    )
    if problem:
        return 400, {}, _anthropic_error(400, "invalid_request_error", problem)
    if reply.kind == "overflow":
        return 400, {}, _anthropic_error(400, "invalid_request_error", ANTHROPIC_OVERFLOW)
    if reply.kind == "rate_limited":
        limit = "Number of request tokens has exceeded your per-minute rate limit"
        error = _anthropic_error(429, "rate_limit_error", limit)
        return 429, _retry_headers(reply.retry_after), error
    if reply.kind == "overloaded":
        error = _anthropic_error(529, "overloaded_error", "Overloaded")
        return 529, _retry_headers(reply.retry_after), error
    if kind == "anthropic.count_tokens":
        tokens = (reply.usage or {}).get("tokens", prompt_tokens(body))
        return 200, {}, {"input_tokens": tokens}
    content: list[dict[str, Any]] = [thinking_block(reply.thinking)] if reply.thinking else []
    if reply.text or (reply.text is None and not reply.tool_calls):
        content.append(
            {"type": "text", "text": default_text(body) if reply.text is None else reply.text}
        )
    for call in reply.tool_calls:
        call_id = call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}"
        content.append(
            {"type": "tool_use", "id": call_id, "name": call["name"], "input": call["arguments"]}
        )
    usage = reply.usage or usage or default_usage(kind, body)
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    compacted = fake_compaction.anthropic_compaction(
        body, usage, failed=reply.compaction == "failed"
    )
    if compacted is not None:
        opening, usage, alone = compacted
        content = opening if alone else opening + content
        stop = "compaction" if alone else stop
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
    reply: Reply, kind: str, body: Any, model: str, usage: dict[str, Any] | None = None
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
        tokens = (reply.usage or {}).get("tokens", prompt_tokens(body))
        return 200, {}, {"totalTokens": tokens}
    parts: list[dict[str, Any]] = []
    if reply.text or (reply.text is None and not reply.tool_calls):
        parts.append({"text": default_text(body) if reply.text is None else reply.text})
    for call in reply.tool_calls:
        # Gemini may send a function call without an id: leave it out when the script does.
        function_call = {"name": call["name"], "args": call["arguments"]}
        if call.get("id"):
            function_call["id"] = call["id"]
        parts.append({"functionCall": function_call})
    usage = dict(reply.usage or usage or default_usage(kind, body))
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


# The wires whose default usage follows --prompt-cache.
_CACHED_KINDS = ("anthropic.messages", "gemini.generate")


_GEMINI_PATH = re.compile(
    r"^/(?:[^/]+/)*models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$"
)


#: The kind of a chat request, by provider.
PROVIDER_KINDS = {
    "anthropic": "anthropic.messages",
    "gemini": "gemini.generate",
    "openai": fake_openai.CHAT,
    "openai_responses": fake_openai.RESPONSES,
    "gemini_interactions": fake_interactions.KIND,
}


class FakeProvider:
    """The server; `port=0` takes a free one (see `url`). With `prompt_cache`, default
    usage reports cache reads and writes as the provider's prompt caching would."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1", *, prompt_cache: bool = False):
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self.interactions = fake_interactions.InteractionStore()
        # Each entry: (reply, repeat); a repeated reply goes back to the end of its queue.
        self._scripts: dict[str, deque[tuple[Reply, bool]]] = defaultdict(deque)
        # Summary requests' replies, by chat kind (None: any wire's).
        self._summaries: dict[str | None, deque[tuple[Reply, bool]]] = defaultdict(deque)
        self._cache = PromptCache() if prompt_cache else None
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"  # type: ignore[str-bytes-safe]  # AF_INET: a str

    def start(self) -> FakeProvider:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # scripting
    def script(self, kind: str, *replies: Reply, repeat: bool = False) -> None:
        """Queue replies for one kind of request; with `repeat` they answer in a cycle."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
        with self._lock:
            self._scripts[kind].extend((reply, repeat) for reply in replies)

    def script_summaries(
        self, *replies: Reply, provider: str | None = None, repeat: bool = False
    ) -> None:
        """Queue replies for summary requests alone (a request carrying the summarizer's
        instruction, `SUMMARY_REQUEST`): on one wire (`provider`: anthropic, gemini,
        gemini_interactions, openai, openai_responses, or its kind), or on any with None.
        A summary request takes only from these queues (its wire's first), never a chat
        reply; with none queued it gets `DEFAULT_SUMMARY`. With `repeat` they answer in a
        cycle."""
        key = None if provider is None else summary_kind(provider)
        with self._lock:
            self._summaries[key].extend((reply, repeat) for reply in replies)

    def script_json(self, data: Any) -> int:
        """Queue replies given as JSON: {"provider": "anthropic"|"gemini"|"openai"|
        "openai_responses" (or a kind), "replies": [...], "summaries": [...], "repeat":
        false} (replies, summaries or both; chat replies default to "anthropic", summaries
        to any wire), or a list of those. Returns the count queued; raises ValueError
        (nothing queued) on a malformed script."""
        entries = data if isinstance(data, list) else [data]
        queued: list[tuple[str, list[Reply], bool]] = []
        summaries: list[tuple[str | None, list[Reply], bool]] = []
        for entry in entries:
            lists = ("replies", "summaries")
            if (
                not isinstance(entry, dict)
                or not any(name in entry for name in lists)
                or not all(isinstance(entry.get(name, []), list) for name in lists)
            ):
                raise ValueError(
                    'a script is {"provider"?, "replies": [...], "summaries": [...], "repeat"?}'
                )
            repeat = bool(entry.get("repeat"))
            provider = entry.get("provider")
            if "replies" in entry:
                kind = PROVIDER_KINDS.get(provider or "anthropic", provider or "anthropic")
                if kind not in KINDS:
                    raise ValueError(f"unknown provider {provider!r}")
                replies = [reply_from_json(reply) for reply in entry["replies"]]
                queued.append((kind, replies, repeat))
            if "summaries" in entry:
                key = None if provider is None else summary_kind(provider)
                replies = [reply_from_json(reply) for reply in entry["summaries"]]
                summaries.append((key, replies, repeat))
        for kind, replies, repeat in queued:
            self.script(kind, *replies, repeat=repeat)
        with self._lock:
            for key, replies, repeat in summaries:
                self._summaries[key].extend((reply, repeat) for reply in replies)
        return sum(len(replies) for _, replies, _ in queued + summaries)

    def script_anthropic(self, *replies: Reply) -> None:
        self.script("anthropic.messages", *replies)

    def script_openai(self, *replies: Reply) -> None:
        self.script(fake_openai.CHAT, *replies)

    def script_openai_responses(self, *replies: Reply) -> None:
        self.script(fake_openai.RESPONSES, *replies)

    @property
    def openai_url(self) -> str:
        """The `base_url` of the openai SDK (its paths follow /v1)."""
        return f"{self.url}/v1"

    def script_gemini(self, *replies: Reply) -> None:
        self.script("gemini.generate", *replies)

    def script_gemini_interactions(self, *replies: Reply) -> None:
        self.script("gemini.interactions", *replies)

    def _next_reply(self, kind: str, summary: bool = False) -> Reply:
        """The reply to a request of this kind: a summary request's from the summary
        queues (its wire's, then any wire's), every other from its kind's script."""
        with self._lock:
            if summary:
                queue = self._summaries[kind] or self._summaries[None]
            else:
                queue = self._scripts[kind]
            if not queue:
                return ok()
            reply, repeat = queue.popleft()
            if repeat:
                queue.append((reply, repeat))
            return reply

    def _usage(self, kind: str, body: Any) -> dict[str, Any]:
        with self._lock:
            return default_usage(kind, body, self._cache)

    # inspection
    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def requests_for(self, kind: str) -> list[Request]:
        return [r for r in self.requests if r.kind == kind]

    def count(self, kind: str) -> int:
        return len(self.requests_for(kind))

    def advance(self, seconds: float) -> None:
        """Move the fake's clock on: a cached prefix not used within its lifetime
        (5 minutes; an hour where its breakpoint says `"ttl": "1h"`) is written again,
        as the provider's cache would have expired it. Needs `prompt_cache`."""
        with self._lock:
            if self._cache is not None:
                self._cache.now += seconds

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()
            self._scripts.clear()
            self._summaries.clear()
        self.interactions.clear()

    # settings
    def use_anthropic(self, settings: Any, key: str = "test-key-anthropic") -> None:
        settings.ASSISTANT_SUMMARIZER = "anthropic"
        settings.ANTHROPIC_API_KEY = key
        settings.ANTHROPIC_BASE_URL = self.url

    def use_openai(self, settings: Any, key: str = "test-key-openai") -> None:
        settings.ASSISTANT_SUMMARIZER = "openai"
        settings.OPENAI_API_KEY = key
        settings.OPENAI_BASE_URL = self.openai_url

    def use_gemini(self, settings: Any, key: str = "test-key-gemini") -> None:
        settings.ASSISTANT_SUMMARIZER = "gemini"
        settings.GEMINI_API_KEY = key
        settings.GEMINI_BASE_URL = self.url
        settings.LLM_RETRY_INITIAL_DELAY = 0.01
        settings.LLM_RETRY_MAX_DELAY = 0.05

    def use_embeddings(self, settings: Any, provider: str, key: str | None = None) -> None:
        """Semantic recall's embeddings from this server: ASSISTANT_EMBEDDINGS set to
        `provider` ("openai", "gemini" or "voyage") with its key and base URL (the
        summarizer, and the other settings, as they were)."""
        settings.ASSISTANT_EMBEDDINGS = provider
        if provider == "openai":
            settings.OPENAI_API_KEY = key or "test-key-openai"
            settings.OPENAI_BASE_URL = self.openai_url
        elif provider == "gemini":
            settings.GEMINI_API_KEY = key or "test-key-gemini"
            settings.GEMINI_BASE_URL = self.url
            settings.LLM_RETRY_INITIAL_DELAY = 0.01
            settings.LLM_RETRY_MAX_DELAY = 0.05
        elif provider == "voyage":
            settings.VOYAGE_API_KEY = key or "test-key-voyage"
            settings.VOYAGE_BASE_URL = self.voyage_url
        else:
            raise ValueError(
                f"the fake serves openai, gemini and voyage embeddings, not {provider!r}"
            )

    def embeddings_env(self, provider: str) -> dict[str, str]:
        """Environment for a worker subprocess whose embeddings come from this server."""
        variables = {
            "openai": {"OPENAI_API_KEY": "test-key-openai", "OPENAI_BASE_URL": self.openai_url},
            "gemini": {"GEMINI_API_KEY": "test-key-gemini", "GEMINI_BASE_URL": self.url},
            "voyage": {"VOYAGE_API_KEY": "test-key-voyage", "VOYAGE_BASE_URL": self.voyage_url},
        }
        if provider not in variables:
            raise ValueError(
                f"the fake serves openai, gemini and voyage embeddings, not {provider!r}"
            )
        return {"ASSISTANT_EMBEDDINGS": provider, **variables[provider]}

    @property
    def voyage_url(self) -> str:
        """The `base_url` of the voyageai SDK (its paths follow /voyage/v1)."""
        return f"{self.url}/voyage/v1"

    def use_gemini_interactions(self, settings: Any, key: str = "test-key-gemini") -> None:
        """The summarizer on Gemini's Interactions API, answered by this server."""
        self.use_gemini(settings, key)
        settings.ASSISTANT_SUMMARIZER = "gemini_interactions"

    def env(self, provider: str = "anthropic") -> dict[str, str]:
        """Environment for a worker subprocess pointed at this server."""
        if provider == "openai":
            return {
                "ASSISTANT_SUMMARIZER": "openai",
                "OPENAI_API_KEY": "test-key-openai",
                "OPENAI_BASE_URL": self.openai_url,
            }
        if provider in ("gemini", "gemini_interactions"):
            return {
                "ASSISTANT_SUMMARIZER": provider,
                "GEMINI_API_KEY": "test-key-gemini",
                "GEMINI_BASE_URL": self.url,
            }
        return {
            "ASSISTANT_SUMMARIZER": "anthropic",
            "ANTHROPIC_API_KEY": "test-key-anthropic",
            "ANTHROPIC_BASE_URL": self.url,
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:  # noqa: C901
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # Headers and body go out in separate writes: with Nagle's algorithm on,
            # the body of a reply on a kept-alive connection waits for the client's
            # delayed ACK, about 40 ms a request.
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/_fake/requests":
                    self._send(404, {}, {"error": {"code": 404, "message": "no route"}})
                    return
                self._send(200, {}, [r.as_json() for r in fake.requests])

            def _control(self, path: str, body: Any) -> None:
                if path == "/_fake/reset":
                    fake.reset()
                    self._send(200, {}, {"reset": True})
                    return
                try:
                    queued = fake.script_json(body)
                except ValueError as error:
                    self._send(400, {}, {"error": {"code": 400, "message": str(error)}})
                    return
                self._send(200, {}, {"queued": queued})

            def do_POST(self) -> None:  # noqa: C901
                length = int(self.headers.get("content-length") or 0)
                raw_body = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw_body) if raw_body else None
                except ValueError:
                    body = raw_body.decode("utf-8", "replace")
                path = self.path.split("?", 1)[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                gemini = _GEMINI_PATH.match(path)
                if path in ("/_fake/script", "/_fake/reset"):
                    self._control(path, body)
                    return
                embedding = fake_embeddings.kind_of(path)
                if embedding is not None:
                    kind = embedding
                elif path in fake_openai.PATHS:
                    kind = fake_openai.PATHS[path]
                elif path == "/v1/messages":
                    kind = fake_compaction.messages_kind(body)
                elif path in fake_interactions.PATHS:
                    kind = fake_interactions.KIND
                elif path == "/v1/messages/count_tokens":
                    kind = "anthropic.count_tokens"
                elif gemini:
                    kind = (
                        "gemini.count_tokens"
                        if gemini.group(2) == "countTokens"
                        else "gemini.generate"
                    )
                else:
                    self._send(404, {}, {"error": {"code": 404, "message": f"no route {path}"}})
                    return
                request = Request(kind, path, headers, body, summary=is_summary(kind, body))
                with fake._lock:
                    fake._requests.append(request)
                authorized = (
                    headers.get("x-api-key")
                    or headers.get("authorization", "").startswith("Bearer ")
                    or headers.get("x-goog-api-key")
                )
                if not authorized:
                    error = _anthropic_error(401, "authentication_error", "invalid x-api-key")
                    self._send(401, {}, error)
                    return
                reply = fake._next_reply(kind, request.summary)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.kind == "malformed":
                    self._send(200, {}, b'{"id": "msg_1", "content": [{"type": "te')
                    return
                if reply.kind == "raw":
                    self._send(reply.status, reply.headers, reply.body)
                    return
                usage = None
                if reply.kind == "ok" and not reply.usage and kind in _CACHED_KINDS:
                    usage = fake._usage(kind, body)
                if kind in fake_embeddings.KINDS:
                    answer = fake_embeddings.render(reply, kind, path, body)
                elif kind in fake_openai.PATHS.values():
                    tokens = prompt_tokens(body)
                    answer = fake_openai.render(
                        reply,
                        kind,
                        body,
                        fake_openai.default_usage(kind, tokens),
                        default_text(body),
                    )
                elif kind == fake_interactions.KIND:
                    answer = self._interaction(reply, body, request)
                elif kind.startswith("anthropic"):
                    answer = render_anthropic(reply, kind, body, usage)
                else:
                    assert gemini is not None  # the path named a Gemini kind
                    answer = render_gemini(reply, kind, body, gemini.group(1), usage)
                if answer[0] == 200 and isinstance(answer[2], dict):
                    request.usage = answer[2].get("usage") or answer[2].get("usageMetadata")
                streamed = (isinstance(body, dict) and body.get("stream") is True) or bool(
                    gemini and gemini.group(2) == "streamGenerateContent"
                )
                events = streamed and stream_events(kind, reply, body, answer)
                if events:
                    self._send_stream(events, reply)
                else:
                    self._send(*answer)

            def _interaction(
                self, reply: Reply, body: Any, request: Request
            ) -> tuple[int, dict[str, str], Any]:
                """Gemini's Interactions API, its interactions kept as the server keeps
                them (assistant.testing.fake_interactions)."""
                refused = fake_interactions.problem(body)
                if refused:
                    return 400, {}, _gemini_error(400, "INVALID_ARGUMENT", refused)
                if reply.kind == "overflow":
                    return 400, {}, _gemini_error(400, "INVALID_ARGUMENT", GEMINI_OVERFLOW)
                if reply.kind in ("rate_limited", "overloaded"):
                    status, name = (
                        (429, "RESOURCE_EXHAUSTED")
                        if reply.kind == "rate_limited"
                        else (503, "UNAVAILABLE")
                    )
                    error = _gemini_error(status, name, f"{name.lower()}: try again later.")
                    return status, _retry_headers(reply.retry_after), error
                history = fake.interactions.history(body.get("previous_interaction_id"))
                if history is None:
                    message = "previous_interaction_id names no stored interaction"
                    return 404, {}, _gemini_error(404, "NOT_FOUND", message)
                sent = body.get("input")
                mismatch = fake_interactions.unanswered(
                    [*history, *(sent if isinstance(sent, list) else [])]
                )
                if mismatch:
                    return 400, {}, _gemini_error(400, "INVALID_ARGUMENT", mismatch)
                text = reply.text
                if text is None and not reply.tool_calls:
                    text = default_text(body)
                interaction, request.history = fake_interactions.render(
                    fake.interactions,
                    body,
                    text,
                    reply.tool_calls,
                    reply.usage,
                    prompt_tokens([*history, body]),
                )
                return 200, {}, interaction

            def _send_stream(self, events: list[str], reply: Reply) -> None:
                """Server-sent events, a chunk each, `reply.pace` apart; after
                `reply.break_after` of them the connection drops (no closing chunk)."""
                try:
                    self.send_response(200)
                    self.send_header("content-type", SSE)
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for index, event in enumerate(events):
                        if reply.break_after is not None and index >= reply.break_after:
                            self.close_connection = True
                            self.wfile.flush()
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        if index and reply.pace:
                            time.sleep(reply.pace)
                        data = event.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up

            def _send(self, status: int, headers: dict[str, str], body: Any) -> None:
                if isinstance(body, bytes | str):
                    data = body.encode() if isinstance(body, str) else body
                else:
                    data = json.dumps(body).encode()
                headers = {"content-type": "application/json", **headers}
                try:
                    self.send_response(status)
                    self.send_header("content-length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        return Handler


def stream_events(
    kind: str, reply: Reply, body: Any, answer: tuple[int, dict[str, str], Any]
) -> list[str] | None:
    """The events of a streamed request's answer; None to answer it whole (an error
    before the stream: Anthropic's and Gemini's overflow is a 400, as theirs is)."""
    status, _, whole = answer
    model = (body or {}).get("model", "gpt") if isinstance(body, dict) else "gpt"
    if kind in (fake_openai.CHAT, fake_openai.RESPONSES) and reply.kind == "overflow":
        if kind == fake_openai.CHAT:
            return fake_streams.chat_overflow_events(model)
        return fake_streams.response_overflow_events(model)
    if status != 200 or not isinstance(whole, dict):
        return None
    if kind in ("anthropic.messages", fake_compaction.ANTHROPIC_COMPACTION):
        return fake_streams.anthropic_events(whole)
    if kind == fake_openai.CHAT:
        include_usage = ((body or {}).get("stream_options") or {}).get("include_usage") is True
        return fake_streams.chat_chunks(whole, include_usage)
    if kind == fake_openai.RESPONSES:
        return fake_streams.response_events(whole)
    if kind == "gemini.generate":
        return fake_streams.gemini_chunks(whole)
    if kind == fake_interactions.KIND:
        return fake_streams.interaction_events(whole)
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m assistant.testing.fake_provider",
        description=(
            "A fake LLM server for testing a chat loop without a key. It serves Anthropic's "
            "Messages API (anthropic SDK base_url: http://HOST:PORT), OpenAI's Chat "
            "Completions and Responses API (openai SDK base_url: http://HOST:PORT/v1) and "
            "Gemini's generateContent and Interactions API (google-genai http_options "
            "base_url: http://HOST:PORT). "
            'Script it with POST /_fake/script: {"provider": "anthropic"|"openai"|'
            '"openai_responses"|"gemini"|"gemini_interactions", "replies": [...]} for chat '
            "requests, "
            '{"provider"?: ..., "summaries": [...]} for summary requests; '
            "GET /_fake/requests lists what it received, POST /_fake/reset forgets it."
        ),
    )
    parser.add_argument("--port", type=int, default=0, help="0 (default): any free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--script", help="a JSON file of replies to queue at start")
    parser.add_argument(
        "--prompt-cache", action="store_true", help="report usage as prompt caching would"
    )
    args = parser.parse_args(argv)
    fake = FakeProvider(args.port, args.host, prompt_cache=args.prompt_cache)
    if args.script:
        with open(args.script, encoding="utf-8") as file:
            try:
                fake.script_json(json.load(file))
            except ValueError as error:
                parser.error(f"--script {args.script}: {error}")
    # The first line says where it listens (a caller that asked for port 0 reads it).
    print(f"fake provider listening on {fake.url}", flush=True)
    try:
        fake._server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        fake._server.server_close()


if __name__ == "__main__":
    main()
