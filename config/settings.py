"""Django settings, driven by environment variables (docs/demo-environment.rst).

The defaults are the embedded ones for the demo: a SQLite file and kombu's
filesystem broker, so `make demo` runs on a machine with no servers. A
deployment sets DATABASE_URL and REDIS_URL / CELERY_BROKER_URL.
"""

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from assistant.settings.app import default
from assistant.settings.cleanup import beat_schedule, cleanup_settings
from config.env import (
    env_bool,
    env_choice,
    env_database,
    env_float,
    env_int,
    env_json_object,
    env_list,
    env_str,
    env_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("ASSISTANT_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        # A constant key is public: anyone could forge admin sessions with it.
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false (the demo, "
            "`make` targets and tests set their own)."
        )
    SECRET_KEY = "insecure-debug-only-key"
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

# HTTPS, by environment (docs/demo-environment.rst): all off by default, so the
# local stack works over plain HTTP; a deployment behind TLS turns them on.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
# Behind a proxy that terminates TLS: trust its X-Forwarded-Proto header (and
# only then: a client could send the header itself to a server it reaches directly).
if env_bool("DJANGO_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # The app's full-text and trigram indexes (Django 6.1 checks it is installed).
    "django.contrib.postgres",
    "assistant",
    "demo",  # `manage.py demo`: this repository only, not in the wheel
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Serves the admin's static files under gunicorn (collected into STATIC_ROOT).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env_database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'demo.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # The demo's web process and worker share the file: wait for locks, and
    # take the write lock up front so concurrent writers queue instead of failing.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL;",
    }
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every request otherwise
# WhiteNoise also serves the apps' own static files (the admin's CSS), so the
# admin is styled however it runs: `runserver` with DEBUG off, or gunicorn
# before any `collectstatic`. Collected files in STATIC_ROOT are served too.
WHITENOISE_USE_FINDERS = True

# --- Redis and Celery -------------------------------------------------------

REDIS_URL = env_url("REDIS_URL", "", {"", "redis", "rediss", "unix"}) or None
CELERY_BROKER_URL = env_url(
    "CELERY_BROKER_URL", REDIS_URL or "filesystem://", {"redis", "rediss", "filesystem", "amqp"}
)
CELERY_BROKER_VISIBILITY_TIMEOUT = env_int(
    "CELERY_BROKER_VISIBILITY_TIMEOUT", default("CELERY_BROKER_VISIBILITY_TIMEOUT"), minimum=10
)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 300, minimum=1)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 240, minimum=1)
if CELERY_TASK_TIME_LIMIT >= CELERY_BROKER_VISIBILITY_TIMEOUT:
    # A task still running when the visibility timeout passes is delivered twice.
    raise ImproperlyConfigured(
        "CELERY_TASK_TIME_LIMIT must be below CELERY_BROKER_VISIBILITY_TIMEOUT"
    )
CELERY_BROKER_TRANSPORT: str | None = None  # the URL's scheme names it
if CELERY_BROKER_URL.startswith("filesystem"):
    # kombu's filesystem channel, with each message written whole before a worker sees it.
    CELERY_BROKER_TRANSPORT = "config.filesystem_broker:Transport"
    _broker_dir = VAR_DIR / "broker"
    (_broker_dir / "processed").mkdir(parents=True, exist_ok=True)
    (_broker_dir / "control").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        # kombu's exchange table; its default is ./control in the working directory.
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": CELERY_BROKER_VISIBILITY_TIMEOUT,
        "socket_connect_timeout": 3,
        "socket_timeout": 10,
    }
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# A task whose worker dies comes back (late ack + reject on worker lost); a
# worker takes one task at a time so a long summary does not hold others hostage.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
# A worker that loses its broker waits for it, however long: it retries from
# start-up and after a loss, never giving up (Celery's default stops after 100
# attempts, about 45 minutes); a supervisor restarts it if it exits anyway
# (docs/operations.rst, "Processes").
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# Publishing happens on the chat path: fail fast when the broker is down; the
# periodic sweep finds the work that was not enqueued.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_ROUTES = {
    "assistant.tasks.post_exchange_task": {"queue": "compaction"},
    "assistant.tasks.generate_parent_summary_task": {"queue": "compaction"},
    "assistant.tasks.prebuild_summary_task": {"queue": "compaction"},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TIMEZONE = "UTC"

# --- Scheduled cleanup (Celery beat): one dict, defaults in assistant/settings/cleanup.py ---

ASSISTANT_CLEANUP = cleanup_settings(env_json_object("ASSISTANT_CLEANUP"))
CELERY_BEAT_SCHEDULE: dict = beat_schedule(ASSISTANT_CLEANUP)
# /readyz checks for a live worker unless this is false (or the request says ?worker=0),
# at most once per ASSISTANT_HEALTH_WORKER_CACHE_SECONDS per web process.
ASSISTANT_HEALTHZ_CHECK_WORKER = env_bool(
    "ASSISTANT_HEALTHZ_CHECK_WORKER", default("ASSISTANT_HEALTHZ_CHECK_WORKER")
)
ASSISTANT_HEALTH_WORKER_CACHE_SECONDS = env_float(
    "ASSISTANT_HEALTH_WORKER_CACHE_SECONDS",
    default("ASSISTANT_HEALTH_WORKER_CACHE_SECONDS"),
    minimum=1.0,
)

# --- LLM providers ----------------------------------------------------------

