"""Appending to a conversation's history, with validation at the door.

Everything that enters a conversation goes through `add_message`, so every
stored message is well-formed: later code (compaction, context building,
provider conversion) never has to defend against a malformed row.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from assistant.conf import compaction_config
from assistant.models import Conversation, Message
from assistant.tokens import estimate_message_tokens

_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_FIELDS = {"tool_calls", "tool_call_id", "tool_name", "tool_arguments", "metadata", *_USAGE_FIELDS}


def add_message(conversation: Conversation, role: str, content: str = "", **fields: Any) -> Message:
    """Validate and append one message; raises ValidationError and saves
    nothing when the message is malformed."""
    unknown = set(fields) - _FIELDS
    if unknown:
        raise TypeError(f"add_message() got unexpected fields: {', '.join(sorted(unknown))}")
    if role not in Message.Role.values:
        raise ValidationError(
            f"Unknown role {role!r}: expected one of {', '.join(Message.Role.values)}.",
            code="invalid_role",
        )
    _validate_content(content)
    metadata = _validated_metadata(fields.get("metadata"))
    tool_calls = _validated_tool_calls(role, fields.get("tool_calls"))
    usage = {name: _validated_count(name, fields.get(name)) for name in _USAGE_FIELDS}

    with transaction.atomic():
        tool_fields = _tool_result_fields(conversation, role, fields) if role == "tool" else {}
        estimate = estimate_message_tokens(content, tool_calls)
        message = Message.objects.create(
            conversation=conversation,
            role=role,
            content=content,
            tool_calls=tool_calls,
            metadata=metadata,
            token_estimate=estimate,
            original_token_estimate=estimate,
            **tool_fields,
            **usage,
        )
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now())
    return message


def finish_exchange(conversation: Conversation) -> None:
    """Mark an exchange complete and enqueue the post-exchange work once the
    surrounding transaction commits (nothing is enqueued on rollback)."""
    from assistant.queue import enqueue_on_commit
    from assistant.tasks import post_exchange_task

    Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
    enqueue_on_commit(post_exchange_task, conversation.pk)


def _validate_content(content: Any) -> None:
    if not isinstance(content, str):
        raise ValidationError(
            f"Message content must be a string, got {type(content).__name__}.",
            code="invalid_content",
        )
    if "\x00" in content:
        raise ValidationError(
            "Message content contains a NUL byte (\\x00), which cannot be stored; "
            "encode binary tool output (for example as base64) before adding it.",
            code="nul_byte",
        )
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(
            "Message content is not valid Unicode (it contains a lone surrogate).",
            code="invalid_unicode",
        ) from None
    limit = compaction_config().MAX_CONTENT_BYTES
    if size > limit:
        raise ValidationError(
            f"Message content is {size} bytes, over the {limit}-byte maximum "
            "(ASSISTANT_COMPACTION['MAX_CONTENT_BYTES']).",
            code="content_too_large",
        )


def _validated_metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ValidationError(
            f"Message metadata must be a JSON object, got {type(metadata).__name__}.",
            code="invalid_metadata",
        )
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(
            f"Message metadata is not JSON-serializable: {exc}.", code="invalid_metadata"
        ) from None
    return metadata


def _validated_count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{name} must be a non-negative integer.", code="invalid_usage")
    return value


def _validated_tool_calls(role: str, tool_calls: Any) -> list[dict[str, Any]] | None:
    if tool_calls is None or tool_calls == []:
        return None
    if role != Message.Role.ASSISTANT:
        raise ValidationError(
            "Only assistant messages carry tool_calls.", code="invalid_tool_calls"
        )
    if not isinstance(tool_calls, list):
        raise ValidationError(
            "tool_calls must be a list of {id, name, arguments} objects.", code="invalid_tool_calls"
        )
    normalized, seen = [], set()
    for index, call in enumerate(tool_calls):
        if not isinstance(call, dict) or set(call) != {"id", "name", "arguments"}:
            raise ValidationError(
                f"tool_calls[{index}] must be an object with exactly id, name and arguments.",
                code="invalid_tool_calls",
            )
        call_id, name = call["id"], call["name"]
        if not isinstance(call_id, str) or not call_id.strip():
            raise ValidationError(
                f"tool_calls[{index}].id must be a non-empty string.", code="invalid_tool_calls"
            )
        if not isinstance(name, str) or not name.strip():
            raise ValidationError(
                f"tool_calls[{index}].name must be a non-empty string.", code="invalid_tool_calls"
            )
        if call_id in seen:
            raise ValidationError(
                f"tool_calls has a duplicate id {call_id!r}.", code="duplicate_tool_call_id"
            )
        seen.add(call_id)
        normalized.append({"id": call_id, "name": name, "arguments": _parse_arguments(index, call)})
    return normalized


def _parse_arguments(index: int, call: dict[str, Any]) -> dict[str, Any]:
    arguments = call["arguments"]
    if isinstance(arguments, str):
        # Providers stream arguments as a JSON string; store the parsed object.
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValidationError(
                f"tool_calls[{index}].arguments is not valid JSON: {exc.msg}.",
                code="invalid_tool_arguments",
            ) from None
    if not isinstance(arguments, dict):
        raise ValidationError(
            f"tool_calls[{index}].arguments must be a JSON object.", code="invalid_tool_arguments"
        )
    return arguments


def _tool_result_fields(
    conversation: Conversation, role: str, fields: dict[str, Any]
) -> dict[str, Any]:
    """A tool result must answer an earlier tool call of this conversation,
    once; its tool name and arguments are taken from that call."""
    call_id = fields.get("tool_call_id") or ""
    if not isinstance(call_id, str) or not call_id.strip():
        raise ValidationError("A tool message needs a tool_call_id.", code="missing_tool_call_id")
    call = _find_tool_call(conversation, call_id)
    if call is None:
        raise ValidationError(
            f"tool_call_id {call_id!r} matches no earlier assistant tool call "
            "in this conversation.",
            code="unknown_tool_call_id",
        )
    if Message.objects.filter(
        conversation=conversation, role=Message.Role.TOOL, tool_call_id=call_id
    ).exists():
        raise ValidationError(
            f"Tool call {call_id!r} already has a result.", code="duplicate_tool_result"
        )
    tool_name = fields.get("tool_name") or call["name"]
    if tool_name != call["name"]:
        raise ValidationError(
            f"tool_name {tool_name!r} does not match the call's name {call['name']!r}.",
            code="tool_name_mismatch",
        )
    return {"tool_call_id": call_id, "tool_name": tool_name, "tool_arguments": call["arguments"]}


def _find_tool_call(conversation: Conversation, call_id: str) -> dict[str, Any] | None:
    calls = Message.objects.filter(
        conversation=conversation, role=Message.Role.ASSISTANT, tool_calls__isnull=False
    ).order_by("-id")
    if connection.features.supports_json_field_contains:
        calls = calls.filter(tool_calls__contains=[{"id": call_id}])
    # Newest first: a result nearly always answers the latest assistant turn.
    for tool_calls in calls.values_list("tool_calls", flat=True).iterator():
        for call in tool_calls:
            if call["id"] == call_id:
                return call
    return None
