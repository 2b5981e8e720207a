"""Celery tasks: thin wrappers that take ids and call a service."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from assistant import exchanges
from assistant.deliveries import over_delivery_cap
from assistant.llm import ProviderError

logger = logging.getLogger(__name__)

# Database connections dropped mid-task (failover, pg_terminate_backend) are
# retried; the work is idempotent. Delays stay far below the broker's
# visibility timeout so a retried task is not also redelivered.
_DB_RETRY = {
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 1,
    "retry_backoff_max": 10,
    "retry_jitter": True,
    "max_retries": 5,
}


@shared_task(bind=True, **_DB_RETRY)
def post_exchange_task(self, conversation_id: int) -> None:
    if over_delivery_cap(self.name, self.request.id):
        return  # it keeps killing its worker: stop; the sweep comes back to it
    try:
        exchanges.process_exchange(conversation_id)
    except ProviderError as exc:
        # A rate-limited or overloaded summarizer (after the SDK's own retries,
        # with no fallback configured): try again later, with backoff. When the
        # retries run out the sweep finds the exchange again.
        if not exc.retryable:
            raise
        delay = settings.ASSISTANT_PROVIDER_RETRY_SECONDS * 2**self.request.retries
        # A countdown past the visibility timeout would get the task delivered twice.
        ceiling = min(300, settings.CELERY_BROKER_VISIBILITY_TIMEOUT // 2)
        raise self.retry(exc=exc, countdown=min(delay, ceiling), max_retries=5) from exc


@shared_task(**_DB_RETRY)
def generate_parent_summary_task(conversation_id: int) -> None:
    """The deferred summary of a fork made with summarize=False; a no-op when
    the fork is gone or already has its summary."""
    from assistant.forking import generate_parent_summary
    from assistant.models import Conversation

    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is None:
        logger.info("parent_summary_skipped conversation=%s reason=missing", conversation_id)
        return
    generate_parent_summary(conversation)


# --- Scheduled cleanup (beat; see assistant/cleanup_conf.py) -----------------
# Each runs one bounded batch and re-enqueues itself while work remains.


@shared_task(**_DB_RETRY)
def purge_deleted_conversations_task() -> int:
    from assistant import cleanup

    result = cleanup.purge_deleted_conversations()
    if result.remains:
        purge_deleted_conversations_task.delay()
    return result.count


@shared_task(**_DB_RETRY)
def drop_compacted_originals_task() -> int:
    from assistant import cleanup

    result = cleanup.drop_compacted_originals()
    if result.remains:
        drop_compacted_originals_task.delay()
    return result.count


@shared_task(**_DB_RETRY)
def sweep_missed_exchanges_task(after_id: int = 0) -> int:
    from assistant import cleanup

    result = cleanup.sweep_missed_exchanges(after_id=after_id)
    if result.remains:
        sweep_missed_exchanges_task.delay(result.after_id)
    return result.count


@shared_task(**_DB_RETRY)
def missing_fork_summaries_task(after_id: int = 0) -> int:
    from assistant import cleanup

    result = cleanup.enqueue_missing_fork_summaries(after_id=after_id)
    if result.remains:
        missing_fork_summaries_task.delay(result.after_id)
    return result.count


@shared_task(**_DB_RETRY)
def clear_stale_state_task() -> int:
    from assistant import cleanup

    result = cleanup.clear_stale_state()
    if result.remains:
        clear_stale_state_task.delay()
    return result.count
