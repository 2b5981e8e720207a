"""Appending to a conversation's history, with validation at the door.

Everything that enters a conversation goes through `add_message`, so every
stored message is well-formed: later code (compaction, context building,
provider conversion) never has to defend against a malformed row.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, JSONField, OuterRef
from django.db.models.expressions import RawSQL
from django.utils import timezone

from assistant import providers as llm
from assistant.history.arguments import check_known
from assistant.history.deletion import deleted_error, live
from assistant.history.fields import (
    check_content,
    check_size,
    checked_json,
    checked_name,
    number_too_long,
    too_deep,
)
from assistant.models import ONE_RESULT_PER_CALL, Conversation, Message, document_of
from assistant.ops import telemetry
from assistant.providers import (
    block_tokens,
    media_rates,
    new_tool_call_id,
    telemetry_name,
    validated,
)
from assistant.settings.conf import compaction_config
from assistant.text import blocks_tokens, estimate_message_tokens, has_media, validate_blocks
from assistant.window import add_to_size, chat_model, measure_size, require_saved

_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_CALL_KEYS = {"id", "name", "arguments"}
_CALL_WITH_ID = (
    "jsonb_path_query_first(tool_calls, '$[*] ? (@.id == $id)', jsonb_build_object('id', %s::text))"
)
# The columns' own limits: PositiveIntegerField on PostgreSQL, CharField(max_length=255).
_MAX_COUNT = 2**31 - 1
_NEEDS_CONTENT = (Message.Role.USER, Message.Role.SYSTEM)
_TOOL_RESULT_FIELDS = ("tool_call_id", "tool_name", "tool_arguments")
_FIELDS = {
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "tool_arguments",
    "metadata",
    "blocks",
    "provider",
    "model",
    "provider_compaction",
    *_USAGE_FIELDS,
}
_ANSWERED_BY = {"provider": 32, "model": 255}  # Message's columns and their lengths


def add_message(conversation: Conversation, role: str, content: str = "", **fields: Any) -> Message:
    """Validate and append one message; raises ValidationError and saves
    nothing when the message is malformed."""
    require_saved(conversation)
    checked = validated_fields(role, fields)
    check_content("Message content", content)
    metadata, tool_calls, blocks = checked["metadata"], checked["tool_calls"], checked["blocks"]
    _require_something(role, content, blocks)
    usage = {name: checked[name] for name in _USAGE_FIELDS}
    compaction = checked["provider_compaction"]
    answered_by = {name: checked[name] for name in _ANSWERED_BY}

    tool_fields = _tool_result_fields(conversation, fields) if role == "tool" else {}
    media_tokens = blocks_tokens(blocks, media_rates(llm.provider_name()))
    estimate = estimate_message_tokens(content, tool_calls) + media_tokens
    estimate += block_tokens(compaction)
    message = Message(
        conversation=conversation,
        role=role,
        content=content,
        tool_calls=tool_calls,
        blocks=blocks,
        blocks_tokens=media_tokens,
        metadata=metadata,
        provider_compaction=compaction,
        token_estimate=estimate,
        original_token_estimate=estimate,
        **tool_fields,
        **usage,
        **answered_by,
    )
    if connection.vendor == "postgresql":
        # search_history's document, in the INSERT itself (assistant.recall).
        message.search_vector = document_of(content)
    _insert(conversation, message)
    if not add_to_size(live(conversation.pk), message, updated_at=timezone.now()):
        _store_measured_size(conversation, message)
    if role == Message.Role.ASSISTANT and message.input_tokens is not None:
        _record_usage(message, metadata)
    return message


def validated_fields(role: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The message's fields (add_message's keywords but the content) checked, with no
    query, normalized: what add_message stores of them. Entry points that store a message
    only after a paid call (chat_step, record_response) check theirs here first, so a bad
    field is refused before the call. An unknown field is `unknown_field`."""
    check_known(fields, _FIELDS, "add_message")
    _validate_role(role)
    if role != Message.Role.TOOL:
        _check_no_tool_fields(role, fields)
    blocks = validate_blocks(role, fields.get("blocks"), compaction_config().MAX_CONTENT_BYTES)
    return {
        "metadata": _validated_metadata(fields.get("metadata")),
        "tool_calls": _validated_tool_calls(role, fields.get("tool_calls")),
        "blocks": blocks,
        **{name: _validated_count(name, fields.get(name)) for name in _USAGE_FIELDS},
        "provider_compaction": validated(fields.get("provider_compaction")),
        **{name: _validated_name(name, fields.get(name)) for name in _ANSWERED_BY},
    }


def _validate_role(role: str) -> None:
    if role not in Message.Role.values:
        expected = ", ".join(Message.Role.values)
        message = f"Unknown role {role!r}: expected one of {expected}."
        raise ValidationError(message, code="invalid_role")


