"""Content blocks besides a message's text: thinking, images, documents.

Blocks arrive in Anthropic's shapes, which are also our neutral form:

- on assistant messages, `{"type": "thinking", "thinking", "signature"}` and
  `{"type": "redacted_thinking", "data"}`, stored and sent back verbatim;
- on user messages and tool results, `{"type": "image", "source": ...}` and
  `{"type": "document", "source": ..., "title"?}`, the source being
  `{"type": "base64", "media_type", "data"}`, `{"type": "url", "url"}` or, for a
  document, `{"type": "text", "media_type": "text/plain", "data"}`.

This module validates them (a `ValidationError` with a code, before anything is
stored), estimates their tokens by each provider's published rules, and makes
the placeholders that stand for old images and documents once compacted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError

from assistant.text.tokens import estimate_tokens

# A model's thinking, stored to be sent back as received: Anthropic's thinking and
# redacted_thinking blocks, the Responses API's reasoning items ({"type": "reasoning",
# "item": <the output item>}). Each wire sends back its own kind only.
THINKING_TYPES = frozenset({"thinking", "redacted_thinking", "reasoning"})
MEDIA_TYPES = frozenset({"image", "document"})
ALLOWED = {
    "assistant": THINKING_TYPES,
    "user": MEDIA_TYPES,
    "tool": MEDIA_TYPES,
    "system": frozenset(),
}
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
PDF = "application/pdf"
# Anthropic's per-request image limit; one message never needs more.
MAX_BLOCKS_PER_MESSAGE = 100

# A URL source is not fetched: its size is unknown. Count the largest image Anthropic
# accepts unscaled (1092 x 1092) and a 10-page document.
UNKNOWN_IMAGE_SIZE = (1092, 1092)
UNKNOWN_DOCUMENT_PAGES = 10

_SOURCE_KEYS = {"base64": {"type", "media_type", "data"}, "url": {"type", "url"}}
_TEXT_SOURCE_KEYS = {"type", "media_type", "data"}
_BLOCK_KEYS = {
    "thinking": ({"type", "thinking", "signature"}, set()),
    "redacted_thinking": ({"type", "data"}, set()),
    "reasoning": ({"type", "item"}, set()),
    "image": ({"type", "source"}, set()),
    "document": ({"type", "source"}, {"title"}),
}
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def _invalid(message: str, code: str) -> ValidationError:
    return ValidationError(message, code=code)


# --- validation -----------------------------------------------------------------------


def validate_blocks(role: str, blocks: Any, max_bytes: int) -> list[dict[str, Any]] | None:
    """The blocks, checked and copied with only the keys the providers take; None when
    there are none. Raises ValidationError (with a code) for anything else."""
    if blocks is None or blocks == []:
        return None
    if not isinstance(blocks, list):
        raise _invalid("Content blocks must be a list of objects.", "invalid_blocks")
    if len(blocks) > MAX_BLOCKS_PER_MESSAGE:
        raise _invalid(
            f"A message holds at most {MAX_BLOCKS_PER_MESSAGE} content blocks.", "too_many_blocks"
        )
    validated = [_validated_block(role, i, block, max_bytes) for i, block in enumerate(blocks)]
    total = sum(_stored_bytes(block) for block in validated)
    if total > max_bytes:
        raise _invalid(
            f"The content blocks take {total} bytes, over the {max_bytes}-byte maximum "
            "(ASSISTANT_COMPACTION['MAX_CONTENT_BYTES']).",
            "block_too_large",
        )
    return validated


def _stored_bytes(block: dict[str, Any]) -> int:
    """What a block's data takes (base64 counted as its decoded size)."""
    source = block.get("source") or {}
    if source.get("type") == "base64":
        return len(source["data"]) * 3 // 4
    if block["type"] == "reasoning":
        return len(json.dumps(block["item"]).encode("utf-8"))
    text = source.get("data") or block.get("thinking") or block.get("data") or ""
    return len(text.encode("utf-8"))


def _validated_block(role: str, index: int, block: Any, max_bytes: int) -> dict[str, Any]:
    where = f"Content block {index}"
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _invalid(f"{where} must be an object with a string `type`.", "invalid_blocks")
    kind = block["type"]
    if kind not in _BLOCK_KEYS:
        hint = " (text goes in the message's content)" if kind == "text" else ""
        raise _invalid(
            f"{where} has unknown type {kind!r}{hint}: expected thinking, redacted_thinking, "
            "reasoning, image or document.",
            "unknown_block_type",
        )
    if kind not in ALLOWED.get(role, frozenset()):
        raise _invalid(
            f"{where}: a {role} message cannot hold a {kind} block.", "block_not_allowed"
        )
    required, optional = _BLOCK_KEYS[kind]
    _check_keys(where, block, required, optional)
    if kind == "thinking":
        _check_text(where, block, "thinking", allow_empty=True)
        _check_text(where, block, "signature")
        return {"type": kind, "thinking": block["thinking"], "signature": block["signature"]}
    if kind == "redacted_thinking":
        _check_text(where, block, "data")
        return {"type": kind, "data": block["data"]}
    if kind == "reasoning":
        item = block["item"]
        if not isinstance(item, dict) or item.get("type") != "reasoning":
            raise _invalid(f"{where}: `item` must be a reasoning output item.", "invalid_blocks")
        return {"type": kind, "item": item}
    source = _validated_source(where, kind, block["source"], max_bytes)
    validated = {"type": kind, "source": source}
    if "title" in block:
        _check_text(where, block, "title")
        validated["title"] = block["title"]
    return validated


