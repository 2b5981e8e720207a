"""Celery tasks: thin wrappers that take ids and call a service."""

from __future__ import annotations

import logging
from typing import TypeGuard

from celery import Task, bootsteps, shared_task
from celery.signals import worker_init, worker_process_init, worker_shutdown
from django.db import InterfaceError, OperationalError

from assistant.cleanup import (
    clear_stale_state,
    drop_compacted_originals,
    enqueue_missing_fork_summaries,
    purge_deleted_conversations,
    sweep_missed_exchanges,
)
from assistant.fork import generate_parent_summary
from assistant.history import (
    EMBED_TASK,
    PARENT_SUMMARY_TASK,
    POST_EXCHANGE_TASK,
    PREBUILD_TASK,
    over_delivery_cap,
    task_started,
)
from assistant.models import Conversation
from assistant.ops import health, telemetry
from assistant.ops.consumer import reconnecting
from assistant.ops.logs import log_event
from assistant.post_exchange import process_exchange
from assistant.providers import ProviderError, forget_clients, import_sdk
from assistant.recall import embed_pending
from assistant.settings.app import app_setting
from assistant.staff import run_staff_action
from assistant.summary import note_worker, serve_prebuild_request

logger = logging.getLogger(__name__)

# Database connections dropped mid-task (failover, pg_terminate_backend) are
# retried; the work is idempotent. Delays stay far below the broker's
# visibility timeout so a retried task is not also redelivered.
_DB_RETRY = {
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 1,
    "retry_backoff_max": 10,  # seconds: a failover is over in a few
    "retry_jitter": True,
    "max_retries": 5,
}
# A summarizer still rate-limited after this many retries is left to the sweep.
PROVIDER_RETRIES = 5
# The longest wait before a provider retry (seconds), however long the visibility timeout.
PROVIDER_RETRY_CEILING_SECONDS = 300
# Any larger is no row id (PostgreSQL's bigint).
_MAX_ROW_ID = 2**63
# How much of a malformed id the log repeats (it may be anything).
_LOGGED_ID_CHARS = 80


@worker_init.connect
def import_summarizer_sdk(**_: object) -> None:
    """Import the summarizer's SDK once, in the worker's main process before it
    forks its pool: a child replaced on a loaded machine would otherwise spend
    seconds of CPU importing it, past billiard's start-up limit
    (worker_proc_alive_timeout, 4 s), and be killed in turn."""
    import_sdk()


@worker_init.connect
def reconnect_after_a_broker_loss(sender: object = None, **_: object) -> None:
    """A worker that loses Redis with a task in flight reconnects instead of exiting
    (assistant/ops/consumer.py). worker_init runs before the worker builds its
    consumer, so the guard also covers a host's own `worker_consumer`."""
    consumer_cls = getattr(sender, "consumer_cls", None)
    if consumer_cls is not None:
        sender.consumer_cls = reconnecting(consumer_cls)  # type: ignore[attr-defined]


@worker_process_init.connect
def own_summarizer_client(**_: object) -> None:
    """A pool child builds its own summarizer client at first use (cheap: the SDK
    is already imported); a client inherited from the parent would share its sockets."""
    forget_clients()


@worker_init.connect
def start_worker_heartbeat(sender: object = None, **_: object) -> None:
    """A worker's main process stamps its heartbeat in Redis while it lives, which
    /readyz and the admin read to tell a live worker from a dead or frozen one
    (docs/operations.rst, "Health"). Started before the pool forks: a thread of
    the main process only. A worker stopped cold (terminated: Celery sends no
    worker_shutdown then) stops stamping too, though its process lives on: a
    worker run in a thread of another process, as tests do."""
    health.start_heartbeat(
        str(getattr(sender, "hostname", "")), running=lambda: _not_stopped(sender)
    )


def _not_stopped(worker: object) -> bool:
    state = getattr(getattr(worker, "blueprint", None), "state", None)
    return state not in (bootsteps.CLOSE, bootsteps.TERMINATE)


@worker_shutdown.connect
def stop_worker_heartbeat(sender: object = None, **_: object) -> None:
    health.stop_heartbeat(str(getattr(sender, "hostname", "")))


@shared_task(bind=True, name=POST_EXCHANGE_TASK, **_DB_RETRY)
def post_exchange_task(self: Task, conversation_id: int) -> None:
    if not _worker_takes(self, conversation_id, refused="post_exchange_refused"):
        return
    try:
        with telemetry.post_exchange(conversation_id):
            process_exchange(conversation_id)
    except ProviderError as exc:
        # A rate-limited or overloaded summarizer (after the SDK's own retries,
        # with no fallback configured): try again later, with backoff. When the
        # retries run out the sweep finds the exchange again.
        if not exc.retryable:
            raise
        raise _provider_retry(self, exc) from exc


