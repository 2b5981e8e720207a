"""The measures that need the product: our strategy replayed through the real
services on PostgreSQL, query counts and timings, concurrent callers, and a
real Celery worker on Redis. Django must be set up before these run."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from bench.fake_summarizer import FakeSummarizer, make_provider
from bench.payload import CostMeter
from bench.record import Replay
from demo.workload import Workload

ROOT = Path(__file__).resolve().parent.parent


# --- database ---------------------------------------------------------------


# Seven-digit message ids, as a store that has kept a few hundred long conversations.
MESSAGE_IDS_FROM = 1_000_000


def prepare_database() -> None:
    """Create the benchmark database if needed, migrate it, and empty it."""
    import psycopg
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    db = settings.DATABASES["default"]
    params = {
        "host": db.get("HOST") or "127.0.0.1",
        "port": db.get("PORT") or 5432,
        "user": db.get("USER") or "postgres",
        "password": db.get("PASSWORD") or None,
        "dbname": "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**{k: v for k, v in params.items() if v is not None}) as admin:
        exists = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]
        ).fetchone()
        if not exists:
            admin.execute(f'CREATE DATABASE "{db["NAME"]}"')
    call_command("migrate", verbosity=0, interactive=False)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE assistant_conversation RESTART IDENTITY CASCADE")
        # Handles (`ref m1234567`) are sent in requests and sized like any text, so the
        # width of a message's id moves what a budget holds: ids of a store in use, the
        # same whatever ran before in the run, not ids from 1.
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('assistant_message', 'id'), %s)",
            [MESSAGE_IDS_FROM],
        )


def new_conversation(workload: Workload, title: str) -> Any:
    from assistant.models import Conversation

    return Conversation.objects.create(title=title, system_prompt=workload.system_prompt)


def bulk_load(workload: Workload, title: str) -> Any:
    """The whole workload as stored messages, in one INSERT (for the runs that
    measure a given size, not the replay): the same fields add_message sets."""
    from assistant.models import Message
    from assistant.text.tokens import estimate_message_tokens

    conversation = new_conversation(workload, title)
    calls: dict[str, dict[str, Any]] = {}
    rows = []
    for message in workload.messages:
        tool_calls = None
        if message.get("tool_calls"):
            tool_calls = [
                {**c, "arguments": json.loads(c["arguments"])} for c in message["tool_calls"]
            ]
            calls.update((c["id"], c) for c in tool_calls)
        extra: dict[str, Any] = {}
        if message["role"] == "tool":
            call = calls[message["tool_call_id"]]
            extra = {
                "tool_call_id": call["id"],
                "tool_name": call["name"],
                "tool_arguments": call["arguments"],
            }
        estimate = estimate_message_tokens(message["content"], tool_calls)
        rows.append(
            Message(
                conversation=conversation,
                role=message["role"],
                content=message["content"],
                tool_calls=tool_calls,
                token_estimate=estimate,
                original_token_estimate=estimate,
                **extra,
            )
        )
    Message.objects.bulk_create(rows, batch_size=1000)
    return conversation


# --- the fake summarizer, injected ------------------------------------------------


@contextlib.contextmanager
def use_fake(summarizer: FakeSummarizer) -> Iterator[None]:
    """Every summary the engine asks for goes to `summarizer`: the provider
    `assistant.providers.get_provider()` returns is the fake."""
    from assistant import providers as llm

    provider = make_provider(summarizer)
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            mock.patch.object(llm, "get_provider", lambda *a, **k: provider, create=True)
        )
        summarize = getattr(llm, "summarize", None)
        if summarize is not None:
            before = summarizer.call_count
            with contextlib.suppress(Exception):
                summarize("[user] probe of the benchmark's summarizer")
            reached = summarizer.call_count > before
            del summarizer.calls[before:]
        else:
            reached = False
        if not reached:
            # assistant.providers resolves its provider another way: replace summarize itself.
            def fake_summarize(transcript: str, previous_summary: str | None = None, **_: Any):
                return provider.summarize(transcript, previous_summary=previous_summary)

            stack.enter_context(mock.patch.object(llm, "summarize", fake_summarize, create=True))
        yield


# --- our strategy, replayed -------------------------------------------------------


def _leading_part(context: Any) -> str:
    """The system blocks of the Anthropic request (system prompt and summaries)."""
    try:
        request = context.to_anthropic()
        return json.dumps(request.get("system"), sort_keys=True, ensure_ascii=False)
    except ImportError:
        return context.prefix


def replay_ours(workload: Workload, summarizer: FakeSummarizer, *, name: str = "ours") -> Replay:
    """Replay through add_message; before each model call the pre-exchange
    hook and build_context, after each turn the post-exchange pipeline (run
    in-process here; the worker is measured on its own)."""
    from django.utils import timezone

    from assistant.models import Conversation
    from assistant.services import (
        add_message,
        build_context,
        ensure_context_summary,
        process_exchange,
    )

    replay = Replay(name, workload.name)
    meter = CostMeter()
    started = time.perf_counter()
    hook_seconds: list[float] = []
    build_seconds: list[float] = []
    post_seconds: list[float] = []
    with use_fake(summarizer):
        conversation = new_conversation(workload, f"{name} {workload.name}")
        cutoff = None
        for turn in workload.turns:
            first = True
            for message in turn.messages:
                fields: dict[str, Any] = {}
                if message["role"] == "assistant":
                    t0 = time.perf_counter()
                    ensure_context_summary(conversation)
                    t1 = time.perf_counter()
                    context = build_context(conversation)
                    t2 = time.perf_counter()
                    hook_seconds.append(t1 - t0)
                    build_seconds.append(t2 - t1)
                    if context.cutoff_id != cutoff:
                        cutoff = context.cutoff_id
                        replay.summary_shifts += 1
                    replay.record_call(
                        [context.system, *context.summaries],
                        context.messages,
                        leading=_leading_part(context),
                    )
                    meter.record(context.to_anthropic())
                    if first and turn.asks:
                        asked = [workload.facts[f] for f in turn.asks]
                        replay.check_facts(asked, context.summaries, context.messages)
                    first = False
                    # What the provider would report for this request.
                    fields["input_tokens"] = replay.context_tokens[-1]
                if message.get("tool_calls"):
                    fields["tool_calls"] = message["tool_calls"]
                if message["role"] == "tool":
                    fields["tool_call_id"] = message["tool_call_id"]
                add_message(conversation, message["role"], message["content"], **fields)
            Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
            t0 = time.perf_counter()
            process_exchange(conversation.pk)
            post_seconds.append(time.perf_counter() - t0)
    replay.summarizer = summarizer.totals()
    replay.seconds = time.perf_counter() - started
    replay.extra = {
        "conversation_id": conversation.pk,
        "hook_ms_median": round(statistics.median(hook_seconds) * 1000, 2),
        "build_context_ms_median": round(statistics.median(build_seconds) * 1000, 2),
        "post_exchange_ms_median": round(statistics.median(post_seconds) * 1000, 2),
        "cost": meter.as_dict(),
    }
    return replay


# --- build_context at 100 / 1,000 / 10,000 messages ---------------------------------


def scaling(workloads: dict[int, Workload], repetitions: int) -> dict[str, Any]:
    """Warm cache (summary cached, pages in PostgreSQL's buffers): median time
    and query count of build_context and of ensure_context_summary."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from assistant.services import build_context, compact_tool_results, ensure_context_summary

    out: dict[str, Any] = {}
    summarizer = FakeSummarizer()
    with use_fake(summarizer):
        conversations = {}
        for size, workload in workloads.items():
            conversation = bulk_load(workload, f"scaling {size}")
            compact_tool_results(conversation)
            for _ in range(3):  # shift until the window is under the triggers, then warm up
                ensure_context_summary(conversation)
                build_context(conversation)
            conversations[size] = conversation
        with connection.cursor() as cursor:
            # The planner's statistics as a deployment's autovacuum keeps them,
            # not as they were before the bulk loads.
            cursor.execute("ANALYZE assistant_conversation, assistant_message")
        timings = {size: {"build_context": [], "ensure_context_summary": []} for size in workloads}
        queries: dict[int, dict[str, int]] = {size: {} for size in workloads}
        # Sizes interleaved within each repetition: drift in the machine (a
        # checkpoint, autovacuum after the bulk loads) falls on every size alike.
        for _ in range(repetitions):
            for size, conversation in conversations.items():
                for label, fn in (
                    ("build_context", build_context),
                    ("ensure_context_summary", ensure_context_summary),
                ):
                    with CaptureQueriesContext(connection) as captured:
                        t0 = time.perf_counter()
                        fn(conversation)
                        timings[size][label].append(time.perf_counter() - t0)
                    queries[size][label] = len(captured.captured_queries)
        for size, conversation in conversations.items():
            out[str(size)] = {
                "messages": workloads[size].message_count,
                "window_messages": len(build_context(conversation).messages),
                **{
                    f"{k}_ms": round(statistics.median(v) * 1000, 3)
                    for k, v in timings[size].items()
                },
                **{f"{k}_queries": v for k, v in queries[size].items()},
            }
    return out


# --- 8 concurrent workers on one conversation -------------------------------------


def _hammer(callers: int, target: Any) -> float:
    from django.db import connection

    barrier = threading.Barrier(callers)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait()
            target()
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=run) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def concurrency(workload: Workload, workers: int = 8, latency: float = 0.3) -> dict[str, Any]:
    """Summarizer calls when `workers` threads (each with its own database
    connection) call the pre-exchange hook at once on a conversation whose
    window must shift: ours, one caller alone, and the reference's
    check-then-act cache."""
    from assistant.models import Conversation
    from assistant.services import ensure_context_summary
    from bench.baselines import reference_ensure_summary

    results: dict[str, Any] = {"workers": workers, "summarizer_latency_s": latency}
    for label, callers in (("single", 1), ("ours", workers)):
        summarizer = FakeSummarizer(latency=latency)
        conversation = bulk_load(workload, f"concurrency {label}")
        with use_fake(summarizer):
            seconds = _hammer(
                callers,
                lambda pk=conversation.pk: ensure_context_summary(Conversation.objects.get(pk=pk)),
            )
        results[f"{label}_calls"] = summarizer.call_count
        results[f"{label}_seconds"] = round(seconds, 2)
    summarizer = FakeSummarizer(latency=latency)
    conversation = bulk_load(workload, "concurrency reference")
    seconds = _hammer(workers, lambda: reference_ensure_summary(conversation.pk, summarizer))
    results["reference_calls"] = summarizer.call_count
    results["reference_seconds"] = round(seconds, 2)
    results["duplicates"] = results["ours_calls"] - results["single_calls"]
    return results


