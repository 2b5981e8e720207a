"""The post-exchange pipeline, run by a worker after each completed exchange:
compact consumed tool results, stub duplicates, and pre-build the next
window summary when the context nears the trigger. Idempotent."""

from __future__ import annotations

import logging

from assistant.compaction import compact_tool_results
from assistant.events import stopwatch
from assistant.logs import log_event
from assistant.models import Conversation
from assistant.summaries import prebuild_window_summary

logger = logging.getLogger(__name__)


def process_exchange(conversation_id: int) -> bool:
    """Returns False when the conversation is gone or soft-deleted."""
    conversation = Conversation.objects.filter(pk=conversation_id, deleted_at__isnull=True).first()
    if conversation is None:
        log_event("post_exchange_skipped", conversation_id=conversation_id, reason="missing")
        return False
    exchange_stamp = conversation.last_exchange_at
    with stopwatch() as elapsed:
        compacted = compact_tool_results(conversation)
        prebuilt = prebuild_window_summary(conversation)
    # Record which exchange was processed; the sweep compares the two stamps.
    Conversation.objects.filter(pk=conversation_id).update(post_exchange_done_at=exchange_stamp)
    log_event(
        "post_exchange_done",
        conversation_id=conversation_id,
        compacted=compacted,
        prebuilt=prebuilt,
        duration_ms=elapsed.ms,
    )
    return True
