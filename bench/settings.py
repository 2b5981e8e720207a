"""Benchmark settings: the test settings, on a database and a Redis db of their own.

BENCH_DATABASE_URL and BENCH_REDIS_URL point the benchmark elsewhere.
"""

from config.env import env_database, env_str
from config.test_settings import *  # noqa: F403

DATABASES = {
    "default": env_database(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/bench_assistant"
    )
}
DATABASES["default"]["CONN_MAX_AGE"] = 0

REDIS_URL = env_str("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_TRANSPORT = None  # the URL's own; the demo's filesystem transport is not Redis's
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "ERROR"},
}

# The off-the-chat-path lines' summarizer takes up to 3 s (bench/offpath.py): the
# test settings' 2-second timeout would cut every worker call short.
LLM_TIMEOUT_SECONDS = 10.0
