# Set-up and everyday commands. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
WORKER_QUEUES := compaction,celery

.PHONY: demo test bench lint migrate web worker beat services clean browser

$(VENV)/.base: requirements/base.txt requirements/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements/base.txt -c requirements/constraints.txt
	touch $@

$(VENV)/.dev: $(VENV)/.base requirements/dev.txt
	$(PIP) -r requirements/dev.txt -c requirements/constraints.txt
	touch $@

## demo: set up, migrate, start a real worker, replay a tool-heavy conversation
demo: $(VENV)/.base
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py demo

## browser: Debian's chromium for the headless admin test (playwright drives it)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	command -v chromium >/dev/null || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)

## test: set up, check PostgreSQL and Redis answer, run the suite
test: $(VENV)/.dev browser
	DJANGO_SETTINGS_MODULE=config.test_settings $(PY) manage.py check_services
	$(VENV)/bin/pytest

## bench: the benchmark suite (prints ratios, writes bench/results/)
bench: $(VENV)/.dev
	DJANGO_SETTINGS_MODULE=config.test_settings $(PY) manage.py check_services
	$(PY) -m bench

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

migrate: $(VENV)/.base
	$(PY) manage.py migrate

web: migrate
	$(PY) manage.py runserver

worker: $(VENV)/.base
	$(VENV)/bin/celery -A config worker -Q $(WORKER_QUEUES) --loglevel INFO

beat: $(VENV)/.base
	$(VENV)/bin/celery -A config beat --loglevel INFO

clean:
	rm -rf var/broker var/demo.sqlite3*
