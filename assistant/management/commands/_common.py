"""Shared by the operator commands: look a conversation up by the id given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from assistant.history import MAX_ID
from assistant.models import Conversation


def get_conversation(raw_id: str) -> Conversation:
    """The conversation with this id, or a CommandError that says why not."""
    try:
        conversation_id = int(str(raw_id).strip())
    except ValueError:
        raise CommandError(f"Conversation id must be an integer, got {raw_id!r}.") from None
    if conversation_id < 1:
        raise CommandError(f"Conversation id must be positive, got {conversation_id}.")
    if conversation_id > MAX_ID:
        raise CommandError(f"Conversation {conversation_id} does not exist.")
    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is None:
        raise CommandError(f"Conversation {conversation_id} does not exist.")
    return conversation


def refused_as_command_error(check: Callable[[Any], None], value: Any) -> None:
    """Run a service's own check of an option's value; its refusal as a CommandError."""
    try:
        check(value)
    except ValidationError as error:
        raise CommandError(" ".join(error.messages)) from None
