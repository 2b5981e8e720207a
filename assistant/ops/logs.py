"""Structured logs for compaction and cleanup: one line per event on the
"assistant.events" logger.

    log_event("tool_results", conversation_id=7, tokens_before=41200,
              tokens_after=9100, messages_affected=12, duration_ms=840)

emits `event=tool_results conversation_id=7 tokens_before=41200 ...` as the
message and the same fields as a dict in `record.event` (for a JSON
formatter). Only identifiers, counts and short labels belong here: never
message content, summaries, prompts or keys. Fields with those names are
refused, and string values are cut to a short label.
"""

from __future__ import annotations

import logging
import re
from typing import Any

logger = logging.getLogger("assistant.events")

# Names that would carry conversation text or secrets: a programming error.
_FORBIDDEN_FIELDS = frozenset(
    {"content", "text", "summary", "prompt", "api_key", "key", "secret", "arguments"}
)
_MAX_LABEL_CHARS = 80
_BARE = re.compile(r"^[A-Za-z0-9_.:/@+-]*$")


def _format_value(value: Any) -> str:
    if value is None or isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    text = str(value)[:_MAX_LABEL_CHARS]
    if text and _BARE.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def event_fields(kind: str, **fields: Any) -> dict[str, Any]:
    forbidden = sorted(set(fields) & _FORBIDDEN_FIELDS)
    if forbidden:
        raise TypeError(f"log_event() must not log {', '.join(forbidden)}")
    values: dict[str, Any] = {"event": kind}
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, str):
            value = value[:_MAX_LABEL_CHARS]
        elif not isinstance(value, bool | int | float):
            value = str(value)[:_MAX_LABEL_CHARS]
        values[name] = value
    return values


def log_event(kind: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event: `kind` (e.g. "tool_results", "purge_deleted") with
    conversation_id, tokens_before, tokens_after, duration_ms, counts...
    None values are left out."""
    values = event_fields(kind, **fields)  # refuses content fields even when not logging
    if not logger.isEnabledFor(level):
        return
    message = " ".join(f"{name}={_format_value(value)}" for name, value in values.items())
    logger.log(level, message, extra={"event": values})