def _require_something(role: str, content: str, blocks: list | None) -> None:
    # A model answer is stored as it came, even empty (Claude may end a turn with only
    # thinking): the converters leave it out. An empty user or system message is a bug.
    if role in _NEEDS_CONTENT and not content.strip() and not has_media(blocks):
        raise ValidationError(
            f"An empty {role} message (no text, no image or document) cannot be stored.",
            code="empty_message",
        )


def _record_usage(message: Message, metadata: dict[str, Any]) -> None:
    """The token usage of a recorded chat call, for telemetry."""
    model = message.model or chat_model(metadata)
    telemetry.token_usage(
        "chat",
        telemetry_name(message.provider or llm.provider_name(), model),
        model,
        prompt=message.prompt_tokens or 0,  # not None: input_tokens is set
        output=message.output_tokens or 0,
        cache_read=message.cache_read_tokens or 0,
        cache_write=message.cache_write_tokens or 0,
    )


def _insert(conversation: Conversation, message: Message) -> None:
    """One INSERT, with no transaction of ours (the caller then adds the message to the
    stored size in one UPDATE: additions commute). Inside the caller's transaction a
    savepoint keeps that transaction usable when the insert is refused."""
    try:
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            message.save(force_insert=True)
    except IntegrityError as error:
        # Another writer stored this call's result between our check and our insert.
        if message.role == Message.Role.TOOL and _is_duplicate_result(error):
            raise _duplicate_result(message.tool_call_id) from None
        if not live(conversation.pk).exists():  # purged meanwhile
            raise deleted_error(conversation.pk) from None
        raise


def _store_measured_size(conversation: Conversation, message: Message) -> None:
    """The admin list's figure, with the message just stored, when it could not be
    added to the stored one: the window measured under the row's lock, so that of
    concurrent writers the last to measure counts every message. A soft-deleted (or
    purged) conversation takes no message: the one just inserted is removed."""
    rows = live(conversation.pk)
    with transaction.atomic():
        # The lock taken by a write first: SQLite (the demo's database) cannot turn a
        # read lock into a write lock while another connection waits to write.
        if rows.update(updated_at=timezone.now()):
            size, estimate, counted = measure_size(conversation.pk)
            rows.update(context_tokens=size, context_estimate=estimate, context_counted=counted)
            return
    Message.objects.filter(pk=message.pk).delete()
    raise deleted_error(conversation.pk)


def _check_no_tool_fields(role: str, fields: dict[str, Any]) -> None:
    """The fields of a tool result on another message are a host's bug, refused
    rather than dropped (None or empty is no value)."""
    given = [name for name in _TOOL_RESULT_FIELDS if fields.get(name) not in (None, "", {})]
    if given:
        raise ValidationError(
            f"A {role} message does not take {', '.join(given)}: only a tool message "
            "answers a tool call.",
            code="tool_fields_on_non_tool",
        )


def check_results_wanted(conversation: Conversation, call_ids: list[str]) -> None:
    """Each id names a call of this conversation still waiting for its result, once:
    what add_message would refuse of these tool results, refused before any tool runs
    (answer_tool_calls)."""
    for index, call_id in enumerate(call_ids):
        checked_name("tool_call_id", call_id)
        if call_id in call_ids[:index]:
            raise _duplicate_result(call_id)
        calls = _calls_with_id(conversation, call_id)
        if not calls:
            raise _unknown_call(call_id)
        if all(answered for _, _, answered in calls):
            raise _duplicate_result(call_id)


def _validated_metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ValidationError(
            f"Message metadata must be a JSON object, got {type(metadata).__name__}.",
            code="invalid_metadata",
        )
    size = checked_json("Message metadata", metadata, "invalid_metadata")
    check_size("Message metadata", size, "MAX_METADATA_BYTES", "metadata_too_large")
    return metadata


