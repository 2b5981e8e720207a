"""Content blocks as the real APIs check them, for the fake provider: thinking blocks
(signed by the server, required at the start of the assistant turn whose tool results
are being sent while thinking is enabled) and images and documents, with the real
error wordings."""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from assistant.text import sniff_media_type

#: The image media types Anthropic accepts.
ANTHROPIC_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
#: Anthropic's error text when thinking blocks are missing from a tool turn.
ANTHROPIC_THINKING_REQUIRED = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
#: Gemini's error text for image bytes it cannot read.
GEMINI_BAD_IMAGE = "Provided image is not valid."
#: The media types Gemini accepts inline.
GEMINI_MEDIA_TYPES = (
    "image/png",
    "image/jpeg",
    "image/webp",
    "image/heic",
    "image/heif",
    "application/pdf",
    "text/plain",
)

#: The media types the fake recognises from their bytes.
SNIFFED = ("image/png", "image/jpeg", "image/webp", "application/pdf")


def signature(thinking: str) -> str:
    """The fake server's signature of a thinking text: any edit breaks it."""
    return "fake-sig-" + hashlib.sha256(thinking.encode()).hexdigest()[:32]


def thinking_block(thinking: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": thinking, "signature": signature(thinking)}


def decoded(data: Any) -> bytes | None:
    """Standard or URL-safe base64 (both APIs take either), else None."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError, TypeError):
        pass
    try:
        return base64.urlsafe_b64decode(data)
    except (binascii.Error, ValueError, TypeError):
        return None


def _anthropic_media_problem(where: str, block: dict[str, Any]) -> str | None:
    source = block.get("source") or {}
    if block.get("type") != "image" or source.get("type") != "base64":
        return None
    media_type = source.get("media_type")
    if media_type not in ANTHROPIC_IMAGE_TYPES:
        allowed = ", ".join(f"'{t}'" for t in ANTHROPIC_IMAGE_TYPES[:-1])
        return (
            f"{where}.image.source.base64.media_type: Input should be {allowed} or "
            f"'{ANTHROPIC_IMAGE_TYPES[-1]}'"
        )
    raw = decoded(source.get("data"))
    if raw is None or sniff_media_type(raw) != media_type:
        return (
            f"{where}.image.source.base64.data: "
            f"Image does not match the provided media type {media_type}"
        )
    return None


def anthropic_content_problem(body: Any) -> str | None:
    """What the Messages API would refuse in the request's content blocks, or None."""
    messages = (body or {}).get("messages") or []
    for index, message in enumerate(messages):
        blocks = message.get("content")
        if isinstance(blocks, str):
            continue
        for position, block in enumerate(blocks or []):
            where = f"messages.{index}.content.{position}"
            inner = block.get("content") if block.get("type") == "tool_result" else None
            nested = [
                (f"{where}.tool_result.content.{i}", b)
                for i, b in enumerate(inner if isinstance(inner, list) else [])
            ]
            for place, candidate in [(where, block), *nested]:
                problem = _anthropic_media_problem(place, candidate)
                if problem:
                    return problem
            if block.get("type") == "thinking" and block.get("signature") != signature(
                block.get("thinking", "")
            ):
                return f"{where}: Invalid `signature` in `thinking` block"
    if (body.get("thinking") or {}).get("type") == "enabled":
        return _missing_thinking(messages)
    return None


def _missing_thinking(messages: list[dict[str, Any]]) -> str | None:
    """With thinking on, the assistant turn whose tool results end the request must start
    with its thinking block."""
    if len(messages) < 2 or messages[-1].get("role") != "user":
        return None
    last = messages[-1].get("content")
    if isinstance(last, str) or not any(b.get("type") == "tool_result" for b in last or []):
        return None
    index = len(messages) - 2
    first = (messages[index].get("content") or [{}])[0]
    if first.get("type") in ("thinking", "redacted_thinking"):
        return None
    return ANTHROPIC_THINKING_REQUIRED.format(index=index, found=first.get("type"))


def _field(value: dict[str, Any], camel: str, snake: str) -> Any:
    """Proto JSON takes either spelling of a field name; the SDK sends some of each."""
    return value.get(camel, value.get(snake))


def gemini_content_problem(body: Any) -> str | None:
    """What generateContent would refuse in the request's inline and file data, or None."""
    for content in (body or {}).get("contents") or []:
        for part in content.get("parts") or []:
            inline = _field(part, "inlineData", "inline_data")
            if inline is not None:
                media_type = _field(inline, "mimeType", "mime_type")
                raw = decoded(inline.get("data"))
                if media_type not in GEMINI_MEDIA_TYPES or raw is None:
                    return GEMINI_BAD_IMAGE
                if media_type in SNIFFED and sniff_media_type(raw) != media_type:
                    return GEMINI_BAD_IMAGE
            file_data = _field(part, "fileData", "file_data")
            if file_data is not None:
                uri = _field(file_data, "fileUri", "file_uri") or ""
                if not uri.startswith(("https://", "http://", "gs://")):
                    return "Invalid file_data: file_uri is required."
    return None
