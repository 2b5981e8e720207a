"""How long a deleted conversation is kept, and restoring one within that time
(the purge itself is a cleanup job, assistant.cleanup.jobs)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from assistant.history import validated_ids
from assistant.models import Conversation
from assistant.settings.cleanup import cleanup_config


@dataclass(frozen=True)
class RestoreResult:
    restored: list[int] = field(default_factory=list)
    # Deleted longer ago than the retention: the purge may remove them at any time.
    expired: list[int] = field(default_factory=list)
    not_deleted: list[int] = field(default_factory=list)


def purge_after() -> timedelta | None:
    """How long a deleted conversation is kept before the purge (None: forever)."""
    days = cleanup_config().PURGE_RETENTION_DAYS
    return timedelta(days=days) if days is not None else None


def purge_date(conversation: Conversation) -> datetime | None:
    """When the purge may remove this deleted conversation (None: never)."""
    keep = purge_after()
    if conversation.deleted_at is None or keep is None:
        return None
    return conversation.deleted_at + keep


def restore_deleted(conversation_ids: Iterable[int]) -> RestoreResult:
    """Undelete those deleted within the retention (one conditional UPDATE, so
    a conversation the purge is removing meanwhile is not half-restored)."""
    ids = sorted(set(_conversation_ids(conversation_ids)))
    keep = purge_after()
    within = Q(deleted_at__isnull=False)
    if keep is not None:
        within &= Q(deleted_at__gte=timezone.now() - keep)
    candidates = Conversation.objects.filter(pk__in=ids)
    restorable = list(candidates.filter(within).values_list("pk", flat=True))
    Conversation.objects.filter(pk__in=restorable).filter(within).update(deleted_at=None)
    deleted = set(candidates.filter(deleted_at__isnull=False).values_list("pk", flat=True))
    return RestoreResult(
        restored=sorted(restorable),
        expired=sorted(deleted - set(restorable)),
        not_deleted=sorted(set(ids) - deleted - set(restorable)),
    )


def _conversation_ids(ids: object) -> list[int]:
    return validated_ids(ids, "conversation_ids", "invalid_conversation_ids")
