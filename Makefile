# Set-up and everyday commands. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
WORKER_QUEUES := compaction,celery
# The pins the virtualenv installs; `make test-django61` uses requirements/constraints-django61.txt.
CONSTRAINTS ?= requirements/constraints.txt
# The demo and the local targets run without a deployment's DJANGO_SECRET_KEY
# (settings refuse to start without one unless DEBUG): a public, local-only key.
LOCAL_ENV := DJANGO_SECRET_KEY="$${DJANGO_SECRET_KEY:-insecure-local-demo-key-never-deploy}"

.PHONY: demo test pgvector test-slow test-django61 test-local-embeddings docs bench lint migrate web worker beat services clean browser wheel screenshots

$(VENV)/.base: requirements/base.txt $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements/base.txt -c $(CONSTRAINTS)
	touch $@

$(VENV)/.dev: $(VENV)/.base requirements/dev.txt requirements/build.txt
	$(PIP) -r requirements/dev.txt -c $(CONSTRAINTS)
	touch $@

# The build backend alone, for `make wheel`.
$(VENV)/.build: requirements/build.txt $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements/build.txt -c $(CONSTRAINTS)
	touch $@

# Sphinx, for the documentation site (`make docs`, and `make test`).
$(VENV)/.docs: $(VENV)/.base requirements/docs.txt
	$(PIP) -r requirements/docs.txt -c $(CONSTRAINTS)
	touch $@

# The peers the benchmark replays (LangChain, langmem): `make bench` only.
$(VENV)/.bench: $(VENV)/.dev requirements/bench.txt
	$(PIP) -r requirements/bench.txt -c $(CONSTRAINTS)
	touch $@

## demo: set up, migrate, start a real worker, replay a tool-heavy conversation
demo: $(VENV)/.base
	$(LOCAL_ENV) ASSISTANT_SUMMARIZER="$${ASSISTANT_SUMMARIZER:-offline}" $(PY) manage.py migrate --noinput -v 0
	$(LOCAL_ENV) ASSISTANT_SUMMARIZER="$${ASSISTANT_SUMMARIZER:-offline}" $(PY) manage.py demo

## browser: Debian's chromium for the headless admin test (playwright drives it)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	command -v chromium >/dev/null || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)

## pgvector: build and install the pgvector extension into the local PostgreSQL 15 when the
## server does not list it (.ci/pgvector.sh; a no-op when it does; as root)
pgvector:
	bash .ci/pgvector.sh

## test: set up, `make lint`, build pgvector if missing, check PostgreSQL and Redis answer, run
## the suite but its `slow` tests (in two processes: pytest.ini); tests/test_api_reference.py
## builds the docs as `make docs` does (warnings are errors)
test: lint $(VENV)/.docs browser pgvector
	DJANGO_SETTINGS_MODULE=config.test_settings $(PY) manage.py check_services
	$(VENV)/bin/pytest -m "not slow"

## test-slow: the tests marked `slow` (over 30 s each under load: worker pools and brokers killed and
## restarted, the host projects built from the wheel, the longest real sessions replayed, large tables)
test-slow: $(VENV)/.dev $(VENV)/.docs browser pgvector
	DJANGO_SETTINGS_MODULE=config.test_settings $(PY) manage.py check_services
	$(VENV)/bin/pytest -m slow

## test-django61: the whole suite again on Django 6.1 and Python 3.13, in a Debian 13 root built
## with mmdebstrap and cached in /var/cache (.ci/django61.sh; as root). PYTEST_ARGS narrows it.
test-django61:
	bash .ci/django61.sh $(PYTEST_ARGS)

## test-local-embeddings: the tests of the local embedding model (all-MiniLM-L6-v2 on the CPU,
## the `local-embeddings` extra), in the bench virtualenv that installs it (requirements/bench.txt);
## elsewhere they are deselected
test-local-embeddings: $(VENV)/.bench
	$(VENV)/bin/pytest -m local_embeddings -n 0

## docs: the documentation site in docs/_build/html (warnings are errors)
docs: $(VENV)/.docs
	$(VENV)/bin/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html

## screenshots: refresh the admin screenshots the docs show (docs/_static/admin/)
screenshots: $(VENV)/.dev browser
	DOCS_SCREENSHOTS=1 $(VENV)/bin/pytest tests/test_admin_browser.py

## bench: the benchmark suite (prints ratios; writes docs/benchmarks/results.md and performance.png, which the docs include, and bench/results/)
bench: $(VENV)/.bench
	DJANGO_SETTINGS_MODULE=config.test_settings $(PY) manage.py check_services
	$(PY) -m bench

## wheel: dist/django_assistant_compaction-<version>-py3-none-any.whl (the assistant app only)
wheel: $(VENV)/.build
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .
	rm -rf build *.egg-info

## lint: ruff, the layering contract of .importlinter (import-linter), and mypy on the app
lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

migrate: $(VENV)/.base
	$(LOCAL_ENV) $(PY) manage.py migrate

## web: the admin at http://127.0.0.1:8000/admin/ (static files collected, so it is styled with DEBUG off)
web: migrate
	$(LOCAL_ENV) $(PY) manage.py collectstatic --noinput -v 0
	$(LOCAL_ENV) $(PY) manage.py runserver

worker: $(VENV)/.base
	$(LOCAL_ENV) $(VENV)/bin/celery -A config worker -Q $(WORKER_QUEUES) --loglevel INFO

beat: $(VENV)/.base
	$(LOCAL_ENV) $(VENV)/bin/celery -A config beat --loglevel INFO

clean:
	rm -rf var/broker var/demo.sqlite3*
