"""The fake server's server-side compaction, in the providers' shapes
(docs/provider-compaction.rst).

Anthropic (`POST /v1/messages?beta=true`, what `client.beta.messages.create` sends):
- `context_management={"edits": [{"type": "compact_20260112", "trigger": {"type":
  "input_tokens", "value": N}}]}` (beta `compact-2026-01-12`, trigger default 150,000):
  when the request's tokens pass the trigger, the answer opens with a
  `{"type": "compaction", "content", "signature", "encrypted_content"}` block summarizing
  the whole conversation, and `usage.iterations` holds a `compaction` entry (the
  compaction's own tokens, outside the top-level usage) and a `message` entry (the
  answer, written from the system prompt and the summary alone: the top-level usage);
- `compaction={"type": "summarize"}` (beta `compact-2026-09-04`): the answer is the
  compaction block alone, `stop_reason` "compaction", its tokens in a `compaction`
  iteration; refused beside `context_management`;
- a compaction block sent back must be the first block of the conversation, hold the
  content its signature was made over, and be the only one with content (the API's
  `compaction_block_misplaced`, `compaction_content_mismatch`,
  `compaction_block_ambiguous` errors);
- a reply scripted with `"compaction": "failed"` compacts with null content, as the
  API does when the summary fails (a no-op the client may send back).

OpenAI's Responses API: `context_management=[{"type": "compaction", "compact_threshold":
N}]`: past N input tokens the output opens with `{"type": "compaction", "id",
"encrypted_content"}`; `responses.compact` (`POST /v1/responses/compact`) answers a
`response.compaction` object whose output is the input's user messages, then one
compaction item, and its usage; only user messages may come before an item sent back
in `input`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from typing import Any

# The kind (and script queue) of an on-demand compaction request: scripted apart from
# the chat's answers (e.g. {"provider": "anthropic.compaction", "replies":
# [{"compaction": "failed"}]}), answered with a summary when none is scripted.
ANTHROPIC_COMPACTION = "anthropic.compaction"
DEFAULT_TRIGGER = 150_000
_SIGNING_KEY = "fake-provider-compaction"
SUMMARY_TOKENS = 200  # what a compaction's summary costs in output


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value)) // 4)


def signature(content: str) -> str:
    return base64.b64encode(hashlib.sha256(f"{_SIGNING_KEY}:{content}".encode()).digest()).decode()


def summary_of(messages: list[dict[str, Any]]) -> str:
    """A deterministic summary naming what the conversation held."""
    texts: list[str] = []
    for message in messages:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            if block.get("type") == "text":
                texts.append(block["text"])
            elif block.get("type") == "compaction" and block.get("content"):
                texts.append(block["content"])
    lines = "\n".join(f"- {text[:160]}" for text in texts[-12:])
    return f"<summary>\nThe conversation so far ({len(messages)} messages):\n{lines}\n</summary>"


def compaction_block(messages: list[dict[str, Any]], *, failed: bool = False) -> dict[str, Any]:
    content = None if failed else summary_of(messages)
    return {
        "type": "compaction",
        "content": content,
        "signature": signature(content or ""),
        "encrypted_content": None,
    }


def _iteration(kind: str, input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "type": kind,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def anthropic_problem(body: Any) -> str | None:
    """What the API refuses about compaction blocks and parameters, or None."""
    if not isinstance(body, dict):
        return None
    if body.get("compaction") is not None and body.get("context_management") is not None:
        return "compaction: cannot be combined with `context_management`"
    with_content = 0
    for index, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        for position, block in enumerate(content if isinstance(content, list) else []):
            if block.get("type") != "compaction":
                continue
            if (index, position) != (0, 0):
                return (
                    f"messages.{index}.content.{position}: compaction_block_misplaced: the "
                    "`compaction` block must be the first block of the conversation"
                )
            if block.get("signature") != signature(block.get("content") or ""):
                return f"messages.{index}.content.{position}: compaction_content_mismatch"
            with_content += block.get("content") is not None
    if with_content > 1:
        return "messages: compaction_block_ambiguous"
    return None


def messages_kind(body: Any) -> str:
    """The kind of a `POST /v1/messages`: a chat answer, or an on-demand compaction."""
    asked = isinstance(body, dict) and body.get("compaction") is not None
    return ANTHROPIC_COMPACTION if asked else "anthropic.messages"


def opens_with_compaction(body: Any) -> bool:
    messages = (body or {}).get("messages") or []
    content = messages[0].get("content") if messages else None
    return isinstance(content, list) and bool(content) and content[0].get("type") == "compaction"


def _trigger(body: dict[str, Any]) -> int | None:
    edits = (body.get("context_management") or {}).get("edits") or []
    for edit in edits:
        if edit.get("type") == "compact_20260112":
            return int((edit.get("trigger") or {}).get("value") or DEFAULT_TRIGGER)
    return None


def anthropic_compaction(
    body: Any, usage: dict[str, Any], *, failed: bool
) -> tuple[list[dict[str, Any]], dict[str, Any], bool] | None:
    """(the blocks the answer opens with, its usage, whether the answer is the block
    alone) when the request compacts; None when it does not."""
    if not isinstance(body, dict):
        return None
    total = _tokens(body)
    messages = body.get("messages") or []
    if body.get("compaction") is not None:
        block = compaction_block(messages, failed=failed)
        iterations = [_iteration("compaction", total, SUMMARY_TOKENS)]
        top = {**_iteration("message", 0, 0), "iterations": iterations}
        top.pop("type")
        return [block], top, True
    trigger = _trigger(body)
    if trigger is None or total <= trigger:
        return None
    block = compaction_block(messages, failed=failed)
    # A failed compaction is a no-op: the answer reads the whole conversation.
    seen = total if failed else _tokens(body.get("system") or []) + _tokens(block)
    output = int(usage.get("output_tokens") or 0)
    iterations = [
        _iteration("compaction", total, SUMMARY_TOKENS),
        _iteration("message", seen, output),
    ]
    top = {**_iteration("message", seen, output), "iterations": iterations}
    top.pop("type")
    return [block], top, False


def responses_problem(body: Any) -> str | None:
    found = (body or {}).get("input") if isinstance(body, dict) else None
    items = [i for i in found if isinstance(i, dict)] if isinstance(found, list) else []
    for index, item in enumerate(items):
        if item.get("type") == "compaction":
            if any(i.get("role") != "user" for i in items[:index]):
                return f"input[{index}]: only user messages may come before a compaction item"
            if not item.get("encrypted_content"):
                return f"input[{index}].encrypted_content: required"
    return None


def responses_compaction(body: Any) -> dict[str, Any] | None:
    """The compaction item a Responses request's output opens with, or None."""
    if not isinstance(body, dict):
        return None
    threshold = None
    for entry in body.get("context_management") or []:
        if entry.get("type") == "compaction":
            threshold = entry.get("compact_threshold")
    if threshold is None or _tokens(body) <= int(threshold):
        return None
    summary = summary_of([i for i in body.get("input") or [] if isinstance(i, dict)])
    return {
        "id": f"cmp_{uuid.uuid4().hex[:24]}",
        "type": "compaction",
        "encrypted_content": base64.b64encode(summary.encode()).decode(),
    }


def _encrypted(items: list[Any]) -> str:
    summary = summary_of([i for i in items if isinstance(i, dict)])
    return base64.b64encode(summary.encode()).decode()


def compacted_response(body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """`responses.compact`'s answer: the input's user messages, then the compaction item
    standing for the rest."""
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    users = [
        {"type": "message", "role": "user", "content": _input_parts(i["content"])}
        for i in items
        if i.get("role") == "user" and i.get("type", "message") == "message"
    ]
    item = {
        "id": f"cmp_{uuid.uuid4().hex[:24]}",
        "type": "compaction",
        "encrypted_content": _encrypted(items),
    }
    return {
        "id": f"resp_{uuid.uuid4().hex[:24]}",
        "object": "response.compaction",
        "created_at": 0,
        "output": [*users, item],
        "usage": {**usage, "output_tokens": SUMMARY_TOKENS},
    }


def _input_parts(content: Any) -> list[dict[str, Any]]:
    return [{"type": "input_text", "text": content}] if isinstance(content, str) else content
