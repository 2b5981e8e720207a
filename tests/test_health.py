"""/healthz: cheap liveness. /readyz: database, Redis and a worker's ping
(cached, so callers cannot make workers answer at will); 200 or 503."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from celery.contrib.testing.worker import start_worker

from assistant.models import Conversation
from assistant.ops.health import beat_worker, forget_worker, forget_worker_check
from config.celery import app as celery_app
from tests.conftest import use_broker, wait_until


@pytest.fixture(autouse=True)
def fresh_worker_check():
    forget_worker_check()
    yield
    forget_worker_check()


def refuse_database(monkeypatch):
    from django.db import OperationalError, connection

    def refuse(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", refuse)


@pytest.mark.django_db
def test_healthz_is_liveness_only_and_touches_no_service(client, settings, monkeypatch):
    refuse_database(monkeypatch)
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there

    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"].startswith("max-age=0")


def worker_entry(client) -> dict:
    return client.get("/readyz").json()["checks"]["worker"]


def test_readyz_is_ok_when_all_answer_and_pings_the_workers_once_per_period(
    celery_worker, client, settings
):
    """One test, one in-process worker: a second one started in the same
    process does not answer broadcasts."""
    settings.ASSISTANT_HEALTH_WORKER_CACHE_SECONDS = 0  # a fresh ping each time
    assert wait_until(lambda: worker_entry(client)["ok"])
    settings.ASSISTANT_HEALTH_WORKER_CACHE_SECONDS = 3600

    responses = [client.get("/readyz") for _ in range(5)]
    settings.ASSISTANT_HEALTH_WORKER_CACHE_SECONDS = 0
    fresh = worker_entry(client)

    assert {response.status_code for response in responses} == {200}
    body = responses[0].json()
    assert body["status"] == "ok"
    assert body["checks"]["database"] == {"ok": True, "detail": "postgresql"}
    assert body["checks"]["redis"] == {"ok": True, "detail": "ping"}
    answers = [response.json()["checks"]["worker"] for response in responses]
    assert {(answer["ok"], answer["detail"]) for answer in answers} == {(True, "1 alive")}
    # One broadcast for the five: each got the answer stamped when it came.
    assert len({answer["checked_at"] for answer in answers}) == 1
    assert fresh["checked_at"] > answers[0]["checked_at"]
    assert responses[0]["Cache-Control"].startswith("max-age=0")


@pytest.mark.django_db
def test_readyz_is_503_when_no_worker_answers(client, empty_queues):
    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == {"ok": True, "detail": "postgresql"}
    assert body["checks"]["redis"] == {"ok": True, "detail": "ping"}
    worker = body["checks"]["worker"]
    assert (worker["ok"], worker["detail"]) == (False, "no live worker")


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["0", "false", "no"])
def test_the_worker_check_can_be_skipped_by_query(client, value):
    response = client.get(f"/readyz?worker={value}")

    assert response.status_code == 200
    assert set(response.json()["checks"]) == {"database", "redis"}


@pytest.mark.django_db
def test_the_worker_check_can_be_skipped_by_setting_and_asked_for_again(client, settings):
    settings.ASSISTANT_HEALTHZ_CHECK_WORKER = False

    skipped = client.get("/readyz")
    asked = client.get("/readyz?worker=1")

    assert (skipped.status_code, set(skipped.json()["checks"])) == (200, {"database", "redis"})
    assert asked.status_code == 503
    assert asked.json()["checks"]["worker"]["ok"] is False


@pytest.fixture
def broker_at():
    """Point the app's broker at another address for the test."""
    working = celery_app.conf.broker_url
    yield use_broker
    use_broker(working)


@contextmanager
def silent_listener() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung Redis)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.mark.django_db
def test_readyz_is_503_when_redis_does_not_answer(client, broker_at):
    broker_at("redis://127.0.0.1:1/0")  # nothing listens there

    response = client.get("/readyz?worker=0")

    assert response.status_code == 503
    assert response.json()["checks"]["redis"] == {"ok": False, "detail": "ConnectionError"}
    assert response.json()["checks"]["database"]["ok"] is True


@pytest.mark.django_db
@pytest.mark.parametrize("fault", ["refused", "hung"])
def test_readyz_answers_within_a_second_when_redis_is_down_or_hung(client, broker_at, fault):
    """The worker check included: it was a broadcast ping, retried by kombu (8.66 s)."""
    with silent_listener() as hung_port:
        broker_at(f"redis://127.0.0.1:{1 if fault == 'refused' else hung_port}/0")
        started = time.monotonic()
        response = client.get("/readyz")
        elapsed = time.monotonic() - started

    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["ok"] is False and checks["worker"]["ok"] is False
    assert elapsed < 1.0


@pytest.mark.django_db
def test_readyz_tells_a_live_worker_by_its_heartbeat_and_a_stopped_one_at_once(
    client, settings, empty_queues
):
    settings.ASSISTANT_HEALTH_WORKER_CACHE_SECONDS = 0  # a fresh check each time
    beat_worker("one@host")
    beat_worker("two@host")

    both = client.get("/readyz")
    forget_worker("one@host")
    one = client.get("/readyz")
    forget_worker("two@host")
    none = client.get("/readyz")

    assert (both.status_code, worker_detail(both)) == (200, "2 alive")
    assert (one.status_code, worker_detail(one)) == (200, "1 alive")
    assert (none.status_code, worker_detail(none)) == (503, "no live worker")


def worker_detail(response) -> str:
    return response.json()["checks"]["worker"]["detail"]


@pytest.mark.django_db(transaction=True)
def test_a_worker_stopped_cold_in_a_thread_of_a_living_process_stops_its_heartbeat(
    client, settings, empty_queues
):
    # Celery's test worker is terminated, with no worker_shutdown signal: its
    # heartbeat thread went on stamping, so /readyz reported a live worker for
    # as long as the process lived (every later test of the process included).
    settings.ASSISTANT_HEALTH_WORKER_CACHE_SECONDS = 0
    with start_worker(
        celery_app, pool="solo", perform_ping_check=False, loglevel="WARNING",
        shutdown_timeout=60,
    ):  # fmt: skip
        assert wait_until(lambda: client.get("/readyz").status_code == 200, timeout=60)

    assert wait_until(lambda: worker_detail(client.get("/readyz")) == "no live worker", timeout=30)


@pytest.mark.django_db
def test_the_admin_shows_a_banner_while_no_worker_is_alive(admin_client, settings, empty_queues):
    settings.ASSISTANT_HEALTH_WORKER_CACHE_SECONDS = 0
    conversation = Conversation.objects.create(title="Blog admin")
    pages = [
        "/admin/assistant/conversation/",
        f"/admin/assistant/conversation/{conversation.pk}/change/",
    ]
    banner = "No Celery worker is alive"

    without = [admin_client.get(page).content.decode() for page in pages]
    beat_worker("one@host")
    with_one = [admin_client.get(page).content.decode() for page in pages]
    forget_worker("one@host")

    assert all(banner in page for page in without)
    assert not any(banner in page for page in with_one)


@pytest.mark.django_db
def test_readyz_is_503_when_the_database_does_not_answer(client, monkeypatch):
    refuse_database(monkeypatch)

    response = client.get("/readyz?worker=0")

    assert response.status_code == 503
    assert response.json()["checks"]["database"] == {"ok": False, "detail": "OperationalError"}


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_endpoints_answer_get_only(client, path):
    assert client.post(path).status_code == 405
