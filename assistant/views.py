"""HTTP views of the app: `/healthz` for docker-compose and load balancers."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from assistant.health import check_database, check_redis, check_worker

_FALSE = {"0", "false", "no", "off"}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database, Redis and (unless skipped) a worker answer,
    else 503, with one entry per check. `?worker=0` (or the setting
    ASSISTANT_HEALTHZ_CHECK_WORKER = False) skips the worker ping, for load
    balancers that only want to know this web process can serve."""
    check_worker_too = getattr(settings, "ASSISTANT_HEALTHZ_CHECK_WORKER", True)
    if "worker" in request.GET:
        check_worker_too = request.GET["worker"].strip().lower() not in _FALSE
    checks = [check_database(), check_redis()]
    if check_worker_too:
        checks.append(
            check_worker(timeout=getattr(settings, "ASSISTANT_HEALTHZ_WORKER_TIMEOUT", 1.0))
        )
    ok = all(check.ok for check in checks)
    body = {
        "status": "ok" if ok else "unavailable",
        "checks": {check.name: {"ok": check.ok, "detail": check.detail} for check in checks},
    }
    return JsonResponse(body, status=200 if ok else 503)
