"""The one place where neutral messages become provider request shapes.

Neutral message: {"role": "user"|"assistant"|"tool", "content": str,
"tool_calls": [{"id", "name", "arguments"}] (assistant), "tool_call_id", "tool_name" (tool)}.
"""

from __future__ import annotations

from typing import Any

EPHEMERAL = {"type": "ephemeral"}
MAX_CACHE_BREAKPOINTS = 4


def _anthropic_blocks(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    role = message["role"]
    content = message.get("content") or ""
    if role == "tool":
        block = {
            "type": "tool_result",
            "tool_use_id": message["tool_call_id"],
            "content": content,
        }
        return "user", [block]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
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
    system: str, summaries: list[str], messages: list[dict[str, Any]]
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
    for message in messages:
        role, blocks = _anthropic_blocks(message)
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
    if converted:
        converted[-1]["content"][-1]["cache_control"] = EPHEMERAL
    return {"system": system_blocks, "messages": converted}


def to_gemini(system: str, summaries: list[str], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """{"system_instruction": str, "contents": [...]} in google-genai's dict form."""
    instruction = "\n\n".join(part for part in [system, *summaries] if part)
    contents: list[dict[str, Any]] = []
    for message in messages:
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
                }
            ]
        else:
            gemini_role = "model" if role == "assistant" else "user"
            parts = [{"text": content}] if content else []
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
    return {"system_instruction": instruction, "contents": contents}


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
