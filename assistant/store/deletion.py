"""Soft delete: a deleted conversation is marked (`deleted_at`) and kept for
the purge retention, when the scheduled purge removes it with its in-use
checks (assistant.flows.cleanup). Until then it can be restored."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.utils import timezone

from assistant.models import Conversation
from assistant.settings.cleanup import cleanup_config
from assistant.window import require_saved


@dataclass(frozen=True)
class RestoreResult:
    restored: list[int] = field(default_factory=list)
    # Deleted longer ago than the retention: the purge may remove them at any time.
    expired: list[int] = field(default_factory=list)
    not_deleted: list[int] = field(default_factory=list)


def deleted_error(conversation_id: int) -> ValidationError:
    return ValidationError(
        f"Conversation {conversation_id} is deleted; it cannot be changed (restore it first).",
        code="conversation_deleted",
    )


def live(conversation_id: int) -> QuerySet[Conversation]:
    """The conversation's row if it is neither deleted nor purged: a conditional
    UPDATE on it changes nothing once it is."""
    return Conversation.objects.filter(pk=conversation_id, deleted_at__isnull=True)


def saved_id(conversation: Conversation) -> int:
    """The id of a saved Conversation (`require_saved`), without a query: the
    caller finds it live with the query it makes anyway."""
    require_saved(conversation)
    return conversation.pk


def require_live(conversation: Conversation) -> None:
    """The guard every entry point that changes a conversation passes: only saved
    conversations that are not deleted (or purged), by one query on the database's
    row, not the caller's copy of it."""
    require_saved(conversation)
    require_live_id(conversation.pk)


def require_live_id(conversation_id: int) -> None:
    """require_live for an id (a task's, a queued action's): one that names no live
    conversation (deleted, purged, never stored) is `conversation_deleted`."""
    if not live(conversation_id).exists():
        raise deleted_error(conversation_id)


def validated_ids(ids: Any, name: str, code: str) -> list[int]:
    """A list of integer ids (any iterable of them but a string), else ValidationError."""
    values = None if isinstance(ids, str | bytes) or not isinstance(ids, Iterable) else list(ids)
    if values is None or any(type(pk) is not int for pk in values):
        raise ValidationError(f"{name} must be a list of ids (integers), got {ids!r}.", code=code)
    return values


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


def mark_deleted(conversation_ids: Iterable[int]) -> int:
    """Mark the live ones among these conversations deleted; returns how many.
    Nothing else changes: forks keep their parent until the purge."""
    ids = _conversation_ids(conversation_ids)
    return Conversation.objects.filter(pk__in=ids, deleted_at=None).update(
        deleted_at=timezone.now()
    )


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


def _conversation_ids(ids: Any) -> list[int]:
    return validated_ids(ids, "conversation_ids", "invalid_conversation_ids")