def _check_keys(where: str, value: dict, required: set[str], optional: set[str]) -> None:
    missing = required - set(value)
    extra = set(value) - required - optional
    if missing or extra:
        problems = [f"missing {', '.join(sorted(missing))}"] if missing else []
        problems += [f"unexpected {', '.join(sorted(extra))}"] if extra else []
        raise _invalid(f"{where}: {'; '.join(problems)}.", "invalid_blocks")


def _check_text(where: str, value: dict, key: str, allow_empty: bool = False) -> None:
    text = value[key]
    if not isinstance(text, str) or (not text and not allow_empty):
        raise _invalid(f"{where}: `{key}` must be a non-empty string.", "invalid_blocks")
    if "\x00" in text:
        raise _invalid(f"{where}: `{key}` contains a NUL byte.", "nul_byte")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid(f"{where}: `{key}` contains a lone surrogate.", "invalid_unicode") from None


def _validated_source(where: str, kind: str, source: Any, max_bytes: int) -> dict[str, Any]:
    source_type = source.get("type") if isinstance(source, dict) else None
    allowed = ("base64", "url", "text") if kind == "document" else ("base64", "url")
    if source_type not in allowed:
        raise _invalid(
            f"{where}: `source.type` must be one of {', '.join(allowed)}.", "invalid_source"
        )
    where = f"{where} source"
    if source_type == "url":
        _check_keys(where, source, _SOURCE_KEYS["url"], set())
        _check_url(where, source["url"])
        return {"type": "url", "url": source["url"]}
    keys = _TEXT_SOURCE_KEYS if source_type == "text" else _SOURCE_KEYS["base64"]
    _check_keys(where, source, keys, set())
    media_type = source["media_type"]
    if source_type == "text":
        if media_type != "text/plain":
            raise _invalid(
                f"{where}: a text document's media_type must be text/plain.",
                "unsupported_media_type",
            )
        _check_text(where, source, "data")
        if len(source["data"].encode("utf-8")) > max_bytes:
            raise _invalid(f"{where}: the document is over {max_bytes} bytes.", "block_too_large")
        return {"type": "text", "media_type": media_type, "data": source["data"]}
    expected = IMAGE_MEDIA_TYPES if kind == "image" else (PDF,)
    if media_type not in expected:
        raise _invalid(
            f"{where}: media_type {media_type!r} is not one of {', '.join(expected)}.",
            "unsupported_media_type",
        )
    raw = _decoded(where, source["data"], max_bytes)
    actual = sniff_media_type(raw)
    if actual != media_type:
        found = f"the data is {actual}" if actual else "the data is not a known format"
        raise _invalid(f"{where}: declared {media_type}, but {found}.", "media_type_mismatch")
    if kind == "image" and image_size(raw) is None:
        raise _invalid(f"{where}: the {media_type} data is truncated or corrupt.", "invalid_image")
    return {"type": "base64", "media_type": media_type, "data": source["data"]}


def _check_url(where: str, url: Any) -> None:
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise _invalid(f"{where}: `url` must be an http(s) URL.", "invalid_url")


def _decoded(where: str, data: Any, max_bytes: int) -> bytes:
    if not isinstance(data, str) or not data:
        raise _invalid(f"{where}: `data` must be a non-empty base64 string.", "invalid_base64")
    if len(data) * 3 // 4 > max_bytes + 2:
        raise _invalid(f"{where}: the data is over {max_bytes} bytes.", "block_too_large")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise _invalid(f"{where}: `data` is not valid base64.", "invalid_base64") from error


# --- what the bytes are -------------------------------------------------------------------


