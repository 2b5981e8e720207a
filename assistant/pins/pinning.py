"""Pinned messages (docs/compaction.rst, "Pinned messages"): a pinned message
is never compacted, stubbed or summarized away. Every later request carries it
verbatim, in place while it is in the verbatim window and then in the pinned
section (assistant.window.context). Pins count against PINNED_MAX_TOKENS: past
it a pin is refused, never dropped."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Sum

from assistant.models import Conversation, Message
from assistant.tool_results import restore_originals
from assistant.window import conversation_config, refresh_size


def pinned_tokens(conversation_id: int) -> int:
    """What the conversation's pins take, by their originals' estimates."""
    pinned = Message.objects.filter(conversation_id=conversation_id, pinned=True)
    return pinned.aggregate(total=Sum("original_token_estimate"))["total"] or 0


def _message(conversation: Conversation, message_id: Any) -> Message:
    if type(message_id) is not int:
        raise ValidationError(
            f"message_id must be an integer id, got {message_id!r}.", code="invalid_message_id"
        )
    message = (
        Message.objects.filter(conversation_id=conversation.pk, pk=message_id)
        .only("id", "role", "pinned", "original_token_estimate", "original_dropped_at")
        .first()
    )
    if message is None:
        raise ValidationError(
            f"Message {message_id} is not in conversation {conversation.pk}.",
            code="message_not_found",
        )
    return message


def pin_message(conversation: Conversation, message_id: Any, pinned: bool = True) -> Message:
    """Pin (or unpin) one message; returns it as stored. A compacted message is
    restored to its original first. Refused with a ValidationError: a message of
    another conversation, a system message (always sent whole), a message whose
    original a retention policy dropped, and a pin past PINNED_MAX_TOKENS."""
    if not isinstance(pinned, bool):
        raise ValidationError(f"pinned must be true or false, got {pinned!r}.", code="invalid")
    with transaction.atomic():
        # One pin at a time per conversation: the budget is checked against the others.
        Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
        message = _message(conversation, message_id)
        changed = message.pinned != pinned
        if changed and pinned:
            _check_pinnable(conversation, message)
            restore_originals(conversation, [message.pk])
        if changed:
            Message.objects.filter(pk=message.pk).update(pinned=pinned)
    if changed:
        refresh_size(conversation.pk)
    return Message.objects.get(pk=message.pk)


def _check_pinnable(conversation: Conversation, message: Message) -> None:
    if message.role == Message.Role.SYSTEM:
        raise ValidationError(
            "A system message is always sent whole: there is nothing to pin.",
            code="system_message",
        )
    if message.original_dropped_at is not None:
        raise ValidationError(
            f"Message {message.pk}'s original was dropped by the retention policy: it "
            "cannot be sent verbatim again.",
            code="original_dropped",
        )
    budget = conversation_config(conversation.pk).PINNED_MAX_TOKENS
    total = pinned_tokens(conversation.pk) + message.original_token_estimate
    if total > budget:
        raise ValidationError(
            f"Pinning message {message.pk} ({message.original_token_estimate} tokens) would "
            f"make the pins {total} tokens, over PINNED_MAX_TOKENS ({budget}): unpin another "
            "message first, or raise the setting.",
            code="pin_budget_exceeded",
        )