# --- post-exchange throughput through a real worker ---------------------------------


def _wait_done(ids: list[int], timeout: float) -> float:
    from assistant.models import Conversation

    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        done = Conversation.objects.filter(pk__in=ids, post_exchange_done_at__isnull=False).count()
        if done == len(ids):
            return time.perf_counter() - started
        time.sleep(0.02)
    raise TimeoutError(f"the worker finished {done} of {len(ids)} tasks in {timeout:.0f} s")


def worker_command(concurrency: int) -> list[str]:
    """A real Celery worker process of the demo project on the bench's queues."""
    return [
        str(Path(sys.executable).parent / "celery"),
        *("-A", "config", "worker", "-Q", "compaction,celery"),
        *("--pool", "prefork", "--concurrency", str(concurrency), "--loglevel", "WARNING"),
        *("--without-gossip", "--without-mingle", "--without-heartbeat"),
    ]


def throughput(workload: Workload, tasks: int, concurrency_: int = 2) -> dict[str, Any]:
    """Post-exchange tasks per second through `celery -A config worker` (a
    subprocess, prefork pool, Redis broker) against the same work called
    in-process, one task after the other."""
    import redis
    from django.conf import settings
    from django.utils import timezone

    from assistant.models import Conversation
    from assistant.services import process_exchange
    from assistant.tasks import post_exchange_task

    def make(label: str) -> list[int]:
        ids = []
        for i in range(tasks):
            conversation = bulk_load(workload, f"{label} {i}")
            Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
            ids.append(conversation.pk)
        return ids

    in_process_ids, worker_ids, warmup_ids = make("in-process"), make("worker"), make("warm-up")
    started = time.perf_counter()
    for pk in in_process_ids:
        process_exchange(pk)
    in_process_seconds = time.perf_counter() - started

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    worker = subprocess.Popen(
        worker_command(concurrency_),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for pk in warmup_ids[: concurrency_ * 2]:  # the worker is up and its children warm
            post_exchange_task.delay(pk)
        _wait_done(warmup_ids[: concurrency_ * 2], timeout=90)
        started = time.perf_counter()
        for pk in worker_ids:
            post_exchange_task.delay(pk)
        _wait_done(worker_ids, timeout=240)
        worker_seconds = time.perf_counter() - started
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    return {
        "tasks": tasks,
        "worker_concurrency": concurrency_,
        "messages_per_conversation": workload.message_count,
        "worker_tasks_per_s": round(tasks / worker_seconds, 2),
        "in_process_tasks_per_s": round(tasks / in_process_seconds, 2),
    }


# --- probes the model could recall ------------------------------------------------


def price_recalls(meter: CostMeter, conversation_id: int, payload: dict[str, Any]) -> None:
    """For each probe the request just recorded did not hold: recoverable when the
    request names the handle of one message ("ref m4182", not a range, which only
    search_history would narrow) whose stored original in the conversation's scope
    contains it. Each is priced as one more request (`CostMeter.record_recall`): this
    request's tokens re-read, plus the page recall would return around the probe."""
    if not meter.missing:
        return
    from django.db.models import F, Value
    from django.db.models.functions import Greatest, StrIndex, Substr

    from assistant.models import Message
    from assistant.recall import HANDLE_IN_TEXT, visible_messages
    from assistant.settings.conf import compaction_config
    from bench.fake_summarizer import count_tokens
    from bench.payload import strings_in

    handles = {int(h) for h in HANDLE_IN_TEXT.findall("\x00".join(strings_in(payload)))}
    if not handles:
        return
    cap = compaction_config().RECALL_MAX_CHARS
    scope = Message.objects.filter(visible_messages(conversation_id), pk__in=handles)
    context_tokens = meter.requests[-1].tokens
    for probe in meter.missing:
        page = (
            scope.filter(content__contains=probe)
            .annotate(at=StrIndex("content", Value(probe)))
            .annotate(page=Substr("content", Greatest(F("at") - cap // 2, 1), cap))
            .order_by("-id")
            .values_list("page", flat=True)
            .first()
        )
        if page is not None:
            meter.record_recall(context_tokens, count_tokens(page))


def probe_rows(outcomes: list[Any]) -> tuple[list[str], list[list[str]]]:
    """Per session and in all: retention probes present in the request, recoverable
    (a handle in the request names an original holding them), lost; and what the
    recalls cost as a share of the strategy's cost."""
    header = ["conversation", "probes", "present", "recoverable", "lost", "recall cost"]
    rows = []
    total = [0, 0, 0, 0.0, 0.0]
    for outcome in outcomes:
        meter = outcome.meter
        lost = meter.probes - meter.probes_kept - meter.probes_recoverable
        rows.append(
            [
                outcome.conversation,
                str(meter.probes),
                str(meter.probes_kept),
                str(meter.probes_recoverable),
                str(lost),
                f"{meter.recall_cost:,.0f} ({meter.recall_cost / max(outcome.cost, 1):.1%})",
            ]
        )
        for i, value in enumerate(
            (meter.probes, meter.probes_kept, meter.probes_recoverable, meter.recall_cost)
        ):
            total[i] += value
        total[4] += outcome.cost
    probes, present, recoverable, recall_cost, cost = total
    rows.append(
        [
            "all",
            str(probes),
            f"{present} ({present / max(probes, 1):.1%})",
            f"{recoverable} ({recoverable / max(probes, 1):.1%})",
            str(probes - present - recoverable),
            f"{recall_cost:,.0f} ({recall_cost / max(cost, 1):.1%})",
        ]
    )
    return header, rows
