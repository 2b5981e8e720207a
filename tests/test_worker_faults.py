"""A worker that comes back: pool children restarted under load, a broker that goes
away and returns, and what the operator sees meanwhile.

Real worker subprocesses (prefork pool), real PostgreSQL, a Redis of the test's own
where the test stops it. Every wait is bounded, and a bound only catches a hang."""

from __future__ import annotations

import configparser
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery.worker.consumer import Consumer

from assistant.ops.consumer import ReconnectingConsumer
from assistant.ops.health import forget_worker_check
from assistant.services import finish_exchange
from assistant.tasks import reconnect_after_a_broker_loss
from config.celery import app as celery_app
from tests.conftest import use_broker, wait_until
from tests.test_faults import (
    children,
    free_port,
    lock_waiters,
    processed,
    redis_server,
    row_locks,
    tool_heavy_conversation,
    worker_process,
)
from tests.test_packaging import readme_command

# billiard's start-up limit: a child that has not said it is up by then is killed.
UP_TIMEOUT = "Timed out waiting for UP message"
# A summarizer with a key, so the worker has an SDK to load: Gemini's, which nothing
# else of this repository's worker imports (its demo imports Anthropic's). Its endpoint
# is the loopback (config/test_settings.py keeps only such keys); no test calls it.
GEMINI_SUMMARIZER = {
    "ASSISTANT_SUMMARIZER": "gemini",
    "GEMINI_API_KEY": "test-key-never-sent",
    "GEMINI_BASE_URL": "http://127.0.0.1:9/",
}
# A compiled library google-genai loads (through websockets): in a process's memory
# map once the SDK is imported.
GEMINI_SDK_LIBRARY = "websockets/speedups"


def wait_ready(log: Path, process: subprocess.Popen) -> None:
    def ready() -> bool:
        assert process.poll() is None, log.read_text()
        return " ready." in log.read_text()

    assert wait_until(ready, timeout=120, interval=0.2), log.read_text()


