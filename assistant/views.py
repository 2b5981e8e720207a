"""HTTP views of the app: health endpoints for docker-compose and load balancers.

- `/healthz`: liveness. This process serves requests; it touches nothing
  else, so it is cheap enough to ask every few seconds and a database or
  worker outage does not get healthy web processes restarted.
- `/readyz`: the deep check, answered within a second whatever is down. The
  database and Redis answer, and (unless skipped) a worker's heartbeat is live:
  read at most once per ASSISTANT_HEALTH_WORKER_CACHE_SECONDS, so callers cannot
  make it query Redis at will.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from assistant.ops.health import Check, check_database, check_redis, live_worker_check
from assistant.settings.app import app_setting

_FALSE = {"0", "false", "no", "off"}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when the database, Redis and (unless skipped) a worker answer,
    else 503, with one entry per check. `?worker=0` (or the setting
    ASSISTANT_HEALTHZ_CHECK_WORKER = False) skips the worker check."""
    check_worker_too = app_setting("ASSISTANT_HEALTHZ_CHECK_WORKER")
    if "worker" in request.GET:
        check_worker_too = request.GET["worker"].strip().lower() not in _FALSE
    checks = [check_database(), check_redis()]
    if check_worker_too:
        # Without Redis no heartbeat can be read: said at once, not after a timeout.
        redis_ok = checks[1].ok
        checks.append(live_worker_check() if redis_ok else Check("worker", False, "redis down"))
    ok = all(check.ok for check in checks)
    body = {
        "status": "ok" if ok else "unavailable",
        "checks": {check.name: _entry(check) for check in checks},
    }
    return JsonResponse(body, status=200 if ok else 503)


def _entry(check: Check) -> dict:
    entry: dict = {"ok": check.ok, "detail": check.detail}
    if check.checked_at is not None:
        entry["checked_at"] = check.checked_at.isoformat()
    return entry
