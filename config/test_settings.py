"""Test settings: the real PostgreSQL and Redis on localhost, overridable by env.

TEST_DATABASE_URL and TEST_REDIS_URL point the suite elsewhere (for example
at `docker compose up -d postgres redis`).

The suite runs in pytest-xdist workers (pytest.ini): pytest-django gives each
worker a test database of its own (the name suffixed `_gw0`, `_gw1`...), and
the Redis database here is TEST_REDIS_URL's plus the worker's number, so each
worker's broker, result backend and Celery workers (threads, subprocesses and
the packaged host's, which all read these settings) see only its own queues.
"""

import os
from urllib.parse import urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

from config.env import env_database, env_float, env_str

os.environ.setdefault("DJANGO_SECRET_KEY", "test-settings-key-not-for-any-deployment")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
os.environ.setdefault("CELERY_BROKER_VISIBILITY_TIMEOUT", "30")
os.environ.setdefault("CELERY_TASK_TIME_LIMIT", "20")
os.environ.setdefault("CELERY_TASK_SOFT_TIME_LIMIT", "15")

from config.settings import *  # noqa: F403

# Redis's default `databases 16`: the numbers a worker may take are 0-15.
REDIS_DATABASES = 16


def worker_redis_url(url: str, worker: str) -> str:
    """`url` with its database number moved up by the xdist worker's number
    (`gw1` -> +1); `url` itself outside xdist."""
    if not worker:
        return url
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    number = base + int(worker.removeprefix("gw"))
    if number >= REDIS_DATABASES:
        raise ImproperlyConfigured(
            f"TEST_REDIS_URL {url!r}: xdist worker {worker} would use Redis database "
            f"{number}; point TEST_REDIS_URL at a lower database or run fewer workers (-n)"
        )
    return urlunsplit(parts._replace(path=f"/{number}"))


DATABASES = {
    "default": env_database("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
}
DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME", "test_assistant")}

# Database 14, and 15 for the second xdist worker.
REDIS_URL = worker_redis_url(
    env_str("TEST_REDIS_URL", "redis://127.0.0.1:6379/14"), env_str("PYTEST_XDIST_WORKER")
)
CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_TRANSPORT = None  # the URL's own; the demo's filesystem transport is not Redis's
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 30,
    "socket_connect_timeout": 3,
    "socket_timeout": 10,
    # Redelivered messages come back within the test instead of after a minute.
    "unacked_restore_throttle": 0,
}
CELERY_RESULT_BACKEND = REDIS_URL

# No test may reach a real provider: a key counts only when its endpoint is
# the loopback fake server of tests/fake_llm.py (a test sets both, or passes
# them to a worker subprocess through the environment).
if not (ANTHROPIC_BASE_URL or "").startswith("http://127.0.0.1:"):  # noqa: F405
    ANTHROPIC_API_KEY = ""
if not (GEMINI_BASE_URL or "").startswith("http://127.0.0.1:"):  # noqa: F405
    GEMINI_API_KEY = ""
if not (VOYAGE_BASE_URL or "").startswith("http://127.0.0.1:"):  # noqa: F405
    VOYAGE_API_KEY = ""
ASSISTANT_SUMMARIZER = env_str("ASSISTANT_SUMMARIZER", "offline")
# The app's default: the fake answers in milliseconds, and a loaded machine must not
# turn an answer into a timeout and a retry. A test of timeouts sets its own, shorter.
LLM_TIMEOUT_SECONDS = env_float("TEST_LLM_TIMEOUT_SECONDS", 30.0)
LLM_MAX_RETRIES = 2
# The app's 0.5 s bounds a down or hung Redis on the chat path; the tests' own Redis
# answers, and a loaded machine must not turn a publish into an enqueue_failed. The
# tests of a hung Redis set the app's bound themselves.
ASSISTANT_ENQUEUE_TIMEOUT_SECONDS = 10.0

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
