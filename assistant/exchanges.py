"""The post-exchange pipeline, run by a worker after each completed exchange."""

from __future__ import annotations

import logging

from django.db.models import F

from assistant.models import Conversation

logger = logging.getLogger(__name__)


def process_exchange(conversation_id: int) -> bool:
    """Run the post-exchange work for a conversation; idempotent. Returns
    False when the conversation no longer exists (deleted since)."""
    if not Conversation.objects.filter(pk=conversation_id).exists():
        logger.info("post_exchange_skipped conversation=%s reason=missing", conversation_id)
        return False
    # Record which exchange was processed; the sweep compares the two stamps.
    Conversation.objects.filter(pk=conversation_id).update(
        post_exchange_done_at=F("last_exchange_at")
    )
    logger.info("post_exchange_done conversation=%s", conversation_id)
    return True
