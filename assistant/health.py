"""Checks of the services the app depends on, for `check_services` and /healthz."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import connection


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


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
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        client.ping()
        return Check("redis", True, "ping")
    except redis.RedisError as exc:
        return Check("redis", False, type(exc).__name__)


def check_worker(timeout: float = 2.0) -> Check:
    from config.celery import app

    try:
        replies = app.control.ping(timeout=timeout)
    except Exception as exc:
        return Check("worker", False, type(exc).__name__)
    if not replies:
        return Check("worker", False, "no worker answered")
    return Check("worker", True, f"{len(replies)} answered")
