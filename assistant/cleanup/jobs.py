"""The services behind the scheduled cleanup jobs (beat) and `manage.py cleanup`.

Every job is idempotent and works in bounded batches: select a batch of ids,
change or delete exactly those (re-checking the condition inside the write,
so a row that changed in between is left alone) in a short transaction, and
report whether work remains. Tasks re-enqueue themselves while it does.

Jobs that only enqueue work (the sweep, fork summaries) change nothing they
could re-select, so they page with a keyset cursor (`after_id`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone

from assistant.history import (
    PARENT_SUMMARY_TASK,
    POST_EXCHANGE_TASK,
    enqueue_on_commit,
    write_state,
)
from assistant.metadata_keys import PENDING_SUMMARY_KEYS, WINDOW_SUMMARY_KEYS
from assistant.models import (
    CompactionEvent,
    Conversation,
    Embedding,
    Message,
    MetadataKeys,
    SummaryVersion,
)
from assistant.ops.logs import log_event
from assistant.settings.cleanup import CleanupConfig, cleanup_config
from assistant.window import refresh_size

logger = logging.getLogger(__name__)

# Cached summaries: the column holding the id of the last message each covers,
# and the columns cleared together when that message no longer exists.
_CACHED_SUMMARY_KEYS = (
    (MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID, WINDOW_SUMMARY_KEYS),
    (MetadataKeys.PENDING_THROUGH_MESSAGE_ID, PENDING_SUMMARY_KEYS),
)


@dataclass(frozen=True)
class CleanupResult:
    job: str
    count: int  # rows deleted or changed, or tasks enqueued
    remains: bool  # another batch may have work
    after_id: int = 0  # keyset cursor for the next batch (enqueueing jobs)


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


def _config(config: CleanupConfig | None) -> CleanupConfig:
    return config or cleanup_config()


def _elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


# --- Purge soft-deleted conversations --------------------------------------


def in_use_q(now: datetime, config: CleanupConfig) -> Q:
    """A conversation is in use when a message or an exchange touched it
    within the grace window, or it holds a live summary lease."""
    since = now - timedelta(seconds=config.IN_USE_GRACE_SECONDS)
    return (
        Q(updated_at__gte=since)
        | Q(last_exchange_at__gte=since)
        | Q(summary_lease_expires_at__gt=now)
    )


def purgeable_conversations(
    now: datetime | None = None, config: CleanupConfig | None = None
) -> QuerySet[Conversation]:
    now, config = _now(now), _config(config)
    if config.PURGE_RETENTION_DAYS is None:
        return Conversation.objects.none()
    cutoff = now - timedelta(days=config.PURGE_RETENTION_DAYS)
    # Uses the partial index assistant_conv_deleted.
    return (
        Conversation.objects.filter(deleted_at__lte=cutoff)
        .exclude(in_use_q(now, config))
        .filter(~Exists(forks_awaiting_summary().filter(parent_conversation=OuterRef("pk"))))
    )


def forks_awaiting_summary() -> QuerySet[Conversation]:
    """Forks made with summarize=False whose parent summary is not written
    yet: their parent must outlive them until it is, or the fork would lose
    its inherited context for good. Uses assistant_conv_fork_deferred."""
    return Conversation.objects.filter(summary_deferred=True)


def purge_deleted_conversations(
    *, now: datetime | None = None, config: CleanupConfig | None = None
) -> CleanupResult:
    """Delete one batch of conversations soft-deleted longer than the
    retention, with their messages and compaction events. Each row is locked
    and re-checked inside the delete transaction: a row in use by a live
    transaction (SKIP LOCKED) or touched since the selection is left alone."""
    now, config = _now(now), _config(config)
    started = time.monotonic()
    batch = config.PURGE_BATCH_SIZE
    candidates = list(
        purgeable_conversations(now, config).order_by("id").values_list("id", flat=True)[:batch]
    )
    if not candidates:
        return CleanupResult("purge_deleted", 0, False)
    with transaction.atomic():
        ids = list(
            purgeable_conversations(now, config)
            .filter(pk__in=candidates)
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("id")
            .values_list("id", flat=True)
        )
        if ids:
            # One DELETE each (no cascades below them); the conversations'
            # own delete then finds no children, and sets forks' parent NULL
            # (forks outlive their parent: they carry its summary).
            messages, _ = Message.objects.filter(conversation_id__in=ids).delete()
            events, _ = CompactionEvent.objects.filter(conversation_id__in=ids).delete()
            SummaryVersion.objects.filter(conversation_id__in=ids).delete()
            Conversation.objects.filter(pk__in=ids).delete()
    if ids:
        log_event(
            "purge_deleted",
            conversations=len(ids),
            messages=messages,
            events=events,
            first_id=ids[0],
            last_id=ids[-1],
            duration_ms=_elapsed_ms(started),
        )
    # Rows skipped because they were locked are retried by the next run.
    return CleanupResult("purge_deleted", len(ids), len(candidates) == batch and bool(ids))


# --- Drop originals of compacted messages -----------------------------------


def droppable_originals(
    now: datetime | None = None, config: CleanupConfig | None = None
) -> QuerySet[Message]:
    now, config = _now(now), _config(config)
    if config.DROP_ORIGINALS_RETENTION_DAYS is None:
        return Message.objects.none()
    cutoff = now - timedelta(days=config.DROP_ORIGINALS_RETENTION_DAYS)
    return Message.objects.filter(
        compacted_at__lte=cutoff,
        compacted_content__isnull=False,
        original_dropped_at__isnull=True,
    ).exclude(compaction="")


def drop_compacted_originals(
    *, now: datetime | None = None, config: CleanupConfig | None = None
) -> CleanupResult:
    """Empty `content` of one batch of messages compacted longer ago than the
    retention; the model-facing `compacted_content` stays. A message restored
    in between (compacted_content NULL again) is left alone."""
    now, config = _now(now), _config(config)
    started = time.monotonic()
    batch = config.BATCH_SIZE
    ids = list(droppable_originals(now, config).order_by("id").values_list("id", flat=True)[:batch])
    if not ids:
        return CleanupResult("drop_originals", 0, False)
    with transaction.atomic():
        count = (
            droppable_originals(now, config)
            .filter(pk__in=ids)
            .update(content="", search_vector=None, original_dropped_at=now)
        )
        # Semantic recall finds nothing of an original that is gone (the unique
        # constraint's index; the dropped ones are never embedded again).
        dropped = Message.objects.filter(pk__in=ids, original_dropped_at=now).values("id")
        Embedding.objects.filter(source=Embedding.Source.ORIGINAL, source_id__in=dropped).delete()
    log_event("drop_originals", messages=count, duration_ms=_elapsed_ms(started))
    return CleanupResult("drop_originals", count, len(ids) == batch)


# --- Sweep for post-exchange work that never ran ----------------------------


def missed_exchanges(
    now: datetime | None = None, config: CleanupConfig | None = None
) -> QuerySet[Conversation]:
    now, config = _now(now), _config(config)
    cutoff = now - timedelta(seconds=config.SWEEP_GRACE_SECONDS)
    # Uses the partial index assistant_conv_unprocessed (same condition).
    return Conversation.objects.filter(
        Q(deleted_at__isnull=True, last_exchange_at__isnull=False)
        & (
            Q(post_exchange_done_at__isnull=True)
            | Q(post_exchange_done_at__lt=F("last_exchange_at"))
        ),
        last_exchange_at__lte=cutoff,
    )


def _enqueue_batch(
    job: str,
    queryset: QuerySet[Conversation],
    after_id: int,
    batch: int,
    enqueue: Callable[[int], None],
) -> CleanupResult:
    started = time.monotonic()
    ids = list(queryset.filter(pk__gt=after_id).order_by("id").values_list("id", flat=True)[:batch])
    for conversation_id in ids:
        enqueue(conversation_id)
    if ids:
        log_event(
            job,
            enqueued=len(ids),
            first_id=ids[0],
            last_id=ids[-1],
            duration_ms=_elapsed_ms(started),
        )
    return CleanupResult(job, len(ids), len(ids) == batch, ids[-1] if ids else after_id)


def sweep_missed_exchanges(
    *,
    after_id: int = 0,
    now: datetime | None = None,
    config: CleanupConfig | None = None,
) -> CleanupResult:
    """Enqueue the post-exchange task for one batch of conversations whose
    last exchange was never processed (the broker was down at commit, a
    worker died for good) and is older than the grace period. The task is
    idempotent, so one enqueued twice does no harm."""
    config = _config(config)
    return _enqueue_batch(
        "sweep_missed_exchanges",
        missed_exchanges(now, config),
        after_id,
        config.BATCH_SIZE,
        lambda pk: enqueue_on_commit(POST_EXCHANGE_TASK, pk, unless_queued=True),
    )


# --- Deferred fork summaries that never arrived ------------------------------


def forks_missing_summary(
    now: datetime | None = None, config: CleanupConfig | None = None
) -> QuerySet[Conversation]:
    now, config = _now(now), _config(config)
    cutoff = now - timedelta(seconds=config.FORK_SUMMARY_GRACE_SECONDS)
    return forks_awaiting_summary().filter(
        deleted_at__isnull=True,
        parent_conversation__isnull=False,
        created_at__lte=cutoff,
        parent_conversation_summary__isnull=True,
    )


def enqueue_missing_fork_summaries(
    *,
    after_id: int = 0,
    now: datetime | None = None,
    config: CleanupConfig | None = None,
) -> CleanupResult:
    """Enqueue the deferred parent-summary task for one batch of forks made
    with summarize=False whose summary is still missing."""
    config = _config(config)
    return _enqueue_batch(
        "fork_summaries_missing",
        forks_missing_summary(now, config),
        after_id,
        config.BATCH_SIZE,
        lambda pk: enqueue_on_commit(PARENT_SUMMARY_TASK, pk, unless_queued=True),
    )


# --- Stale leases and cached summaries of a vanished split --------------------


def expired_leases(now: datetime | None = None) -> QuerySet[Conversation]:
    return Conversation.objects.filter(summary_lease_expires_at__lte=_now(now))


def release_expired_leases(
    *, now: datetime | None = None, config: CleanupConfig | None = None
) -> CleanupResult:
    """NULL the lease columns of one batch of expired leases. The UPDATE
    re-checks the expiry, so a lease claimed again in between survives."""
    now, config = _now(now), _config(config)
    batch = config.BATCH_SIZE
    ids = list(expired_leases(now).order_by("id").values_list("id", flat=True)[:batch])
    if not ids:
        return CleanupResult("release_leases", 0, False)
    count = (
        expired_leases(now)
        .filter(pk__in=ids)
        .update(summary_lease_token=None, summary_lease_expires_at=None)
    )
    log_event("release_leases", conversations=count)
    return CleanupResult("release_leases", count, len(ids) == batch)


def stale_cached_summaries(through_key: str) -> QuerySet[Conversation]:
    """Conversations whose cached summary's through-message is not (any
    more) a message of the conversation."""
    exists = Exists(
        Message.objects.filter(conversation_id=OuterRef("pk"), id=OuterRef(through_key))
    )
    return Conversation.objects.filter(**{f"{through_key}__isnull": False}).filter(~Q(exists))


def clear_stale_summaries(*, config: CleanupConfig | None = None) -> CleanupResult:
    """Remove cached window summaries (and pre-built pending ones) whose
    split message no longer exists in the conversation, in one UPDATE per
    batch that clears just those columns, so a concurrent write of other
    state is kept."""
    config = _config(config)
    batch = config.BATCH_SIZE
    total, remains = 0, False
    for through_key, keys in _CACHED_SUMMARY_KEYS:
        ids = list(
            stale_cached_summaries(through_key).order_by("id").values_list("id", flat=True)[:batch]
        )
        if not ids:
            continue
        count = write_state(stale_cached_summaries(through_key).filter(pk__in=ids), clear=keys)
        if through_key == MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID:
            for pk in ids:  # the summary left the context: the list's figure follows
                refresh_size(pk)
        log_event(
            "stale_summaries_cleared",
            conversations=count,
            first_id=ids[0],
            last_id=ids[-1],
            column=through_key,
        )
        total += count
        remains = remains or len(ids) == batch
    return CleanupResult("stale_summaries", total, remains)


def clear_stale_state(
    *, now: datetime | None = None, config: CleanupConfig | None = None
) -> CleanupResult:
    """Release expired leases and clear stale cached summaries (one beat entry)."""
    leases = release_expired_leases(now=now, config=config)
    summaries = clear_stale_summaries(config=config)
    return CleanupResult(
        "clear_stale_state", leases.count + summaries.count, leases.remains or summaries.remains
    )


# --- For `manage.py cleanup` ---------------------------------------------------


def pending_counts(
    now: datetime | None = None, config: CleanupConfig | None = None
) -> dict[str, int]:
    """How much each job would do now (for --dry-run and the progress bars)."""
    now, config = _now(now), _config(config)
    return {
        "purge_deleted": purgeable_conversations(now, config).count(),
        "drop_originals": droppable_originals(now, config).count(),
        "sweep_missed_exchanges": missed_exchanges(now, config).count(),
        "fork_summaries_missing": forks_missing_summary(now, config).count(),
        "release_leases": expired_leases(now).count(),
        "stale_summaries": sum(
            stale_cached_summaries(through).count() for through, _ in _CACHED_SUMMARY_KEYS
        ),
    }


def run_job(
    job: str,
    *,
    now: datetime | None = None,
    config: CleanupConfig | None = None,
    on_batch: Callable[[CleanupResult], None] | None = None,
    max_batches: int = 100_000,
) -> int:
    """Run one job batch after batch until no work remains; returns the total."""
    now, config = _now(now), _config(config)
    total, after_id = 0, 0
    for _ in range(max_batches):
        if job == "purge_deleted":
            result = purge_deleted_conversations(now=now, config=config)
        elif job == "drop_originals":
            result = drop_compacted_originals(now=now, config=config)
        elif job == "sweep_missed_exchanges":
            result = sweep_missed_exchanges(after_id=after_id, now=now, config=config)
        elif job == "fork_summaries_missing":
            result = enqueue_missing_fork_summaries(after_id=after_id, now=now, config=config)
        elif job == "release_leases":
            result = release_expired_leases(now=now, config=config)
        elif job == "stale_summaries":
            result = clear_stale_summaries(config=config)
        else:
            raise ValueError(f"Unknown cleanup job {job!r}; expected one of {', '.join(JOBS)}")
        total += result.count
        after_id = result.after_id
        if on_batch is not None:
            on_batch(result)
        if not result.remains:
            break
    return total


JOBS = (
    "purge_deleted",
    "drop_originals",
    "sweep_missed_exchanges",
    "fork_summaries_missing",
    "release_leases",
    "stale_summaries",
)
