"""/healthz: cheap liveness. /readyz: database, Redis and a worker's ping
(cached, so callers cannot make workers answer at will); 200 or 503."""

from __future__ import annotations

import pytest

from assistant.ops.health import forget_worker_check
from tests.conftest import wait_until


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
    assert {(answer["ok"], answer["detail"]) for answer in answers} == {(True, "1 answered")}
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
    assert (worker["ok"], worker["detail"]) == (False, "no worker answered")


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


@pytest.mark.django_db
def test_readyz_is_503_when_redis_does_not_answer(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there

    response = client.get("/readyz?worker=0")

    assert response.status_code == 503
    assert response.json()["checks"]["redis"] == {"ok": False, "detail": "ConnectionError"}
    assert response.json()["checks"]["database"]["ok"] is True


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
