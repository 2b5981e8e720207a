"""The checks of a stored field's value: what PostgreSQL would refuse (a NUL, a lone
surrogate, a name longer than its column, JSON too deep or not JSON, a number jsonb
would give back changed), refused first with a coded ValidationError. add_message's
(assistant.history.append) and the summaries'."""

from __future__ import annotations

import json
import math
from typing import Any

from django.core.exceptions import ValidationError

from assistant.models import Message
from assistant.settings.conf import compaction_config

# Message.tool_call_id's column: CharField(max_length=255).
MAX_NAME_CHARS = int(Message._meta.get_field("tool_call_id").max_length or 0)


def check_content(what: str, content: Any) -> None:
    """Content add_message would store: a string, storable, within MAX_CONTENT_BYTES."""
    if not isinstance(content, str):
        raise ValidationError(
            f"{what} must be a string, got {type(content).__name__}.", code="invalid_content"
        )
    size = checked_text(what, content)
    check_size(what, size, "MAX_CONTENT_BYTES", "content_too_large")


def checked_name(what: str, value: Any) -> str:
    """An id or a name: a non-blank string that fits its column."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{what} must be a non-empty string.", code="invalid_tool_calls")
    checked_text(what, value)
    if len(value) > MAX_NAME_CHARS:
        raise ValidationError(
            f"{what} is {len(value)} characters, over the maximum of {MAX_NAME_CHARS}.",
            code="value_too_long",
        )
    return value


def checked_text(what: str, text: str) -> int:
    """Its size in UTF-8 bytes, once it is known to be storable: no NUL, no lone surrogate."""
    if "\x00" in text:
        raise ValidationError(
            f"{what} contains a NUL byte (\\x00), which cannot be stored; "
            "encode binary data (for example as base64) before adding it.",
            code="nul_byte",
        )
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(
            f"{what} is not valid Unicode (it contains a lone surrogate).",
            code="invalid_unicode",
        ) from None


def _check_scalar(what: str, item: Any, code: str) -> None:
    """A JSON leaf: a storable string, a finite number the database reads back as
    itself, a bool or None; ValidationError for anything else."""
    if isinstance(item, str):
        checked_text(f"A string in {what}", item)
    elif isinstance(item, float) and not math.isfinite(item):
        raise ValidationError(f"{what} contains {item!r}, which JSON cannot represent.", code=code)
    elif isinstance(item, float) and not _round_trips(item):
        raise ValidationError(
            f"{what} contains {item!r}, which the database would read back as another "
            "value or type (jsonb keeps no exponent and no negative zero): send it as "
            "a string.",
            code=code,
        )
    elif item is not None and not isinstance(item, bool | int | float):
        raise ValidationError(
            f"{what} is not JSON: it contains a {type(item).__name__}.", code=code
        )


def checked_json(what: str, value: Any, code: str) -> int:
    """The size of `value` as JSON in UTF-8 bytes, once every string in it (keys too) is
    storable, every number finite and its nesting within the configured depth. Walks
    without recursion, so no input can raise RecursionError."""
    max_depth = compaction_config().MAX_JSON_DEPTH
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list | tuple) and depth > max_depth:
            raise too_deep(what)
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise ValidationError(
                        f"{what} has a key that is not a string: {key!r}.", code=code
                    )
                checked_text(f"A key in {what}", key)
                pending.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            pending.extend((child, depth + 1) for child in item)
        else:
            _check_scalar(what, item, code)
    try:
        return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    except ValueError:  # an integer too long to write out (sys.get_int_max_str_digits)
        raise number_too_long(what, code) from None


def _round_trips(number: float) -> bool:
    """Whether jsonb gives this float back as the same float: jsonb writes numbers out
    in full, so one Python writes with a positive exponent (1e+16 and up) comes back an
    integer, and -0.0 comes back 0.0."""
    if number == 0:
        return math.copysign(1.0, number) > 0
    return "e+" not in repr(number)


def jsonb_equal(value: Any) -> Any:
    """`value` with each float jsonb would give back changed in the form jsonb gives back
    equal: a float written with a positive exponent is a whole number, so its exact
    integer (int(1e308) == 1e308), and -0.0 is 0.0 (-0.0 == 0.0). For a model's own
    answer, which is stored rather than refused (record_response): the value is kept,
    only the number's spelling changes. Walks without recursion; anything else is
    left for checked_json to judge."""
    root: list[Any] = [value]
    pending: list[tuple[Any, Any]] = [(root, 0)]
    while pending:
        holder, key = pending.pop()
        item = holder[key]
        if isinstance(item, dict):
            holder[key] = item = dict(item)
            pending.extend((item, k) for k in item)
        elif isinstance(item, list | tuple):
            holder[key] = item = list(item)
            pending.extend((item, i) for i in range(len(item)))
        elif isinstance(item, float) and math.isfinite(item) and not _round_trips(item):
            holder[key] = int(item) if item else 0.0
    return root[0]


def number_too_long(what: str, code: str) -> ValidationError:
    return ValidationError(f"{what} holds a number with too many digits to store.", code=code)


def check_size(what: str, size: int, setting: str, code: str) -> None:
    limit = getattr(compaction_config(), setting)
    if size > limit:
        raise ValidationError(
            f"{what} is {size} bytes, over the {limit}-byte maximum "
            f"(ASSISTANT_COMPACTION['{setting}']).",
            code=code,
        )


def too_deep(what: str) -> ValidationError:
    limit = compaction_config().MAX_JSON_DEPTH
    return ValidationError(
        f"{what} is nested more than {limit} levels deep (ASSISTANT_COMPACTION['MAX_JSON_DEPTH']).",
        code="too_deeply_nested",
    )
