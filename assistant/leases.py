"""The summary lease: one summary generation per conversation at a time.

Claimed with a conditional UPDATE (free or expired), held with no open
transaction and no row lock while the LLM runs, and honoured on write: the
result is stored only WHERE the token is still ours. It survives a killed
holder (it expires) and a Redis restart (it lives in PostgreSQL).
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from assistant.conf import compaction_config
from assistant.models import Conversation


def claim_summary_lease(conversation_id: int, seconds: int | None = None) -> uuid.UUID | None:
    token = uuid.uuid4()
    now = timezone.now()
    duration = seconds or compaction_config().SUMMARY_LEASE_SECONDS
    claimed = Conversation.objects.filter(
        Q(summary_lease_token__isnull=True) | Q(summary_lease_expires_at__lt=now),
        pk=conversation_id,
    ).update(summary_lease_token=token, summary_lease_expires_at=now + timedelta(seconds=duration))
    return token if claimed == 1 else None


def holding(conversation_id: int, token: uuid.UUID):
    """The conversation row, only while `token` still holds its lease."""
    return Conversation.objects.filter(pk=conversation_id, summary_lease_token=token)


def release_summary_lease(conversation_id: int, token: uuid.UUID) -> bool:
    return (
        holding(conversation_id, token).update(
            summary_lease_token=None, summary_lease_expires_at=None
        )
        == 1
    )


def wait_for_lease(conversation_id: int, timeout: float | None = None) -> bool:
    """Wait until nobody holds a live lease on the conversation; True if free."""
    deadline = time.monotonic() + (
        compaction_config().SUMMARY_WAIT_SECONDS if timeout is None else timeout
    )
    delay = 0.05
    while True:
        busy = Conversation.objects.filter(
            pk=conversation_id,
            summary_lease_token__isnull=False,
            summary_lease_expires_at__gte=timezone.now(),
        ).exists()
        if not busy:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def release_expired_leases() -> int:
    """Clear leases whose holder died; claiming already ignores them, this
    keeps the columns honest for the admin and reports."""
    return Conversation.objects.filter(
        summary_lease_token__isnull=False, summary_lease_expires_at__lt=timezone.now()
    ).update(summary_lease_token=None, summary_lease_expires_at=None)
