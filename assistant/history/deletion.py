"""Soft delete: a deleted conversation is marked (`deleted_at`) and kept for
the purge retention, when the scheduled purge removes it with its in-use
checks (assistant.cleanup.jobs). Until then it can be restored."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone

from assistant.models import Conversation
from assistant.window import require_saved


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


def mark_deleted(conversation_ids: Iterable[int]) -> int:
    """Mark the live ones among these conversations deleted; returns how many.
    Nothing else changes: forks keep their parent until the purge."""
    ids = _conversation_ids(conversation_ids)
    return Conversation.objects.filter(pk__in=ids, deleted_at=None).update(
        deleted_at=timezone.now()
    )


def _conversation_ids(ids: Any) -> list[int]:
    return validated_ids(ids, "conversation_ids", "invalid_conversation_ids")
