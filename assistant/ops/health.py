"""Checks of the services the app depends on, for `check_services` and /readyz."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import redis
from celery import current_app
from django.conf import settings
from django.db import connection
from django.utils import timezone

from assistant.settings.app import app_setting


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""
    checked_at: datetime | None = None


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return Check("database", True, connection.vendor)
    except Exception as exc:
        return Check("database", False, type(exc).__name__)


# Each Redis round trip of a health check: a Redis that is down or hung costs
# /readyz about this, never the client's default waits.
REDIS_TIMEOUT_SECONDS = 0.3
# A live worker's main process stamps its heartbeat this often; a stamp counts for
# HEARTBEAT_TTL_SECONDS, so a worker that died or froze is reported within that.
HEARTBEAT_SECONDS = 5.0
HEARTBEAT_TTL_SECONDS = 15.0
# One sorted set: each worker's hostname, scored by when its stamp expires.
WORKERS_KEY = "assistant:workers"
# A worker gone this long is forgotten from the set altogether.
_FORGET_AFTER_SECONDS = 86400
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def _broker_url() -> str:
    return str(current_app.conf.broker_url or settings.CELERY_BROKER_URL)


def _bounded_client(seconds: float) -> redis.Redis:
    return redis.Redis.from_url(
        _broker_url(), socket_connect_timeout=seconds, socket_timeout=seconds, retry=None
    )


def check_redis(timeout: float = REDIS_TIMEOUT_SECONDS) -> Check:
    if not _broker_url().startswith(_REDIS_SCHEMES):
        return Check("redis", True, "not used (embedded broker)")
    client = _bounded_client(timeout)
    try:
        client.ping()
        return Check("redis", True, "ping")
    except redis.RedisError as exc:
        return Check("redis", False, type(exc).__name__)
    finally:
        client.close()


def beat_worker(hostname: str) -> None:
    """Stamp a worker's heartbeat (its main process, every HEARTBEAT_SECONDS)."""
    client = _bounded_client(HEARTBEAT_SECONDS / 2)
    now = time.time()
    try:
        with client.pipeline() as pipe:
            pipe.zadd(WORKERS_KEY, {hostname: now + HEARTBEAT_TTL_SECONDS})
            pipe.zremrangebyscore(WORKERS_KEY, "-inf", now - _FORGET_AFTER_SECONDS)
            pipe.execute()
    finally:
        client.close()


def forget_worker(hostname: str) -> None:
    """A worker stopping cleanly is no longer counted, at once."""
    client = _bounded_client(HEARTBEAT_SECONDS / 2)
    try:
        client.zrem(WORKERS_KEY, hostname)
    finally:
        client.close()


_heartbeats: dict[str, threading.Event] = {}
_heartbeats_lock = threading.Lock()


def start_heartbeat(hostname: str, running: Callable[[], bool] = lambda: True) -> None:
    """Stamp `hostname`'s heartbeat now and every HEARTBEAT_SECONDS, in a thread
    of this process, until stop_heartbeat or until `running()` turns false (a
    worker's main process, once it is ready). A stamp Redis refused is simply
    missed: the next one comes anyway. A worker of the same name started again in
    this process takes the stamps over from the one before."""
    if not _broker_url().startswith(_REDIS_SCHEMES):
        return
    stop = threading.Event()
    with _heartbeats_lock:
        previous = _heartbeats.get(hostname)
        _heartbeats[hostname] = stop
    if previous is not None:
        previous.set()

    def beat() -> None:
        while running():
            with contextlib.suppress(redis.RedisError):
                beat_worker(hostname)
            if stop.wait(HEARTBEAT_SECONDS):
                return
        _stop(hostname, stop)  # stopped without worker_shutdown: a cold stop

    threading.Thread(target=beat, name=f"assistant-heartbeat-{hostname}", daemon=True).start()


def stop_heartbeat(hostname: str) -> None:
    with _heartbeats_lock:
        stop = _heartbeats.get(hostname)
    if stop is not None:
        _stop(hostname, stop)


def _stop(hostname: str, stop: threading.Event) -> None:
    with _heartbeats_lock:
        if _heartbeats.get(hostname) is not stop:
            return  # another worker of that name stamps now
        del _heartbeats[hostname]
    stop.set()
    with contextlib.suppress(redis.RedisError):
        forget_worker(hostname)


def check_worker(timeout: float = REDIS_TIMEOUT_SECONDS) -> Check:
    """Whether a worker is alive: one whose heartbeat stamp has not expired (one
    Redis command, bounded; no broadcast for the workers to answer)."""
    if not _broker_url().startswith(_REDIS_SCHEMES):
        return _pinged_worker(timeout)
    client = _bounded_client(timeout)
    try:
        alive = int(client.zcount(WORKERS_KEY, f"({time.time()}", "+inf"))
    except redis.RedisError as exc:
        return Check("worker", False, type(exc).__name__)
    finally:
        client.close()
    if not alive:
        return Check("worker", False, "no live worker")
    return Check("worker", True, f"{alive} alive")


def _pinged_worker(timeout: float) -> Check:
    # The demo's embedded broker has no Redis to keep heartbeats in: a broadcast ping.
    try:
        replies = current_app.control.ping(timeout=timeout)
    except Exception as exc:
        return Check("worker", False, type(exc).__name__)
    if not replies:
        return Check("worker", False, "no worker answered")
    return Check("worker", True, f"{len(replies)} answered")


_last_worker_check: tuple[Check, float] | None = None
_worker_check_lock = threading.Lock()


def cached_worker_check(max_age: float, timeout: float) -> Check:
    """The worker check, made at most once per `max_age` seconds by this process
    however many requests ask (concurrent ones wait for one answer): an anonymous
    caller cannot make it query Redis at will."""
    global _last_worker_check
    with _worker_check_lock:
        if _last_worker_check is not None:
            check, at = _last_worker_check
            if time.monotonic() - at < max_age:
                return check
        check = check_worker(timeout)
        check = Check(check.name, check.ok, check.detail, timezone.now())
        _last_worker_check = (check, time.monotonic())
        return check


def forget_worker_check() -> None:
    """Drop the cached check (tests; a deployment never needs it)."""
    global _last_worker_check
    with _worker_check_lock:
        _last_worker_check = None


def live_worker_check() -> Check:
    """The worker check as /readyz and the admin make it: cached per
    ASSISTANT_HEALTH_WORKER_CACHE_SECONDS, each round trip bounded by
    ASSISTANT_HEALTHZ_WORKER_TIMEOUT."""
    return cached_worker_check(
        max_age=app_setting("ASSISTANT_HEALTH_WORKER_CACHE_SECONDS"),
        timeout=app_setting("ASSISTANT_HEALTHZ_WORKER_TIMEOUT"),
    )