def sniff_media_type(raw: bytes) -> str | None:
    """The media type the data's leading bytes announce, for the types we accept."""
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if raw[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    if raw.startswith(b"%PDF-"):
        return PDF
    return None


def image_size(raw: bytes) -> tuple[int, int] | None:
    """(width, height) from the image's header; None when the header is unreadable."""
    try:
        size = _image_size(raw)
    except (struct.error, IndexError):
        return None
    return size if size and size[0] > 0 and size[1] > 0 else None


def _image_size(raw: bytes) -> tuple[int, int] | None:
    kind = sniff_media_type(raw)
    if kind == "image/png" and raw[12:16] == b"IHDR":
        return struct.unpack(">II", raw[16:24])
    if kind == "image/gif":
        return struct.unpack("<HH", raw[6:10])
    if kind == "image/webp":
        return _webp_size(raw)
    if kind == "image/jpeg":
        return _jpeg_size(raw)
    return None


def _webp_size(raw: bytes) -> tuple[int, int] | None:
    chunk = raw[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(raw[24:27], "little") + 1
        height = int.from_bytes(raw[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L" and raw[20] == 0x2F:
        bits = int.from_bytes(raw[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and raw[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", raw[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _jpeg_size(raw: bytes) -> tuple[int, int] | None:
    position = 2
    while position + 9 < len(raw):
        if raw[position] != 0xFF:
            return None
        marker = raw[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        length = struct.unpack(">H", raw[position + 2 : position + 4])[0]
        # Start-of-frame markers carry the size; C4, C8 and CC are other tables.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", raw[position + 5 : position + 9])
            return width, height
        position += 2 + length
    return None


def pdf_pages(raw: bytes) -> int:
    return max(1, len(_PDF_PAGE.findall(raw)))


# --- token estimates ------------------------------------------------------------------------


def _raw(block: dict[str, Any]) -> bytes | None:
    source = block.get("source") or {}
    if source.get("type") != "base64":
        return None
    return base64.b64decode(source["data"])


@dataclass(frozen=True)
class MediaRates:
    """What images and document pages cost a provider, in tokens: each wire of
    assistant.providers has its own (`Wire.media`)."""

    image_tokens: Callable[[int, int], int]  # (width, height) -> tokens
    pdf_page_tokens: int


def block_tokens(block: dict[str, Any], rates: MediaRates) -> int:
    """Tokens one block costs in a request to a provider with these media `rates`."""
    kind = block["type"]
    if kind == "text":
        return estimate_tokens(block["text"])
    if kind == "thinking":
        return estimate_tokens(block["thinking"])
    if kind == "redacted_thinking":
        return estimate_tokens(block["data"])
    if kind == "reasoning":
        return estimate_tokens(json.dumps(block["item"]))
    raw = _raw(block)
    if kind == "image":
        width, height = (image_size(raw) if raw else None) or UNKNOWN_IMAGE_SIZE
        return rates.image_tokens(width, height)
    if block["source"]["type"] == "text":
        return estimate_tokens(block["source"]["data"])
    pages = pdf_pages(raw) if raw else UNKNOWN_DOCUMENT_PAGES
    return pages * rates.pdf_page_tokens


def blocks_tokens(blocks: list[dict[str, Any]] | None, rates: MediaRates) -> int:
    return sum(block_tokens(block, rates) for block in blocks or [])


# --- compaction -------------------------------------------------------------------------------


def describe(block: dict[str, Any]) -> str:
    """A short name for an image or document: its title or URL, its type, size and a
    fingerprint of its data, so the model (and a reader) can tell which one it was."""
    source = block["source"]
    parts = [block["type"]]
    if block.get("title"):
        parts.append(repr(block["title"]))
    if source["type"] == "url":
        parts.append(source["url"])
        return " ".join(parts)
    parts.append(source["media_type"])
    if source["type"] == "text":
        parts.append(f"{len(source['data']):,} characters")
    else:
        raw = base64.b64decode(source["data"])
        if block["type"] == "image":
            width, height = image_size(raw) or (0, 0)
            parts.append(f"{width}x{height}")
        else:
            pages = pdf_pages(raw)
            parts.append(f"{pages} page{'s' if pages != 1 else ''}")
        parts.append(f"sha256:{hashlib.sha256(raw).hexdigest()[:12]}")
    return " ".join(parts)


def placeholder(block: dict[str, Any], handle_ref: str = "") -> dict[str, Any]:
    named = f" ({handle_ref})" if handle_ref else ""
    return {
        "type": "text",
        "text": f"[{describe(block)} — omitted from the context to save tokens; "
        f"the original is stored{named}]",
    }


def compacted_blocks(
    blocks: list[dict[str, Any]], *, keep_thinking: bool = False, handle_ref: str = ""
) -> list[dict[str, Any]]:
    """What the model sees of an old message's blocks: thinking dropped (as Anthropic's
    API does outside the current turn) unless `keep_thinking`, each image or document a
    placeholder naming it and the handle of its message's original (`handle_ref`)."""
    return [
        placeholder(block, handle_ref) if block["type"] in MEDIA_TYPES else block
        for block in blocks
        if block["type"] in MEDIA_TYPES or keep_thinking
    ]


def attachments_line(blocks: list[dict[str, Any]] | None) -> str:
    """What a summarizer is told of a message's blocks: the images and documents by name
    (or their placeholders); never the thinking, which is not something the model said."""
    names = [
        describe(block) if block["type"] in MEDIA_TYPES else block["text"]
        for block in blocks or []
        if block["type"] not in THINKING_TYPES
    ]
    return f"[attached: {'; '.join(names)}]" if names else ""


def has_media(blocks: list[dict[str, Any]] | None) -> bool:
    return any(block["type"] in MEDIA_TYPES for block in blocks or [])


def current_turn_start(messages: list[dict[str, Any]]) -> int:
    """Index of the neutral message that opened the current turn (the last user message;
    tool results are not user messages): thinking before it is not sent."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "user":
            return index
    return 0
