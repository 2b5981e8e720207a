"""The one place where neutral messages become provider request shapes.

Neutral message: {"role": "user"|"assistant"|"tool", "content": str,
"tool_calls": [{"id", "name", "arguments"}] (assistant), "tool_call_id", "tool_name" (tool),
"blocks": [content blocks in Anthropic's shapes] (assistant.text.blocks)}.
Thinking blocks go to Anthropic for the current turn only (the API ignores older ones) and
never to Gemini; images and documents become Gemini's inline_data and file_data parts.
Each tool result follows the message of the call it answers (context.build_context sees to it).

Two things are fixed here rather than sent as they are: a model may reuse a tool-call id once
its first call was answered, which both APIs refuse within one request, so repeated ids are
renamed (each result follows its call's new name); and Anthropic accepts only ids made of
letters, digits, `_` and `-`. A stored model answer with nothing to send (no text, no tool
call, only thinking that Anthropic would refuse alone) is left out, its neighbours merged. The
final shapes are then checked, so a malformed history raises `InvalidRequest` here instead
of a provider's 400.
"""

from __future__ import annotations

import base64
import mimetypes
import re
from collections.abc import Callable
from typing import Any

from assistant.text import THINKING_TYPES, current_turn_start

EPHEMERAL = {"type": "ephemeral"}
REASONING = "reasoning"  # the Responses API's reasoning items, sent to it alone
COMPACTION = (
    "compaction"  # a provider's compaction block or item (assistant.providers.compaction_blocks)
)
MAX_CACHE_BREAKPOINTS = 4

_ANTHROPIC_ID_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


class InvalidRequest(ValueError):
    """The converted request would be refused by the provider (a bug upstream)."""


def _anthropic_id(call_id: str) -> str:
    return _ANTHROPIC_ID_UNSAFE.sub("_", call_id) or "call"


def _same_id(call_id: str) -> str:
    return call_id


def with_unique_call_ids(
    messages: list[dict[str, Any]], safe: Callable[[str], str] = _same_id
) -> list[dict[str, Any]]:
    """The messages with every tool-call id unique in the request: a repeated id gets a
    suffix, and each result takes the name of the latest call with its original id."""
    used: set[str] = set()
    current: dict[str, str] = {}  # original id -> name of its latest call
    renamed: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            original = message["tool_call_id"]
            renamed.append({**message, "tool_call_id": current.get(original, safe(original))})
            continue
        calls = message.get("tool_calls")
        if not calls:
            renamed.append(message)
            continue
        new_calls = []
        for call in calls:
            name = base = safe(call["id"])
            suffix = 1
            while name in used:
                suffix += 1
                name = f"{base}_{suffix}"
            used.add(name)
            current[call["id"]] = name
            new_calls.append({**call, "id": name})
        renamed.append({**message, "tool_calls": new_calls})
    return renamed


