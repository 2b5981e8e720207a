"""Checks of the services the app depends on, for `check_services` and /readyz."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime

import redis
from celery import current_app
from django.conf import settings
from django.db import connection
from django.utils import timezone


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


def check_redis() -> Check:
    url = settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return Check("redis", True, "not used (embedded broker)")
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        client.ping()
        return Check("redis", True, "ping")
    except redis.RedisError as exc:
        return Check("redis", False, type(exc).__name__)


def check_worker(timeout: float = 2.0) -> Check:
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
    """The worker ping, broadcast at most once per `max_age` seconds by this
    process however many requests ask (concurrent ones wait for one answer):
    an anonymous caller cannot make every worker answer at will."""
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
    """Drop the cached ping (tests; a deployment never needs it)."""
    global _last_worker_check
    with _worker_check_lock:
        _last_worker_check = None