def _validated_name(name: str, value: Any) -> str:
    """Message.provider or Message.model: who answered, as its wire names it."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > _ANSWERED_BY[name] or "\x00" in value:
        raise ValidationError(
            f"{name} must be a string of at most {_ANSWERED_BY[name]} characters.",
            code=f"invalid_{name}",
        )
    return value


def _validated_count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise ValidationError(
            f"{name} must be an integer from 0 to {_MAX_COUNT}.", code="invalid_usage"
        )
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
    limit = compaction_config().MAX_TOOL_CALLS
    if len(tool_calls) > limit:
        raise ValidationError(
            f"{len(tool_calls)} tool calls in one message, over the maximum of {limit} "
            "(ASSISTANT_COMPACTION['MAX_TOOL_CALLS']).",
            code="too_many_tool_calls",
        )
    normalized, seen, size = [], set(), 0
    for index, call in enumerate(tool_calls):
        if not isinstance(call, dict) or not {"name", "arguments"} <= set(call) <= _CALL_KEYS:
            raise ValidationError(
                f"tool_calls[{index}] must be an object with id, name and arguments.",
                code="invalid_tool_calls",
            )
        # A Gemini function call may come without an id (None or no key): give it one, so
        # its result can name it (the caller reads it back from message.tool_calls). An
        # empty or blank id is a malformed one, refused below.
        call_id = call.get("id")
        call_id = checked_name(
            f"tool_calls[{index}].id", new_tool_call_id() if call_id is None else call_id
        )
        name = checked_name(f"tool_calls[{index}].name", call["name"])
        if call_id in seen:
            raise ValidationError(
                f"tool_calls has a duplicate id {call_id!r}.", code="duplicate_tool_call_id"
            )
        seen.add(call_id)
        arguments = _parse_arguments(index, call)
        where = f"tool_calls[{index}].arguments"
        size += checked_json(where, arguments, "invalid_tool_arguments")
        size += len(call_id.encode()) + len(name.encode())
        normalized.append({"id": call_id, "name": name, "arguments": arguments})
    check_size("tool_calls", size, "MAX_TOOL_CALLS_BYTES", "tool_calls_too_large")
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
        except ValueError:  # a number longer than Python converts (sys.get_int_max_str_digits)
            raise number_too_long(
                f"tool_calls[{index}].arguments", "invalid_tool_arguments"
            ) from None
        except RecursionError:
            raise too_deep(f"tool_calls[{index}].arguments") from None
    if not isinstance(arguments, dict):
        raise ValidationError(
            f"tool_calls[{index}].arguments must be a JSON object.", code="invalid_tool_arguments"
        )
    return arguments


def _tool_result_fields(conversation: Conversation, fields: dict[str, Any]) -> dict[str, Any]:
    """A tool result answers the latest call of this conversation with its id
    that has no result yet (a model may reuse an id once its first call was
    answered); its tool name and arguments are taken from that call."""
    call_id = fields.get("tool_call_id") or ""
    if not isinstance(call_id, str) or not call_id.strip():
        raise ValidationError("A tool message needs a tool_call_id.", code="missing_tool_call_id")
    checked_name("tool_call_id", call_id)
    calls = _calls_with_id(conversation, call_id)
    if not calls:
        raise _unknown_call(call_id)
    unanswered = [(message_id, call) for message_id, call, answered in calls if not answered]
    if not unanswered:
        raise _duplicate_result(call_id)
    message_id, call = unanswered[0]
    tool_name = fields.get("tool_name") or call["name"]
    if tool_name != call["name"]:
        raise ValidationError(
            f"tool_name {tool_name!r} does not match the call's name {call['name']!r}.",
            code="tool_name_mismatch",
        )
    if not _same_arguments(fields.get("tool_arguments"), call["arguments"]):
        raise ValidationError(
            f"tool_arguments do not match the arguments of call {call_id!r} "
            "(leave them out: they are taken from the call).",
            code="tool_arguments_mismatch",
        )
    return {
        "tool_call_id": call_id,
        "tool_call_message_id": message_id,
        "tool_name": tool_name,
        "tool_arguments": call["arguments"],
    }


def _same_arguments(given: Any, called: dict[str, Any]) -> bool:
    """Whether a tool result's tool_arguments (None: not given; an object, or its
    JSON text) are its call's."""
    if given is None:
        return True
    if isinstance(given, str):
        try:
            given = json.loads(given)
        except (ValueError, RecursionError):
            return False
    return given == called


def _calls_with_id(
    conversation: Conversation, call_id: str
) -> list[tuple[int, dict[str, Any], bool]]:
    """(assistant message id, call, whether it has a result) for every call with
    this id, newest first: one query."""
    result = Message.objects.filter(tool_call_message_id=OuterRef("id"), tool_call_id=call_id)
    messages = (
        Message.objects.filter(
            conversation=conversation, role=Message.Role.ASSISTANT, tool_calls__isnull=False
        )
        .annotate(answered=Exists(result))
        .order_by("-id")
    )
    if connection.vendor == "postgresql":
        # Only the matching call leaves the database, not a message's whole list of calls
        # (up to MAX_TOOL_CALLS_BYTES, read again for every one of its results).
        matching = messages.filter(tool_calls__contains=[{"id": call_id}]).annotate(
            call=RawSQL(_CALL_WITH_ID, (call_id,), output_field=JSONField())
        )
        return list(matching.values_list("id", "call", "answered"))
    return [
        (message_id, call, answered)
        for message_id, tool_calls, answered in messages.values_list(
            "id", "tool_calls", "answered"
        ).iterator()
        for call in tool_calls
        if call["id"] == call_id
    ]


def _unknown_call(call_id: str) -> ValidationError:
    return ValidationError(
        f"tool_call_id {call_id!r} matches no earlier assistant tool call in this conversation.",
        code="unknown_tool_call_id",
    )


def _duplicate_result(call_id: str) -> ValidationError:
    return ValidationError(
        f"Tool call {call_id!r} already has a result.", code="duplicate_tool_result"
    )


def _is_duplicate_result(error: IntegrityError) -> bool:
    diag = getattr(error.__cause__, "diag", None)
    if diag is not None:  # PostgreSQL names the constraint
        return diag.constraint_name == ONE_RESULT_PER_CALL
    return "tool_call_message_id" in str(error)  # SQLite names its columns
