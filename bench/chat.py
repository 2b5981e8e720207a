"""How a replay drives the services, as a chat backend does: each neutral
message stored through add_message, each user turn finished by the
post-exchange pipeline (in-process). Used by the bench and by the tests'
replays; imports no peer library. Import after django.setup()."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from assistant import services
from assistant.models import Conversation


def store(conversation: Conversation, message: dict[str, Any], **fields: Any) -> None:
    """One neutral message of a replay, through add_message; an assistant message
    with neither text nor tool calls (a model answer that was all thinking, in
    cc-medgemma) is stored too, as a chat backend stores what the model said."""
    if message.get("tool_calls"):
        fields["tool_calls"] = message["tool_calls"]
    if message["role"] == "tool":
        fields["tool_call_id"] = message["tool_call_id"]
    services.add_message(conversation, message["role"], message["content"], **fields)


def finish_turn(conversation: Conversation) -> None:
    """The end of a user turn: the exchange is stamped and the post-exchange
    pipeline runs, in-process."""
    Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
    services.process_exchange(conversation.pk)
