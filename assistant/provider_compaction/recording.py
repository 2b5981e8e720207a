"""The provider's own compaction, stored (docs/provider-compaction.rst): its block or
item on the message that carried it, its event, and the window's size after it.

The event prices the compaction (its own usage as the summarizer's, with the model
that made it, so the conversation's cost counts it, assistant.cost.pricing) and shows
the admin where the provider compacted; a failed one (no summary) is recorded too.
The messages before a live compaction are never changed: the window starts at it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F

from assistant.history import record_compaction
from assistant.models import CompactionEvent, Message
from assistant.providers import Record, block_tokens, validated
from assistant.window import refresh_size


def attach(message: Message, stored: dict[str, Any]) -> None:
    """Put an on-demand compaction on `message`, the first one it does not summarize:
    requests start with the block, in place of everything before it."""
    stored = validated(stored) or {}
    Message.objects.filter(pk=message.pk).update(
        provider_compaction=stored,
        token_estimate=F("token_estimate") + block_tokens(stored),
    )
    message.provider_compaction = stored
    refresh_size(message.conversation_id)


def record_event(message: Message, stored: dict[str, Any], *, model: str, before: int) -> None:
    """The event of a compaction carried by `message`: its kind (made, or failed with
    no summary), the messages it summarized, and its own usage, priced as a summary."""
    record = Record.of(stored)
    usage = record.usage
    summarized = Message.objects.filter(
        conversation_id=message.conversation_id, id__lt=message.pk
    ).exclude(role=Message.Role.SYSTEM)
    after = message.prompt_tokens if not record.on_demand else None
    record_compaction(
        message.conversation_id,
        CompactionEvent.Kind.PROVIDER if record.live else CompactionEvent.Kind.PROVIDER_FAILED,
        tokens_before=usage.prompt_tokens if usage else before,
        tokens_after=after or block_tokens(stored),
        messages_affected=summarized.count() if record.live else 0,
        duration_ms=0,
        summarizer_model=model,
        summarizer_input_tokens=usage.prompt_tokens if usage else 0,
        summarizer_output_tokens=usage.output_tokens if usage else 0,
        details={
            "message_id": message.pk,
            "wire": record.wire,
            "on_demand": record.on_demand,
            "summarizer_cache_read_tokens": usage.cache_read_tokens if usage else 0,
            "summarizer_cache_write_tokens": usage.cache_write_tokens if usage else 0,
        },
    )
