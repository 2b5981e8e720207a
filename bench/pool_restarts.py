"""A pool child killed every 20 s for 5 minutes on a loaded machine:
how long until the pool is back to full size after each kill, and how many children
billiard killed for starting too slowly ("Timed out waiting for UP message").

`python -m bench.pool_restarts [--minutes 5] [--every 20] [--busy 2]`, with PostgreSQL
and Redis as the test settings read them (TEST_DATABASE_URL, TEST_REDIS_URL). A child
counts as back once it exists and billiard has not killed it within its start-up limit
(worker_proc_alive_timeout, 4 s): the figure is the respawn time, and 0 time-outs
means every replacement was up within that limit of starting."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
CELERY = str(Path(sys.executable).with_name("celery"))
UP_TIMEOUT = "Timed out waiting for UP message"
BURN = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end: pass\n"


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as stream:
        return [int(child) for child in stream.read().split()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pool_restarts", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--every", type=float, default=20, help="seconds between kills")
    parser.add_argument("--busy", type=int, default=2, help="busy processes for the load")
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args(argv)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        # A summarizer with an SDK to load (never called: the endpoint is closed).
        "ASSISTANT_SUMMARIZER": "gemini",
        "GEMINI_API_KEY": "bench-key-never-sent",
        "GEMINI_BASE_URL": "http://127.0.0.1:9/",
    }
    log_path = Path(tempfile.mkdtemp()) / "worker.log"
    command = [
        CELERY, "-A", "config", "worker", "--pool", "prefork", "-c", str(args.concurrency),
        "-Q", "compaction,celery", "-n", "bench-pool@%h", "--loglevel", "INFO",
    ]  # fmt: skip
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            command, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    busy: list[subprocess.Popen] = []
    respawns: list[float] = []
    loads: list[float] = []
    try:
        deadline = time.monotonic() + 120
        while " ready." not in log_path.read_text():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the worker did not start:\n{log_path.read_text()}")
            time.sleep(0.2)
        busy = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(args.busy)]
        end = time.monotonic() + args.minutes * 60
        while time.monotonic() < end:
            time.sleep(args.every)
            victim = children(worker.pid)[0]
            killed = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            while not (
                len(children(worker.pid)) == args.concurrency and victim not in children(worker.pid)
            ):
                if time.monotonic() - killed > 60:
                    raise SystemExit(f"no replacement within 60 s:\n{log_path.read_text()}")
                time.sleep(0.02)
            respawns.append(time.monotonic() - killed)
            loads.append(os.getloadavg()[0])
        time.sleep(6)  # past billiard's start-up limit for the last replacement
    finally:
        for process in busy:
            process.kill()
            process.wait(timeout=10)
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    text = log_path.read_text()
    print(
        json.dumps(
            {
                "kills": len(respawns),
                "respawn_seconds_max": round(max(respawns), 3),
                "respawn_seconds_mean": round(sum(respawns) / len(respawns), 3),
                "up_timeouts": text.count(UP_TIMEOUT),
                "load_1min_min": min(loads),
                "load_1min_max": max(loads),
                "cpus": os.cpu_count(),
            }
        )
    )
    return 0 if text.count(UP_TIMEOUT) == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
