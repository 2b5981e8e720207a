"""A cap on how often the same work is delivered.

With late acks and reject-on-worker-lost, a task whose run kills its worker
(out of memory on a huge input, a segfault in a library) comes back after
every crash, forever; and the sweep re-enqueues unprocessed work under new
task ids. So deliveries are counted per piece of work, not per task id: per
exchange (conversation and its last-exchange stamp) for the post-exchange
task, per request of the pre-call hook for the in-turn summary, per fork
for the deferred parent summary. Past the cap the task is dropped; a new
exchange (or request) starts a new count.

A batch job (the embedding job) has no one piece of work per delivery: it
marks each item `in_flight` while it processes it. An item whose mark
outlives its process (`losses`) killed that process; the job isolates it,
and drops it past the same cap.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import redis

from assistant.history.queue import POST_EXCHANGE_TASK, PREBUILD_TASK, redis_client, uses_redis
from assistant.models import Conversation, MetadataKeys
from assistant.ops.logs import log_event
from assistant.settings.app import app_setting

logger = logging.getLogger(__name__)

# Long enough that a sweep every few minutes keeps meeting the count.
_TTL_SECONDS = 7 * 24 * 3600


def work_key(task_name: str, conversation_id: int) -> str:
    """Which piece of work a delivery is: the exchange for the post-exchange
    task (a later exchange is new work), the hook's request for the in-turn
    summary task (a later request is new work), the conversation otherwise."""
    key = f"assistant:deliveries:{task_name}:{conversation_id}"
    rows = Conversation.objects.filter(pk=conversation_id)
    if task_name == POST_EXCHANGE_TASK:
        stamp = rows.values_list("last_exchange_at", flat=True).first()
        key += f":{stamp.timestamp() if stamp else 0}"
    elif task_name == PREBUILD_TASK:
        request = rows.values_list(MetadataKeys.PREBUILD_REQUEST, flat=True).first() or {}
        key += f":{request.get('at', 0)}"
    return key


def over_delivery_cap(task_name: str, conversation_id: int) -> bool:
    """Count this delivery; True when this work has now been delivered more
    than ASSISTANT_MAX_TASK_DELIVERIES times (retries, redeliveries after a
    crash and sweeps included). Without a Redis broker, or when Redis does
    not answer, nothing is capped."""
    if not uses_redis():
        return False
    key = work_key(task_name, conversation_id)
    try:
        with redis_client().pipeline() as pipe:
            pipe.incr(key)
            pipe.expire(key, _TTL_SECONDS)
            count, _ = pipe.execute()
    except redis.RedisError:
        return False
    if count > app_setting("ASSISTANT_MAX_TASK_DELIVERIES"):
        log_event("task_dropped", task=task_name, conversation_id=conversation_id, deliveries=count)
        return True
    return False


def _in_flight_key(item: str) -> str:
    return f"assistant:in_flight:{item}"


@contextmanager
def in_flight(items: Sequence[str]) -> Iterator[None]:
    """Marks `items` (names of work, e.g. "embed:original:42") as in flight for the
    block: the marks are taken back however the block ends, so only a process killed
    inside it (out of memory, a segfault, SIGKILL) leaves one. Without a Redis broker,
    or when Redis does not answer, nothing is marked."""
    marked = _change(items, +1)
    try:
        yield
    finally:
        if marked:
            _change(items, -1)


def losses(items: Sequence[str]) -> list[int]:
    """For each of `items`, how many processes died with it in flight (`in_flight`)
    within the last _TTL_SECONDS; 0 without a Redis broker or an answer."""
    if not items or not uses_redis():
        return [0] * len(items)
    try:
        counts = redis_client().mget([_in_flight_key(item) for item in items])
    except redis.RedisError:
        return [0] * len(items)
    return [max(int(count or 0), 0) for count in counts]


def _change(items: Sequence[str], by: int) -> bool:
    if not items or not uses_redis():
        return False
    try:
        with redis_client().pipeline(transaction=False) as pipe:
            for key in map(_in_flight_key, items):
                pipe.incrby(key, by)
                pipe.expire(key, _TTL_SECONDS)
            pipe.execute()
    except redis.RedisError:
        return False
    return True
