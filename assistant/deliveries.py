"""A cap on how often one task is delivered.

With late acks and reject-on-worker-lost, a task whose run kills its worker
(out of memory on a huge input, a segfault in a library) comes back after
every crash, forever. Counting deliveries per task id in Redis and dropping
the task past a cap ends that loop; the sweep still finds the exchange later,
at the sweep's own pace.
"""

from __future__ import annotations

import functools
import logging

import redis
from django.conf import settings

from assistant.logs import log_event

logger = logging.getLogger(__name__)

_TTL_SECONDS = 24 * 3600


@functools.lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)


def over_delivery_cap(task_name: str, task_id: str | None) -> bool:
    """Count this delivery; True when the task has now been delivered more
    than ASSISTANT_MAX_TASK_DELIVERIES times (retries included). Without a
    Redis broker, or when Redis does not answer, nothing is capped."""
    url = settings.CELERY_BROKER_URL
    if not task_id or not url.startswith(("redis://", "rediss://", "unix://")):
        return False
    key = f"assistant:deliveries:{task_id}"
    try:
        with _client(url).pipeline() as pipe:
            count, _ = pipe.incr(key).expire(key, _TTL_SECONDS).execute()
    except redis.RedisError:
        return False
    if count > settings.ASSISTANT_MAX_TASK_DELIVERIES:
        log_event("task_dropped", task=task_name, task_id=task_id, deliveries=count)
        return True
    return False