def _without_old_thinking(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with thinking blocks only in the current turn, as Anthropic's API
    itself uses them (older ones would cost tokens and change nothing)."""
    start = current_turn_start(messages)
    kept = []
    for index, message in enumerate(messages):
        blocks = message.get("blocks")
        if index < start and blocks:
            message = {**message, "blocks": [b for b in blocks if b["type"] not in THINKING_TYPES]}
        kept.append(message)
    return kept


def _anthropic_blocks(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    role = message["role"]
    content = message.get("content") or ""
    # Anthropic refuses a whitespace-only text block; Gemini gets the same treatment.
    text: list[dict[str, Any]] = [{"type": "text", "text": content}] if content.strip() else []
    # Copies: a cache breakpoint is set on the request's last block.
    extra = [dict(block) for block in message.get("blocks") or [] if block["type"] != REASONING]
    if role == "tool":
        block = {
            "type": "tool_result",
            "tool_use_id": message["tool_call_id"],
            "content": text + extra if extra else content,
        }
        return "user", [block]
    # Thinking opens the assistant turn; images and documents go before the user's text.
    blocks = extra + text
    if message.get("compaction"):
        # The provider's compaction block, verbatim, first in the conversation.
        blocks = [dict(message["compaction"]["block"]), *blocks]
    if role == "assistant":
        for call in message.get("tool_calls") or []:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["name"],
                    "input": call.get("arguments") or {},
                }
            )
        return "assistant", blocks
    return "user", blocks


def to_anthropic(
    system: str, summaries: list[str], messages: list[dict[str, Any]], *, check: bool = True
) -> dict[str, Any]:
    """{"system": [text blocks], "messages": [...]}, with cache breakpoints on the system
    block, the last summary block and the last message block (3 of the 4 allowed)."""
    system_blocks: list[dict[str, Any]] = []
    if system:
        system_blocks.append({"type": "text", "text": system, "cache_control": EPHEMERAL})
    for summary in summaries:
        system_blocks.append({"type": "text", "text": summary})
    if summaries:
        system_blocks[-1]["cache_control"] = EPHEMERAL

    converted: list[dict[str, Any]] = []
    pieces = [
        _anthropic_blocks(message)
        for message in with_unique_call_ids(_without_old_thinking(messages), _anthropic_id)
    ]
    for role, blocks in _without_lone_thinking(pieces):
        if not blocks:
            continue
        # Consecutive same-role messages merge: the API wants alternating turns, and all
        # results of one assistant turn in one user message.
        if converted and converted[-1]["role"] == role:
            previous = converted[-1]["content"]
            # tool_result blocks must come first in a user message
            if role == "user" and blocks[0]["type"] == "tool_result":
                results = [b for b in previous if b["type"] == "tool_result"]
                others = [b for b in previous if b["type"] != "tool_result"]
                converted[-1]["content"] = results + blocks + others
            else:
                previous.extend(blocks)
        else:
            converted.append({"role": role, "content": blocks})
    if check:  # off only for staff looking at an unfinished turn
        check_anthropic_messages(converted)
    if converted and converted[-1]["content"][-1]["type"] != COMPACTION:
        converted[-1]["content"][-1]["cache_control"] = EPHEMERAL
    return {"system": system_blocks, "messages": converted}


def _without_lone_thinking(
    pieces: list[tuple[str, list[dict[str, Any]]]],
) -> list[tuple[str, list[dict[str, Any]]]]:
    """An answer that was all thinking (Claude may end a turn so) rides on the assistant
    message after it, which it then opens as the API wants; with none after it, it is left
    out: Anthropic refuses an assistant message whose last block is thinking."""
    kept: list[tuple[str, list[dict[str, Any]]]] = []
    carried = False  # the next non-empty piece is an assistant message that can carry it
    for role, blocks in reversed(pieces):
        if role == "assistant" and blocks and all(b["type"] in THINKING_TYPES for b in blocks):
            blocks = blocks if carried else []
        if blocks:
            carried = role == "assistant"
        kept.append((role, blocks))
    return kept[::-1]


def to_gemini(
    system: str, summaries: list[str], messages: list[dict[str, Any]], *, check: bool = True
) -> dict[str, Any]:
    """{"system_instruction": str, "contents": [...]} in google-genai's dict form."""
    instruction = "\n\n".join(part for part in [system, *summaries] if part)
    contents: list[dict[str, Any]] = []
    for message in with_unique_call_ids(messages):
        role = message["role"]
        content = message.get("content") or ""
        if role == "tool":
            gemini_role = "user"
            parts = [
                {
                    "function_response": {
                        "id": message.get("tool_call_id"),
                        "name": message.get("tool_name") or "",
                        "response": {"result": content},
                    }
                },
                *_gemini_parts(message.get("blocks")),
            ]
        else:
            gemini_role = "model" if role == "assistant" else "user"
            parts = _gemini_parts(message.get("blocks"))
            parts += [{"text": content}] if content.strip() else []
            for call in message.get("tool_calls") or []:
                parts.append(
                    {
                        "function_call": {
                            "id": call["id"],
                            "name": call["name"],
                            "args": call.get("arguments") or {},
                        }
                    }
                )
        if not parts:
            continue
        if contents and contents[-1]["role"] == gemini_role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": gemini_role, "parts": parts})
    if check:
        check_gemini_contents(contents)
    return {"system_instruction": instruction, "contents": contents}


def _gemini_parts(blocks: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Images and documents as inline_data (bytes; the SDK encodes them) or file_data
    parts, placeholders as text; thinking is Anthropic's and is left out."""
    parts: list[dict[str, Any]] = []
    for block in blocks or []:
        if block["type"] in THINKING_TYPES:
            continue
        if block["type"] == "text":
            parts.append({"text": block["text"]})
            continue
        source = block["source"]
        if source["type"] == "url":
            file_data = {"file_uri": source["url"]}
            guessed = mimetypes.guess_type(source["url"])[0]
            if guessed:
                file_data["mime_type"] = guessed
            parts.append({"file_data": file_data})
        elif source["type"] == "text":
            data = source["data"].encode("utf-8")
            parts.append({"inline_data": {"mime_type": "text/plain", "data": data}})
        else:
            data = base64.b64decode(source["data"])
            parts.append({"inline_data": {"mime_type": source["media_type"], "data": data}})
    return parts


def check_anthropic_messages(messages: list[dict[str, Any]]) -> None:
    """Raise InvalidRequest unless Anthropic would accept these messages: user first, roles
    alternating, no empty content, every tool_use answered by a tool_result in the next
    message and every tool_result answering a tool_use of the message before it, no
    assistant message ending with thinking."""

    def pairs(blocks: list[dict[str, Any]], kind: str, key: str) -> list[str]:
        return [b[key] for b in blocks if b["type"] == kind]

    # A conversation the provider compacted starts with its block, in either role.
    opens = messages and messages[0]["content"] and messages[0]["content"][0]["type"] == COMPACTION
    _check_turns([m["role"] for m in messages], messages[0]["role"] if opens else "user")
    calls: list[str] = []
    seen: set[str] = set()
    for index, message in enumerate(messages):
        blocks = message["content"]
        if not blocks or any(b["type"] == "text" and not b["text"].strip() for b in blocks):
            raise InvalidRequest(f"messages[{index}] has empty content")
        if message["role"] == "assistant" and blocks[-1]["type"] in THINKING_TYPES:
            raise InvalidRequest(f"messages[{index}] ends with a thinking block")
        answers = pairs(blocks, "tool_result", "tool_use_id")
        if sorted(answers) != sorted(calls):
            raise InvalidRequest(f"messages[{index}] answers tool uses {answers}, expected {calls}")
        calls = pairs(blocks, "tool_use", "id")
        if seen.intersection(calls) or len(set(calls)) != len(calls):
            raise InvalidRequest(f"messages[{index}] repeats a tool_use id")
        seen.update(calls)
    if calls:
        raise InvalidRequest(f"the last message has tool uses without results: {calls}")


def check_gemini_contents(contents: list[dict[str, Any]]) -> None:
    """Raise InvalidRequest unless Gemini would accept these contents: `user` first, roles
    alternating, no empty part, and each model turn's function calls answered one for one
    (same id and name) by the next user turn's function responses."""

    def pairs(parts: list[dict[str, Any]], kind: str) -> list[tuple[str, str]]:
        return sorted((p[kind]["id"], p[kind]["name"]) for p in parts if kind in p)

    _check_turns([c["role"] for c in contents], "user")
    calls: list[tuple[str, str]] = []
    for index, content in enumerate(contents):
        parts = content["parts"]
        if not parts or any("text" in p and not p["text"].strip() for p in parts):
            raise InvalidRequest(f"contents[{index}] has an empty part")
        answers = pairs(parts, "function_response")
        if answers != calls:
            raise InvalidRequest(
                f"contents[{index}] answers function calls {answers}, expected {calls}"
            )
        calls = pairs(parts, "function_call")
    if calls:
        raise InvalidRequest(f"the last turn has function calls without responses: {calls}")


def _check_turns(roles: list[str], first: str) -> None:
    if roles and roles[0] != first:
        raise InvalidRequest(f"the first message is {roles[0]!r}, not {first!r}")
    for index in range(1, len(roles)):
        if roles[index] == roles[index - 1]:
            raise InvalidRequest(f"messages {index - 1} and {index} are both {roles[index]!r}")


def anthropic_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Neutral tool specs {name, description, parameters} as Anthropic tools."""
    return [
        {
            "name": t["name"],
            "description": t.get("description", ""),
            "input_schema": t.get("parameters") or {"type": "object", "properties": {}},
        }
        for t in tools or []
    ]


def gemini_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if not tools:
        return []
    declarations = [
        {
            "name": t["name"],
            "description": t.get("description", ""),
            "parameters": t.get("parameters"),
        }
        for t in tools
    ]
    return [{"function_declarations": declarations}]