def _provider_retry(task: Task, exc: ProviderError) -> BaseException:
    """The retry of a task whose provider was rate-limited or overloaded, with backoff."""
    delay = app_setting("ASSISTANT_PROVIDER_RETRY_SECONDS") * 2**task.request.retries
    # A countdown past the visibility timeout would get the task delivered twice.
    timeout = app_setting("CELERY_BROKER_VISIBILITY_TIMEOUT")
    ceiling = min(PROVIDER_RETRY_CEILING_SECONDS, timeout // 2)
    return task.retry(exc=exc, countdown=min(delay, ceiling), max_retries=PROVIDER_RETRIES)


def _is_row_id(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < _MAX_ROW_ID


def _worker_takes(task: Task, conversation_id: object, *, refused: str) -> bool:
    """Whether a conversation task goes on: a malformed id from some other
    producer is logged and dropped (raising would only fail the same way on
    every delivery), and so is work that keeps killing its worker (a new
    exchange is new work). The worker is noted as serving the conversation."""
    if not _is_row_id(conversation_id):
        log_event(
            refused,
            level=logging.WARNING,
            conversation_id=repr(conversation_id)[:_LOGGED_ID_CHARS],
            reason="not_an_id",
        )
        return False
    task_started(task.name, conversation_id)
    if over_delivery_cap(task.name, conversation_id):
        return False
    note_worker(conversation_id)
    return True


@shared_task(bind=True, name=PREBUILD_TASK, **_DB_RETRY)
def prebuild_summary_task(self: Task, conversation_id: int) -> None:
    """The next window summary, asked for by the pre-call hook inside a turn."""
    if _worker_takes(self, conversation_id, refused="prebuild_refused"):
        serve_prebuild_request(conversation_id)


@shared_task(bind=True, name=PARENT_SUMMARY_TASK, **_DB_RETRY)
def generate_parent_summary_task(self: Task, conversation_id: int) -> None:
    """The deferred summary of a fork made with summarize=False; a no-op when
    the fork is gone or already has its summary."""
    task_started(self.name, conversation_id)
    if over_delivery_cap(self.name, conversation_id):
        return
    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is None:
        logger.info("parent_summary_skipped conversation=%s reason=missing", conversation_id)
        return
    generate_parent_summary(conversation)


@shared_task(**_DB_RETRY)
def staff_action_task(
    action: str,
    conversation_id: int,
    user_id: int | None,
    instructions: str = "",
    message_id: int | None = None,
) -> None:
    """An admin action run on the worker (a model call, or many rows); its
    result goes to the conversation's admin history. Arguments added later are
    trailing and optional, so a task queued before them still runs."""
    run_staff_action(action, conversation_id, user_id, instructions, message_id)


@shared_task(bind=True, name=EMBED_TASK, **_DB_RETRY)
def embed_texts_task(self: Task) -> int:
    """One run of the embedding job (docs/operations.rst, "Semantic recall"), after an
    exchange that compacted something and by beat; the next run is enqueued while more
    remains. A rate-limited provider is retried later, as the post-exchange task's is
    (what was stored stays: the next run embeds the rest); when the retries run out,
    beat's next run takes the texts again."""
    try:
        run = embed_pending()
    except ProviderError as exc:  # a retryable one: the job logs and skips the others
        raise _provider_retry(self, exc) from exc
    telemetry.embedding_run(
        run.provider, run.model, tokens=run.tokens, capped=run.capped, failures=run.failed
    )
    if run.remains:
        embed_texts_task.delay()
    return run.embedded


# --- Scheduled cleanup (beat; see assistant/settings/cleanup.py) -----------------
# Each runs one bounded batch and re-enqueues itself while work remains.


@shared_task(**_DB_RETRY)
def purge_deleted_conversations_task() -> int:
    result = purge_deleted_conversations()
    if result.remains:
        purge_deleted_conversations_task.delay()
    return result.count


@shared_task(**_DB_RETRY)
def drop_compacted_originals_task() -> int:
    result = drop_compacted_originals()
    if result.remains:
        drop_compacted_originals_task.delay()
    return result.count


@shared_task(**_DB_RETRY)
def sweep_missed_exchanges_task(after_id: int = 0) -> int:
    result = sweep_missed_exchanges(after_id=after_id)
    if result.remains:
        sweep_missed_exchanges_task.delay(result.after_id)
    return result.count


@shared_task(**_DB_RETRY)
def missing_fork_summaries_task(after_id: int = 0) -> int:
    result = enqueue_missing_fork_summaries(after_id=after_id)
    if result.remains:
        missing_fork_summaries_task.delay(result.after_id)
    return result.count


@shared_task(**_DB_RETRY)
def clear_stale_state_task() -> int:
    result = clear_stale_state()
    if result.remains:
        clear_stale_state_task.delay()
    return result.count
