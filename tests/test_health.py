"""/healthz: database, Redis and a worker's ping; 200 when all answer, else 503."""

from __future__ import annotations

import pytest


def test_healthz_is_ok_when_the_database_redis_and_a_worker_answer(celery_worker, client):
    response = client.get("/healthz")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"] == {"ok": True, "detail": "postgresql"}
    assert body["checks"]["redis"] == {"ok": True, "detail": "ping"}
    assert body["checks"]["worker"] == {"ok": True, "detail": "1 answered"}
    assert response["Cache-Control"].startswith("max-age=0")


@pytest.mark.django_db
def test_healthz_is_503_when_no_worker_answers(client, empty_queues):
    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "checks": {
            "database": {"ok": True, "detail": "postgresql"},
            "redis": {"ok": True, "detail": "ping"},
            "worker": {"ok": False, "detail": "no worker answered"},
        },
    }


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["0", "false", "no"])
def test_the_worker_check_can_be_skipped_by_query(client, value):
    response = client.get(f"/healthz?worker={value}")

    assert response.status_code == 200
    assert set(response.json()["checks"]) == {"database", "redis"}


@pytest.mark.django_db
def test_the_worker_check_can_be_skipped_by_setting_and_asked_for_again(client, settings):
    settings.ASSISTANT_HEALTHZ_CHECK_WORKER = False

    skipped = client.get("/healthz")
    asked = client.get("/healthz?worker=1")

    assert (skipped.status_code, set(skipped.json()["checks"])) == (200, {"database", "redis"})
    assert asked.status_code == 503
    assert asked.json()["checks"]["worker"]["ok"] is False


@pytest.mark.django_db
def test_healthz_is_503_when_redis_does_not_answer(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there

    response = client.get("/healthz?worker=0")

    assert response.status_code == 503
    assert response.json()["checks"]["redis"] == {"ok": False, "detail": "ConnectionError"}
    assert response.json()["checks"]["database"]["ok"] is True


@pytest.mark.django_db
def test_healthz_is_503_when_the_database_does_not_answer(client, monkeypatch):
    from django.db import OperationalError, connection

    def refuse(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", refuse)

    response = client.get("/healthz?worker=0")

    assert response.status_code == 503
    assert response.json()["checks"]["database"] == {"ok": False, "detail": "OperationalError"}


@pytest.mark.django_db
def test_healthz_answers_get_only(client):
    assert client.post("/healthz").status_code == 405
