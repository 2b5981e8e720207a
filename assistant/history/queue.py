"""Enqueue the app's Celery tasks by name, after the surrounding transaction
commits, at most once while one is still waiting, and in bounded time.

- Work is published only once its rows are visible to the worker, never from
  inside an open transaction, and never after a rollback.
- Tasks are named, not imported: the modules that enqueue (history, forking,
  cleanup) sit below assistant.tasks in the layering, and the Celery app is
  whichever one the host project made current.
- A short-lived Redis marker per (task, conversation) says "one is queued":
  set when publishing, cleared by the task when it starts. While it stands,
  the sweeps skip that work, so a sweep during a backlog does not multiply
  tasks. It expires on its own, so work whose message was lost is found again.
- Publishing happens on the chat path: a Redis that is down or hung costs
  ASSISTANT_ENQUEUE_TIMEOUT_SECONDS (the publish fails at the first timeout,
  without the broker's retry policy); the failure is logged and the sweep
  recovers it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from typing import Any

import redis
from celery import Task, current_app
from django.conf import settings
from django.db import transaction
from kombu.pools import producers

from assistant.settings.app import app_setting

logger = logging.getLogger(__name__)

POST_EXCHANGE_TASK = "assistant.tasks.post_exchange_task"
PARENT_SUMMARY_TASK = "assistant.tasks.generate_parent_summary_task"
PREBUILD_TASK = "assistant.tasks.prebuild_summary_task"
EMBED_TASK = "assistant.tasks.embed_texts_task"

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def broker_url() -> str:
    return str(current_app.conf.broker_url or settings.CELERY_BROKER_URL)


def uses_redis() -> bool:
    return broker_url().startswith(_REDIS_SCHEMES)


def timeout() -> float:
    return float(app_setting("ASSISTANT_ENQUEUE_TIMEOUT_SECONDS"))


@functools.lru_cache(maxsize=8)
def _client(url: str, seconds: float) -> redis.Redis:
    # No retry inside redis-py either: one bounded attempt per command.
    return redis.Redis.from_url(
        url, socket_connect_timeout=seconds, socket_timeout=seconds, retry=None
    )


def redis_client() -> redis.Redis:
    """A client of the broker's Redis whose every command is bounded."""
    return _client(broker_url(), timeout())


# The tasks that clear their marker when they start (task_started).
_MARKED = frozenset({POST_EXCHANGE_TASK, PARENT_SUMMARY_TASK, PREBUILD_TASK})


def _marker(task_name: str, conversation_id: int) -> str:
    return f"assistant:queued:{task_name}:{conversation_id}"


def enqueue_on_commit(
    task: str | Task, *args: Any, unless_queued: bool = False, using: str | None = None
) -> None:
    """Publish `task(*args)` (a task or its name) once the current
    transaction commits (at once outside one). Never raises: the sweep
    recovers what could not be published."""
    name = task if isinstance(task, str) else task.name
    transaction.on_commit(lambda: enqueue(name, *args, unless_queued=unless_queued), using=using)


def enqueue(task_name: str, *args: Any, unless_queued: bool = False) -> bool:
    """Publish now and, for the post-exchange and fork-summary tasks (whose
    first argument is the conversation id), mark the work queued; True when
    published.

    With `unless_queued` (the sweeps) nothing is published while the marker
    stands. The chat path publishes unconditionally (a new exchange is new
    work) and sets the marker only after the publish succeeded: a command
    that timed out against a hung Redis may still be applied when it wakes,
    and a marker for work never published would hold the sweep off."""
    marked = task_name in _MARKED and uses_redis()
    marker = _marker(task_name, args[0]) if marked else ""
    ttl = app_setting("ASSISTANT_QUEUED_MARKER_SECONDS")
    if unless_queued and marked:
        try:
            if not redis_client().set(marker, 1, nx=True, ex=ttl):
                return False
        except redis.RedisError as exc:
            _log_failure(task_name, args, exc)
            return False
    try:
        _publish(task_name, args)
    except Exception as exc:  # broker down or hung: the sweep recovers it
        _log_failure(task_name, args, exc)
        if unless_queued and marked:
            task_started(task_name, args[0])  # not queued after all
        return False
    if marked and not unless_queued:
        with contextlib.suppress(redis.RedisError):
            redis_client().set(marker, 1, ex=ttl)
    return True


def task_started(task_name: str, conversation_id: int) -> None:
    """Called by the task as it starts: later work must be enqueued again."""
    if not uses_redis():
        return
    with contextlib.suppress(redis.RedisError):  # else the marker expires on its own
        redis_client().delete(_marker(task_name, conversation_id))


_seen_here: dict[str, float] = {}


def first_in(key: str, seconds: int) -> bool:
    """True the first time `key` is asked for in `seconds` (a line logged once a day):
    across the deployment with a Redis broker, else (or when Redis does not answer)
    in this process."""
    if uses_redis():
        with contextlib.suppress(redis.RedisError):
            return bool(redis_client().set(f"assistant:once:{key}", 1, nx=True, ex=seconds))
    now = time.monotonic()
    if now < _seen_here.get(key, float("-inf")):
        return False
    _seen_here[key] = now + seconds
    return True


def queued_exchanges_older_than(seconds: float) -> int | None:
    """How many exchanges have waited for the worker longer than `seconds`: their
    post-exchange task's marker (set when published, with the marker's full life)
    still stands, and more than `seconds` of its life have passed. None when Redis
    does not answer (bounded like every command here)."""
    if not uses_redis():
        return 0
    life_ms = app_setting("ASSISTANT_QUEUED_MARKER_SECONDS") * 1000
    client = redis_client()
    try:
        keys = list(client.scan_iter(match=f"assistant:queued:{POST_EXCHANGE_TASK}:*", count=500))
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.pttl(key)
            remaining = pipe.execute() if keys else []
    except redis.RedisError:
        return None
    return sum(1 for left in remaining if left > 0 and life_ms - left > seconds * 1000)


def _publish(task_name: str, args: tuple) -> None:
    app = current_app
    seconds = timeout()
    options = {
        **(app.conf.broker_transport_options or {}),
        "socket_timeout": seconds,
        "socket_connect_timeout": seconds,
        # Reconnecting a connection the last timeout broke: once, no backoff.
        "max_retries": 0,
        "interval_start": 0,
        "connect_retries_timeout": seconds,
    }
    connection = app.connection_for_write(transport_options=options)
    # A pool per connection parameters (kombu keys it by them), so this
    # short-timeout producer is reused from call to call.
    with producers[connection].acquire(block=True, timeout=seconds) as producer:
        app.send_task(task_name, args=args, producer=producer, retry=False)


def _log_failure(task_name: str, args: tuple, exc: Exception) -> None:
    logger.warning(
        "enqueue_failed task=%s args=%s error=%s",
        task_name,
        args,
        type(exc).__name__,
    )