ANTHROPIC_API_KEY = env_str("ANTHROPIC_API_KEY")
ANTHROPIC_BASE_URL = env_str("ANTHROPIC_BASE_URL") or None
ANTHROPIC_SUMMARY_MODEL = env_str("ANTHROPIC_SUMMARY_MODEL", default("ANTHROPIC_SUMMARY_MODEL"))
ANTHROPIC_CHAT_MODEL = env_str("ANTHROPIC_CHAT_MODEL", default("ANTHROPIC_CHAT_MODEL"))
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or None
OPENAI_SUMMARY_MODEL = env_str("OPENAI_SUMMARY_MODEL", default("OPENAI_SUMMARY_MODEL"))
OPENAI_CHAT_MODEL = env_str("OPENAI_CHAT_MODEL", default("OPENAI_CHAT_MODEL"))
GEMINI_API_KEY = env_str("GEMINI_API_KEY") or env_str("GOOGLE_API_KEY")
GEMINI_BASE_URL = env_str("GEMINI_BASE_URL") or None
GEMINI_SUMMARY_MODEL = env_str("GEMINI_SUMMARY_MODEL", default("GEMINI_SUMMARY_MODEL"))
GEMINI_CHAT_MODEL = env_str("GEMINI_CHAT_MODEL", default("GEMINI_CHAT_MODEL"))
ASSISTANT_SUMMARIZER = env_choice(
    "ASSISTANT_SUMMARIZER",
    default("ASSISTANT_SUMMARIZER"),
    {"auto", "anthropic", "openai", "gemini", "gemini_interactions", "offline"},
)
# Semantic recall's embedding model (docs/operations.rst, "Where embeddings come from").
ASSISTANT_EMBEDDINGS = env_choice(
    "ASSISTANT_EMBEDDINGS",
    default("ASSISTANT_EMBEDDINGS"),
    {"off", "openai", "gemini", "voyage", "local"},
)
ASSISTANT_EMBEDDING_MODEL = env_str(
    "ASSISTANT_EMBEDDING_MODEL", default("ASSISTANT_EMBEDDING_MODEL")
)
ASSISTANT_EMBEDDING_DIMENSIONS = env_int(
    "ASSISTANT_EMBEDDING_DIMENSIONS", default("ASSISTANT_EMBEDDING_DIMENSIONS"), minimum=0
)
ASSISTANT_EMBEDDING_DAILY_TOKENS = env_int(
    "ASSISTANT_EMBEDDING_DAILY_TOKENS", default("ASSISTANT_EMBEDDING_DAILY_TOKENS"), minimum=0
)
VOYAGE_API_KEY = env_str("VOYAGE_API_KEY")
VOYAGE_BASE_URL = env_str("VOYAGE_BASE_URL") or None
ASSISTANT_SUMMARY_FALLBACK = env_bool(
    "ASSISTANT_SUMMARY_FALLBACK", default("ASSISTANT_SUMMARY_FALLBACK")
)
ASSISTANT_DEFAULT_CONTEXT_WINDOW = env_int(
    "ASSISTANT_DEFAULT_CONTEXT_WINDOW", default("ASSISTANT_DEFAULT_CONTEXT_WINDOW"), minimum=1
)
LLM_TIMEOUT_SECONDS = env_float("LLM_TIMEOUT_SECONDS", default("LLM_TIMEOUT_SECONDS"), minimum=0.1)
LLM_MAX_RETRIES = env_int("LLM_MAX_RETRIES", default("LLM_MAX_RETRIES"), minimum=0)
# Gemini's SDK backs off on its own schedule (it ignores retry-after): bound each wait.
LLM_RETRY_INITIAL_DELAY = env_float(
    "LLM_RETRY_INITIAL_DELAY", default("LLM_RETRY_INITIAL_DELAY"), minimum=0.0
)
LLM_RETRY_MAX_DELAY = env_float("LLM_RETRY_MAX_DELAY", default("LLM_RETRY_MAX_DELAY"), minimum=0.0)
SUMMARY_MAX_OUTPUT_TOKENS = env_int(
    "SUMMARY_MAX_OUTPUT_TOKENS", default("SUMMARY_MAX_OUTPUT_TOKENS"), minimum=64
)
# First delay before the post-exchange task retries a rate-limited or
# overloaded summarizer; doubled at each retry, at most 300 s (far below the
# broker's visibility timeout).
ASSISTANT_PROVIDER_RETRY_SECONDS = env_float(
    "ASSISTANT_PROVIDER_RETRY_SECONDS", default("ASSISTANT_PROVIDER_RETRY_SECONDS"), minimum=0.0
)
# Deliveries of one task (first run, retries, redeliveries after a crash)
# before it is dropped: ends the loop of a task that kills its worker.
ASSISTANT_MAX_TASK_DELIVERIES = env_int(
    "ASSISTANT_MAX_TASK_DELIVERIES", default("ASSISTANT_MAX_TASK_DELIVERIES"), minimum=1
)
# Each Redis round trip of an enqueue on the chat path (at most two) is bounded by this.
ASSISTANT_ENQUEUE_TIMEOUT_SECONDS = env_float(
    "ASSISTANT_ENQUEUE_TIMEOUT_SECONDS", default("ASSISTANT_ENQUEUE_TIMEOUT_SECONDS"), minimum=0.05
)
# While a task of a conversation waits in the queue, enqueueing it again is
# skipped; past this the marker expires and the sweep may enqueue it again.
ASSISTANT_QUEUED_MARKER_SECONDS = env_int(
    "ASSISTANT_QUEUED_MARKER_SECONDS", default("ASSISTANT_QUEUED_MARKER_SECONDS"), minimum=1
)

# --- Compaction thresholds: one dict, defaults in assistant/settings/conf.py ------------

ASSISTANT_COMPACTION = env_json_object("ASSISTANT_COMPACTION")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO").upper()},
    # The SDKs log every request at INFO; keep their warnings and errors.
    "loggers": {name: {"level": "WARNING"} for name in ("httpx", "httpx2", "httpcore")},
}
