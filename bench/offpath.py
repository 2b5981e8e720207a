"""Summaries off the chat path (docs/benchmarks.rst): an agent loop
through the real services, with a real Celery worker process, against the same loop
with every summary made inline by the pre-call hook (no worker).

The loop: 45 user turns of 4 model calls of MODEL_SECONDS each
(three tool calls reading 20 KB pages, then the answer), the host recording
the usage correctly, the post-exchange task enqueued after each turn. The
summarizer is the real anthropic SDK against a loopback fake server that
takes SUMMARIZER_LATENCIES seconds per call (each latency is a run of its own),
in both processes (the worker is pointed at it through the environment).
Besides the hook's added time and the chat's cost it counts the summaries
paid for (summarizer calls), used (adopted into a request), never used, and
the shifts the offline summarizer wrote. Import after django.setup()."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from celery import current_app
from django.conf import settings
from django.test import override_settings

from assistant.models import CompactionEvent, Conversation
from assistant.providers.offline.provider import OFFLINE_MODEL
from assistant.services import add_message, build_context, ensure_context_summary, finish_exchange
from assistant.settings.conf import compaction_config
from bench.measures import worker_command
from bench.payload import CostMeter
from tests.fake_llm import FakeLLM, Reply, ok, slow

ROOT = Path(__file__).resolve().parent.parent
TURNS, CALLS, RESULT_CHARS = 45, 4, 20_000
# A summarizer answering at once, and one answering in about the time a real
# Haiku call on a long slice takes.
SUMMARIZER_LATENCIES = (0.0, 3.0)
# The chat model's own latency per call in this loop.
MODEL_SECONDS = 0.5
# The default settings (the measure was first taken with them).
COMPACTION: dict[str, Any] = {}


class SlowSummarizer(FakeLLM):
    """Every answer takes `seconds` (a summary model's latency)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def _next_reply(self, kind: str, summary: bool = False) -> Reply:
        return slow(self.seconds, ok())


def page(turn: int, call: int) -> str:
    """A 20 KB tool result, distinct per call (no two are deduplicated)."""
    row = f"<tr><td>post {turn}-{call}</td><td>draft</td><td>ok</td></tr>\n"
    head = f"<h1>Section {turn}, page {call}</h1>\n"
    return (head + row * (RESULT_CHARS // len(row) + 1))[:RESULT_CHARS]


def chat_loop(label: str, *, with_worker: bool) -> dict[str, Any]:
    """One conversation of TURNS x CALLS model calls; the hook timed on each."""
    conversation = Conversation.objects.create(title=label, system_prompt="You audit a blog.")
    hook_ms: list[float] = []
    sent = 0  # chat input tokens: what deferring a shift to the worker costs
    trigger = compaction_config().CONTEXT_TOKEN_THRESHOLD
    newest_step, over_bound = 0, 0
    meter = CostMeter(trigger=trigger)  # the bench's token rule and cost under caching
    started = time.perf_counter()
    for turn in range(TURNS):
        add_message(conversation, "user", f"Audit section {turn} of the blog.")
        for call in range(CALLS):
            before = time.perf_counter()
            ensure_context_summary(conversation)
            hook_ms.append((time.perf_counter() - before) * 1000)
            context = build_context(conversation)
            meter.record(context.to_anthropic())  # validated as it would be sent
            time.sleep(MODEL_SECONDS)
            usage = {"input_tokens": context.tokens.total}
            sent += context.tokens.total
            over_bound += context.tokens.total > trigger + newest_step
            if call == CALLS - 1:
                add_message(conversation, "assistant", f"Section {turn} is fine.", **usage)
                continue
            tool_call = {
                "id": f"toolu_{turn}_{call}",
                "name": "fetch_page",
                "arguments": {"section": turn, "page": call},
            }
            step = add_message(conversation, "assistant", "", tool_calls=[tool_call], **usage)
            call_id = tool_call["id"]
            result = add_message(conversation, "tool", page(turn, call), tool_call_id=call_id)
            newest_step = step.token_estimate + result.token_estimate
        if with_worker:
            finish_exchange(conversation)
    seconds = time.perf_counter() - started
    events = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    shifts = list(events.values_list("details", flat=True))
    prebuilt = sum(1 for details in shifts if (details or {}).get("prebuilt"))
    offline = events.filter(summarizer_model=OFFLINE_MODEL).count()
    ordered = sorted(hook_ms)
    return {
        "calls": len(hook_ms),
        "shifts": len(shifts),
        "chat_path_summaries": len(shifts) - prebuilt,
        "prebuilt_adopted": prebuilt,
        # Shifts the summarizer's own summary made (the rest: the offline one).
        "summaries_used": len(shifts) - offline,
        "offline_fallbacks": offline,
        "hook_ms_p50": round(statistics.median(ordered), 1),
        "hook_ms_p95": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
        "hook_ms_max": round(ordered[-1], 1),
        "chat_input_tokens": sent,
        "chat_cost_under_caching": round(meter.cost),
        "requests_over_trigger_plus_newest_step": over_bound,
        "seconds": round(seconds, 1),
    }


def _start_worker(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        worker_command(2),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_ready(timeout: float = 60) -> None:
    """Until the worker answers a ping (it consumes the broker's queues)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if current_app.control.ping(timeout=0.5):
            return
    raise RuntimeError("the bench's Celery worker did not start")


def off_the_chat_path(summarizer_seconds: float) -> dict[str, Any]:
    """The loop with a real worker process, then the same loop inline."""
    fake = SlowSummarizer(summarizer_seconds).start()
    overrides = {
        "ASSISTANT_SUMMARIZER": "anthropic",
        "ANTHROPIC_API_KEY": "bench-key",
        "ANTHROPIC_BASE_URL": fake.url,
        "ASSISTANT_COMPACTION": COMPACTION,
    }
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "bench.settings"),
        "ASSISTANT_SUMMARIZER": "anthropic",
        "ANTHROPIC_API_KEY": "bench-key",
        "ANTHROPIC_BASE_URL": fake.url,
        "ASSISTANT_COMPACTION": json.dumps(COMPACTION),
    }
    try:
        with override_settings(**overrides):
            redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
            worker = _start_worker(env)
            try:
                _wait_ready()
                with_worker = chat_loop("off the chat path: worker", with_worker=True)
            finally:
                worker.terminate()
                try:
                    worker.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
            redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
            calls_with_worker = fake.count("anthropic.messages")
            inline = chat_loop("off the chat path: inline", with_worker=False)
            calls_inline = fake.count("anthropic.messages") - calls_with_worker
    finally:
        fake.stop()
    for loop, calls in ((with_worker, calls_with_worker), (inline, calls_inline)):
        loop["summarizer_calls"] = calls  # each answered: the summaries paid for
        loop["summaries_never_used"] = calls - loop["summaries_used"]
    return {
        "turns": TURNS,
        "calls_per_turn": CALLS,
        "result_chars": RESULT_CHARS,
        "model_seconds": MODEL_SECONDS,
        "summarizer_seconds": summarizer_seconds,
        "compaction": COMPACTION,
        "worker": with_worker,
        "inline": inline,
    }


def start_runs() -> list[tuple[float, subprocess.Popen, Path]]:
    """One process per summarizer latency, started at once (`python -m bench
    --offpath-run SECONDS`): the loops mostly wait on their model calls, so they run
    beside the rest of the bench. Each on a Redis db of its own, so that its worker
    takes no other loop's tasks; the database is shared (their conversations are
    their own)."""
    base, _, db = settings.REDIS_URL.rpartition("/")
    runs = []
    for i, seconds in enumerate(SUMMARIZER_LATENCIES):
        out = Path(tempfile.mkdtemp(prefix="offpath-")) / "run.json"
        env = {**os.environ, "BENCH_REDIS_URL": f"{base}/{(int(db) - 1 - i) % 16}"}
        command = [sys.executable, "-m", "bench", "--offpath-run", str(seconds), str(out)]
        log = open(out.with_suffix(".log"), "w")  # noqa: SIM115  (the child writes it)
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        runs.append((seconds, process, out))
    return runs


def finish_runs(runs: list[tuple[float, subprocess.Popen, Path]]) -> list[dict[str, Any]]:
    """Each run's result, in the order of SUMMARIZER_LATENCIES, once its process ended."""
    results = []
    for seconds, process, out in runs:
        if process.wait() != 0 or not out.exists():
            log = out.with_suffix(".log").read_text()[-4000:]
            raise RuntimeError(f"the off-path run at {seconds:g} s failed:\n{log}")
        results.append(json.loads(out.read_text()))
    return results


def write_run(summarizer_seconds: float, out: str) -> None:
    """`--offpath-run`: one latency's loops, their result written as JSON."""
    Path(out).write_text(json.dumps(off_the_chat_path(summarizer_seconds)))