def mapped_libraries(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as maps:
        return maps.read()


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """Busy processes for the block's duration (each also bounded by itself)."""
    burn = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass\n"
    busy = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(processes)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait(timeout=10)


# --- pool children restarted under load --------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_worker_imports_the_summarizers_sdk_before_it_forks_its_pool(empty_queues, tmp_path):
    """A child inherits the SDK instead of importing it (seconds on a loaded machine)."""
    with worker_process("sdk", tmp_path, extra_env=GEMINI_SUMMARIZER) as worker:
        log = tmp_path / "worker-sdk.log"
        wait_ready(log, worker)

        assert GEMINI_SDK_LIBRARY in mapped_libraries(worker.pid), log.read_text()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_pool_children_killed_under_load_come_back_and_serve(empty_queues, tmp_path):
    """A child killed again and again on a busy machine is replaced, every
    replacement starts within billiard's limit, and both children then work."""
    first, second = tool_heavy_conversation("one"), tool_heavy_conversation("two")
    log = tmp_path / "worker-pool.log"
    with worker_process("pool", tmp_path, extra_env=GEMINI_SUMMARIZER, concurrency=2) as worker:
        wait_ready(log, worker)
        with cpu_load(2):
            for _ in range(6):
                victim = children(worker.pid)[0]
                os.kill(victim, signal.SIGKILL)
                assert wait_until(
                    lambda victim=victim: (
                        len(children(worker.pid)) == 2 and victim not in children(worker.pid)
                    ),
                    timeout=30,
                ), log.read_text()
                time.sleep(1)  # the next kill comes once this replacement has started
            # Both children take a task (each then blocks on the rows the test holds):
            # neither is still starting or was killed for starting too slowly.
            with row_locks(first.pk), row_locks(second.pk):
                finish_exchange(first)
                finish_exchange(second)
                assert wait_until(lambda: len(lock_waiters()) == 2, timeout=90), log.read_text()
        assert wait_until(lambda: processed(first) and processed(second), timeout=60)

    assert UP_TIMEOUT not in log.read_text()


# --- the broker goes away and comes back --------------------------------------------

# The outage of the fault run that found the worker dead: long enough for the
# consumer to lose its connection and back off several times (2, 4, 6... s between
# attempts). Redis restarts empty (no persistence): the work published after its
# return is what the worker must take.
OUTAGE_SECONDS = 40


@pytest.mark.slow
@pytest.mark.parametrize("in_flight", [False, True], ids=["idle", "task-in-flight"])
@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_redis_dies_and_returns_works_again_unaided(settings, tmp_path, in_flight):
    """Redis is killed (SIGKILL) under a worker with two children. `task-in-flight`: a
    task is running, delivered and not yet acknowledged, so the broken connection holds
    an unacknowledged delivery. Celery 5.7 and kombu 5.7 then stopped the worker with
    "Unrecoverable error: AttributeError(... 'hostname')" (3 runs of 3) instead of
    reconnecting: assistant/ops/consumer.py says why and what mends it."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    working = celery_app.conf.broker_url
    settings.CELERY_BROKER_URL = url
    use_broker(url)
    before, after = tool_heavy_conversation("before"), tool_heavy_conversation("after")
    busy = tool_heavy_conversation("in flight")
    log = tmp_path / "worker-outage.log"
    try:
        with ExitStack() as redis_up:
            redis_up.enter_context(redis_server(port))
            # Started as the README starts it: mingle, gossip and heartbeat on.
            alone = {"TEST_REDIS_URL": url, "PYTEST_XDIST_WORKER": ""}  # database 0, not 0+N
            with worker_process(
                "outage", tmp_path, extra_env=alone, lean=False, concurrency=2
            ) as worker:
                wait_ready(log, worker)
                finish_exchange(before)
                assert wait_until(lambda: processed(before), timeout=60), log.read_text()

                with ExitStack() as held:
                    if in_flight:
                        held.enter_context(row_locks(busy.pk))
                        finish_exchange(busy)
                        assert wait_until(lambda: lock_waiters(), timeout=60), log.read_text()
                    redis_up.close()  # Redis killed
                    outage_ends = time.monotonic() + OUTAGE_SECONDS
                    assert wait_until(
                        lambda: "Connection to broker lost" in log.read_text(), timeout=30
                    ), log.read_text()
                # Celery cancels a running late-acknowledged task whose connection it lost;
                # Redis restarts empty, so the sweep is what finds that exchange again.
                while time.monotonic() < outage_ends:
                    assert worker.poll() is None, log.read_text()
                    time.sleep(0.5)

                with redis_server(port):  # back, on the same port
                    returned = time.monotonic()
                    use_broker(url)
                    finish_exchange(after)
                    assert wait_until(lambda: processed(after), timeout=60), log.read_text()
                    assert time.monotonic() - returned < 60
                    assert worker.poll() is None
        assert "Unrecoverable error" not in log.read_text()
    finally:
        use_broker(working)


class HostConsumer(Consumer):
    """A host's own `worker_consumer`."""


@pytest.mark.parametrize(
    ("configured", "expected_bases"),
    [
        ("celery.worker.consumer:Consumer", (ReconnectingConsumer,)),
        (HostConsumer, (ReconnectingConsumer, HostConsumer)),
        (ReconnectingConsumer, (ReconnectingConsumer,)),
    ],
)
def test_the_worker_builds_its_consumer_with_the_reconnect_guard(configured, expected_bases):
    """worker_init, before the worker builds its consumer, swaps in the guarded class:
    Celery's own becomes ReconnectingConsumer, a host's own gets it mixed in."""
    worker = SimpleNamespace(consumer_cls=configured)

    reconnect_after_a_broker_loss(sender=worker)

    assert issubclass(worker.consumer_cls, expected_bases)
    assert worker.consumer_cls.__mro__.index(ReconnectingConsumer) == (
        0 if configured is ReconnectingConsumer or isinstance(configured, str) else 1
    )


# --- under a supervisor ------------------------------------------------------------

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "systemd"
# Above it, a warm shutdown may wait for a running task to end.
TASK_TIME_LIMIT = 300


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string((DEPLOY / name).read_text())
    return parser


@pytest.mark.parametrize(
    ("name", "command"),
    [
        ("assistant-worker.service", "celery -A mysite worker"),
        ("assistant-beat.service", "celery -A mysite beat"),
    ],
)
def test_the_systemd_units_run_the_readmes_commands_and_always_restart(name, command):
    """docs/operations.rst shows these files: each starts the README's command from the
    project's virtualenv and is started again after any exit, for ever."""
    parsed = unit(name)
    service = parsed["Service"]
    executable, *arguments = shlex.split(service["ExecStart"])

    assert Path(executable).name == "celery" and Path(executable).parent.name == "bin"
    assert ["celery", *arguments] == readme_command(command)
    assert (service["Restart"], parsed["Unit"]["StartLimitIntervalSec"]) == ("always", "0")
    assert float(service["RestartSec"]) > 0
    assert parsed["Install"]["WantedBy"] == "multi-user.target"
    if "worker" in name:  # a warm shutdown: SIGTERM to the main process, running tasks end
        assert service["KillMode"] == "mixed"
        assert int(service["TimeoutStopSec"]) > TASK_TIME_LIMIT


# --- what the operator sees ---------------------------------------------------------

# The operator's bound: a dead worker is reported within this (heartbeat life plus the
# check's cache: 15 + 10 s by default).
DEAD_WORKER_REPORTED_SECONDS = 30


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_readyz_reports_a_killed_worker_within_thirty_seconds(client, empty_queues, tmp_path):
    forget_worker_check()
    log = tmp_path / "worker-watched.log"
    with worker_process("watched", tmp_path) as worker:
        wait_ready(log, worker)
        assert wait_until(lambda: client.get("/readyz").status_code == 200, timeout=60)

        os.killpg(worker.pid, signal.SIGKILL)  # no clean shutdown: its stamp just ages
        worker.wait(timeout=10)
        killed = time.monotonic()
        assert wait_until(lambda: client.get("/readyz").status_code == 503, timeout=90)
        reported = time.monotonic() - killed
        print(f"\na killed worker reported by /readyz after {reported:.1f} s")

    assert client.get("/readyz").json()["checks"]["worker"]["detail"] == "no live worker"
    assert reported < DEAD_WORKER_REPORTED_SECONDS
