"""Faults lose nothing: a worker killed mid-task, a Redis outage, a database
connection terminated mid-task, cleanup racing live traffic, bad input.

Real PostgreSQL, real Redis, real workers. A task is held mid-flight by row
locks the test takes on the conversation and its messages (the task blocks
in its first write, observable in pg_stat_activity), never by test hooks in
product code. Every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
import redis
from celery.contrib.testing.worker import start_worker
from django.core.exceptions import ValidationError
from django.db import connection, connections, transaction
from django.utils import timezone

from assistant import services
from assistant.cleanup import jobs as cleanup
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, Message
from assistant.precall import hook as hooks
from assistant.providers import get_provider
from assistant.services import add_message, finish_exchange
from config.celery import app as celery_app
from tests.builders import html, tool_turn
from tests.conftest import QUEUES, hung_lease_holder, use_broker, wait_until
from tests.fake_llm import ok, slow

BASE_DIR = Path(__file__).resolve().parent.parent
CELERY = str(Path(sys.executable).with_name("celery"))


# These tests are about faults, not about when compaction pays: the worker
# applies what it prepares at once, and the message-count trigger counts.
EAGER = {"COMPACTION_TIMING": "eager"}


@pytest.fixture(autouse=True)
def compaction_applied_at_once(settings):
    settings.ASSISTANT_COMPACTION = dict(EAGER)


# --- helpers -----------------------------------------------------------------------


def conninfo(**extra: str) -> str:
    settings = connection.settings_dict
    parts = {
        "host": settings["HOST"] or "127.0.0.1",
        "port": str(settings["PORT"] or 5432),
        "dbname": settings["NAME"],
        "user": settings["USER"],
        "password": settings["PASSWORD"],
        **extra,
    }
    return " ".join(f"{key}='{value}'" for key, value in parts.items() if value)


def database_url() -> str:
    settings = connection.settings_dict
    auth = settings["USER"] + (f":{settings['PASSWORD']}" if settings["PASSWORD"] else "")
    host = f"{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}"
    # A backend notices within 0.5 s that its client died, even while it
    # waits for a lock (production should set this on the server too).
    options = "options=-c%20client_connection_check_interval%3D500"
    return f"postgres://{auth}@{host}/{settings['NAME']}?{options}"


@contextmanager
def row_locks(conversation_id: int) -> Iterator[psycopg.Connection]:
    """Lock the conversation's messages from another session, so a task
    compacting them blocks in its first write until the block exits (the
    conversation row stays free: finish_exchange stamps it)."""
    locker = psycopg.connect(conninfo())
    try:
        locker.execute(
            "SELECT id FROM assistant_message WHERE conversation_id = %s FOR UPDATE",
            [conversation_id],
        )
        yield locker
    finally:
        locker.rollback()
        locker.close()


def lock_waiters() -> set[int]:
    """Backends of the test database waiting for a lock."""
    with psycopg.connect(conninfo(), autocommit=True) as monitor:
        rows = monitor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        ).fetchall()
    return {pid for (pid,) in rows}


def wait_for_waiter(timeout: float, exclude: set[int] = frozenset()) -> int:
    found: list[int] = []

    def one_waiting() -> bool:
        found[:] = sorted(lock_waiters() - set(exclude))
        return len(found) == 1

    assert wait_until(one_waiting, timeout=timeout, interval=0.1), f"waiters: {lock_waiters()}"
    return found[0]


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as stream:
        return [int(child) for child in stream.read().split()]


def tool_heavy_conversation(title: str = "Blog admin") -> Conversation:
    conversation = Conversation.objects.create(title=title, system_prompt="You help.")
    tool_turn(conversation, "Read post 42", [("get_blog_post", {"id": 42}, html(6000, "P42"))])
    tool_turn(conversation, "Read post 43", [("get_blog_post", {"id": 43}, html(5000, "P43"))])
    return conversation


def snapshot(conversation: Conversation) -> list[tuple]:
    """Every message's identity and verbatim original."""
    return list(
        Message.objects.filter(conversation=conversation)
        .order_by("id")
        .values_list("id", "role", "content", "tool_call_id", "tool_calls")
    )


def assert_compacted_once(conversation: Conversation, originals: list[tuple]) -> None:
    conversation.refresh_from_db()
    assert conversation.post_exchange_done_at == conversation.last_exchange_at
    assert snapshot(conversation) == originals  # nothing lost, nothing rewritten
    tools = Message.objects.filter(conversation=conversation, role="tool")
    assert sorted(tools.values_list("compaction", flat=True)) == ["truncated", "truncated"]
    assert list(
        CompactionEvent.objects.filter(conversation=conversation).values_list(
            "kind", "messages_affected"
        )
    ) == [("tool_results", 1), ("tool_results", 1)]  # one audit row per result, each once


def processed(conversation: Conversation) -> bool:
    conversation.refresh_from_db()
    return conversation.post_exchange_done_at == conversation.last_exchange_at


@contextmanager
def worker_process(
    name: str,
    log_dir: Path,
    compaction: dict | None = None,
    extra_env: dict | None = None,
    concurrency: int = 1,
    lean: bool = True,
) -> Iterator[subprocess.Popen]:
    """A real `celery worker` subprocess with the prefork pool, one child (or
    `concurrency`); `lean`: without mingle, gossip and heartbeat."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "ASSISTANT_COMPACTION": json.dumps(compaction or EAGER),
        "TEST_DATABASE_URL": database_url(),
        **(extra_env or {}),
    }
    log = (log_dir / f"worker-{name}.log").open("w")
    command = [
        CELERY, "-A", "config", "worker", "--pool", "prefork", "-c", str(concurrency),
        "-Q", ",".join(QUEUES), "-n", f"{name}@%h", "--loglevel", "INFO",
    ]  # fmt: skip
    if lean:
        command += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    process = subprocess.Popen(
        command, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        log.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def redis_server(port: int) -> Iterator[subprocess.Popen]:
    """A Redis of the test's own on `port` (the shared one stays up), killed with
    SIGKILL at the block's end, as a crashed or OOM-killed Redis is."""
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, socket_connect_timeout=0.5)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    try:
        assert wait_until(answers, timeout=60)
        yield process
    finally:
        process.kill()
        process.wait(timeout=30)
        client.close()


# --- a worker killed with SIGKILL mid-task -------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_task_is_redelivered_and_completes_once(
    empty_queues, redis_client, tmp_path
):
    conversation = tool_heavy_conversation()
    originals = snapshot(conversation)

    with row_locks(conversation.pk):
        with worker_process("a", tmp_path) as worker_a:
            finish_exchange(conversation)
            first = wait_for_waiter(timeout=60)  # the task is mid-flight, blocked
            [child] = children(worker_a.pid)

            # The pool child dies: reject_on_worker_lost puts the task back at
            # once and the worker's new child takes it (and blocks again).
            os.kill(child, signal.SIGKILL)
            second = wait_for_waiter(timeout=60, exclude={first})

            # Now the whole worker dies: the message stays unacked in Redis
            # until the visibility timeout (30 s in the test settings) passes.
            os.killpg(worker_a.pid, signal.SIGKILL)
            worker_a.wait(timeout=30)
            assert wait_until(lambda: second not in lock_waiters(), timeout=60)
        assert CompactionEvent.objects.count() == 0
        assert not processed(conversation)

    with worker_process("b", tmp_path):
        assert wait_until(lambda: processed(conversation), timeout=90), (
            tmp_path / "worker-b.log"
        ).read_text()
        assert wait_until(lambda: redis_client.hlen("unacked") == 0, timeout=60)

    assert_compacted_once(conversation, originals)
    assert redis_client.llen("compaction") == 0


# --- the worker's database connection terminated mid-task ----------------------------------


def test_a_terminated_database_connection_is_retried_and_the_task_completes(celery_worker):
    conversation = tool_heavy_conversation()
    originals = snapshot(conversation)

    with row_locks(conversation.pk), psycopg.connect(conninfo(), autocommit=True) as admin:
        finish_exchange(conversation)
        first = wait_for_waiter(timeout=60)
        admin.execute("SELECT pg_terminate_backend(%s)", [first])
        # The task failed with OperationalError and was retried: a new
        # connection now waits for the same locks.
        second = wait_for_waiter(timeout=60, exclude={first})
        assert second != first
        assert CompactionEvent.objects.count() == 0

    assert wait_until(lambda: processed(conversation), timeout=60)
    assert_compacted_once(conversation, originals)


# --- Redis stopped while exchanges finish ------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_exchanges_during_a_redis_outage_are_compacted_by_the_sweep(settings, caplog):
    settings.ASSISTANT_CLEANUP = {"SWEEP_GRACE_SECONDS": 0}
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    working = celery_app.conf.broker_url
    use_broker(url)
    try:
        with redis_server(port):
            pass  # up, then stopped: the broker is down from here on
        conversations = [tool_heavy_conversation(f"c{index}") for index in range(3)]
        for conversation in conversations:
            with transaction.atomic():  # as a view would
                add_message(conversation, "user", "And now?")
                add_message(conversation, "assistant", "Here.")
                finish_exchange(conversation)  # must not raise
        originals = [snapshot(conversation) for conversation in conversations]
        assert caplog.text.count("enqueue_failed task=assistant.tasks.post_exchange_task") == 3
        for conversation in conversations:
            conversation.refresh_from_db()
            assert conversation.post_exchange_done_at is None

        with redis_server(port), start_worker(
            celery_app, pool="solo", concurrency=1, queues=QUEUES,
            perform_ping_check=False, loglevel="WARNING", shutdown_timeout=60,
        ):  # fmt: skip
            result = cleanup.sweep_missed_exchanges()
            assert result.count == 3
            for conversation in conversations:
                assert wait_until(lambda c=conversation: processed(c), timeout=60)
    finally:
        use_broker(working)

    for conversation, before in zip(conversations, originals, strict=True):
        assert len(before) == 10
        assert_compacted_once(conversation, before)


# --- Redis hung (SIGSTOP: connections accepted, never answered) ---------------------------


@pytest.mark.django_db(transaction=True)
def test_a_hung_redis_costs_finish_exchange_about_a_second_and_the_sweep_recovers(settings, caplog):
    """Before the bound, the first finish_exchange against a hung Redis took
    40 s and each later one 10 s (the broker's retry policy times the socket
    timeout), then 7.5 s with short socket timeouts alone (kombu's reconnect
    backoff). Now each fails after the enqueue timeout (0.5 s)."""
    settings.ASSISTANT_ENQUEUE_TIMEOUT_SECONDS = 0.5  # the app's default (the tests': 10 s)
    settings.ASSISTANT_CLEANUP = {"SWEEP_GRACE_SECONDS": 0}
    port = free_port()
    working = celery_app.conf.broker_url
    use_broker(f"redis://127.0.0.1:{port}/0")
    try:
        with redis_server(port) as server:
            conversations = [tool_heavy_conversation(f"c{index}") for index in range(4)]
            finish_exchange(conversations[0])  # published while Redis answers
            os.kill(server.pid, signal.SIGSTOP)
            try:
                for conversation in conversations[1:]:
                    done, took = threading.Event(), []

                    def finish(conversation=conversation, done=done, took=took):
                        try:
                            with transaction.atomic():  # as a view would
                                add_message(conversation, "user", "And now?")
                                add_message(conversation, "assistant", "Here.")
                                started = time.monotonic()
                                finish_exchange(conversation)
                                took.append(time.monotonic() - started)
                            done.set()
                        finally:
                            connection.close()  # this thread's own connection

                    thread = threading.Thread(target=finish, daemon=True)
                    thread.start()
                    # 60 s only catches a hang (unbounded, it took 40 s, then 10 s each).
                    assert done.wait(timeout=60), "finish_exchange stalled on a hung Redis"
                    thread.join()
                    # One 0.5 s enqueue timeout, timed alone: 5 s is ten times it and
                    # still below the 7.5 s of kombu's reconnect backoff without it.
                    assert took[0] < 5.0, took
                assert caplog.text.count("enqueue_failed task=assistant.tasks.post_exchange") == 3
            finally:
                os.kill(server.pid, signal.SIGCONT)

            with start_worker(
                celery_app, pool="solo", concurrency=1, queues=QUEUES,
                perform_ping_check=False, loglevel="WARNING", shutdown_timeout=60,
            ):  # fmt: skip
                assert wait_until(lambda: processed(conversations[0]), timeout=60)
                # A publish that timed out was sent all the same: Redis may
                # apply it once it wakes, so the sweep finds the rest.
                result = cleanup.sweep_missed_exchanges()
                assert result.count <= 3
                for conversation in conversations:
                    assert wait_until(lambda c=conversation: processed(c), timeout=60)
    finally:
        use_broker(working)


# --- cleanup racing live traffic -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_cleanup_never_purges_a_conversation_in_use_by_a_live_transaction():
    long_ago = timezone.now() - timedelta(days=40)
    live = Conversation.objects.create(title="live")
    idle = Conversation.objects.create(title="idle")
    for conversation in (live, idle):
        add_message(conversation, "user", "hello")
    Conversation.objects.update(deleted_at=long_ago, updated_at=long_ago)
    writing, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def chat() -> None:
        try:
            with transaction.atomic():
                # add_message refuses a soft-deleted conversation (test_history); any other
                # writer (the admin's restore, a migration script) touches it like this.
                Message.objects.create(conversation=live, role="user", content="still typing")
                Conversation.objects.filter(pk=live.pk).update(updated_at=timezone.now())
                writing.set()
                assert release.wait(timeout=120)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=chat)
    thread.start()
    try:
        assert writing.wait(timeout=30)
        during = cleanup.purge_deleted_conversations()
    finally:
        release.set()
        thread.join(timeout=30)
    after = cleanup.purge_deleted_conversations()

    assert errors == []
    assert (during.count, after.count) == (1, 0)
    assert list(Conversation.objects.values_list("id", flat=True)) == [live.pk]
    assert list(live.messages.values_list("content", flat=True).order_by("id")) == [
        "hello",
        "still typing",
    ]


@pytest.mark.django_db(transaction=True)
def test_cleanup_jobs_running_twice_at_once_do_the_work_once(settings):
    settings.ASSISTANT_CLEANUP = {"PURGE_BATCH_SIZE": 3}
    long_ago = timezone.now() - timedelta(days=40)
    for index in range(12):
        conversation = Conversation.objects.create(title=f"old {index}")
        add_message(conversation, "user", "hello")
    Conversation.objects.update(deleted_at=long_ago, updated_at=long_ago)
    totals: list[int] = []

    def run() -> None:
        try:
            totals.append(cleanup.run_job("purge_deleted"))
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sum(totals) == 12
    assert Conversation.objects.count() == 0
    assert Message.objects.count() == 0


# --- bad input through the services --------------------------------------------------------


@pytest.fixture
def two_conversations(db) -> tuple[Conversation, Conversation]:
    mine = tool_heavy_conversation("mine")
    other = tool_heavy_conversation("other")
    return mine, other


def state(conversation: Conversation) -> tuple:
    conversation.refresh_from_db()
    return (
        snapshot(conversation),
        conversation.metadata,
        held_state(conversation),
        conversation.last_exchange_at,
    )


@pytest.mark.parametrize(
    ("role", "content", "fields", "code"),
    [
        ("robot", "hi", {}, "invalid_role"),
        ("user", "a\x00b", {}, "nul_byte"),
        ("user", "lone \ud800 surrogate", {}, "invalid_unicode"),
        ("user", "x" * (5 * 1024 * 1024 + 1), {}, "content_too_large"),
        ("user", "é" * (2 * 1024 * 1024 + 600_000), {}, "content_too_large"),
        (
            "assistant",
            "",
            {"tool_calls": [{"id": "c9", "name": "run_sql", "arguments": "{not json"}]},
            "invalid_tool_arguments",
        ),
        (
            "assistant",
            "",
            {"tool_calls": [{"id": "c9", "name": "run_sql", "arguments": "[1, 2]"}]},
            "invalid_tool_arguments",
        ),
        ("tool", "result", {"tool_call_id": "nope"}, "unknown_tool_call_id"),
        ("user", "hi", {"metadata": {"when": float("nan")}}, "invalid_metadata"),
        # A number of 5,000 digits, as a model streams arguments, and in metadata.
        (
            "assistant",
            "",
            {
                "tool_calls": [
                    {"id": "c9", "name": "run_sql", "arguments": '{"n": 1' + "0" * 4999 + "}"}
                ]
            },
            "invalid_tool_arguments",
        ),
        (
            "assistant",
            "",
            {"tool_calls": [{"id": "c9", "name": "run_sql", "arguments": {"n": 10**4999}}]},
            "invalid_tool_arguments",
        ),
        ("user", "hi", {"metadata": {"n": 10**4999}}, "invalid_metadata"),
        # An empty id is refused like a blank one (a missing id gets one: see test_history).
        (
            "assistant",
            "",
            {"tool_calls": [{"id": "", "name": "run_sql", "arguments": {}}]},
            "invalid_tool_calls",
        ),
        (
            "assistant",
            "",
            {"tool_calls": [{"id": "  ", "name": "run_sql", "arguments": {}}]},
            "invalid_tool_calls",
        ),
    ],
)
def test_bad_input_is_refused_clearly_and_changes_nothing(
    two_conversations, role, content, fields, code
):
    mine, other = two_conversations
    before, before_other = state(mine), state(other)

    with pytest.raises(ValidationError) as error:
        add_message(mine, role, content, **fields)

    assert error.value.code == code
    assert state(mine) == before
    assert state(other) == before_other


def everything() -> tuple:
    """Every row the services could write, across all conversations."""
    return (
        sorted(
            Conversation.objects.values_list(
                "pk",
                "metadata",
                "deleted_at",
                "updated_at",
                "last_exchange_at",
                "context_tokens",
                "recall_count",
            )
        ),
        sorted(Message.objects.values_list("pk", "content", "compacted_content", "metadata")),
        CompactionEvent.objects.count(),
    )


BAD_SERVICE_CALLS = {
    "add_message to None": (lambda s, c: s.add_message(None, "user", "hi"), "invalid_conversation"),
    "add_message to an unsaved conversation": (
        lambda s, c: s.add_message(Conversation(title="unsaved"), "user", "hi"),
        "invalid_conversation",
    ),
    "restore ids that are not ids": (
        lambda s, c: s.restore_originals(c, ["x"]),
        "invalid_message_ids",
    ),
    "restore a string of ids": (lambda s, c: s.restore_originals(c, "12"), "invalid_message_ids"),
    "fork with tool_services None": (
        lambda s, c: s.fork_continuation(c, "x", tool_services=None),
        "invalid_tool_services",
    ),
    "fork with tool_services a string": (
        lambda s, c: s.fork_continuation(c, "x", tool_services="sql"),
        "invalid_tool_services",
    ),
    "emergency level True": (lambda s, c: s.emergency_compact(c, True), "invalid_level"),
    "emergency level 3": (lambda s, c: s.emergency_compact(c, 3), "invalid_level"),
    "emergency level 1.0": (lambda s, c: s.emergency_compact(c, 1.0), "invalid_level"),
    "an unknown staff action": (
        lambda s, c: s.queue_staff_action("rm -rf", c.pk),
        "unknown_action",
    ),
    "keep_last below 0": (
        lambda s, c: s.regenerate_window_summary(c, keep_last=-5),
        "invalid_keep_last",
    ),
    "recent_fraction over 1": (
        lambda s, c: s.regenerate_window_summary(c, recent_fraction=1.5),
        "invalid_recent_fraction",
    ),
    "recent_fraction below 0": (
        lambda s, c: s.regenerate_window_summary(c, recent_fraction=-0.1),
        "invalid_recent_fraction",
    ),
    "mark_deleted ids that are not ids": (
        lambda s, c: s.mark_deleted(["x"]),
        "invalid_conversation_ids",
    ),
    "mark_deleted a string of ids": (
        lambda s, c: s.mark_deleted(str(c.pk)),
        "invalid_conversation_ids",
    ),
    "restore_deleted ids that are not ids": (
        lambda s, c: s.restore_deleted(["x"]),
        "invalid_conversation_ids",
    ),
    "a staff action on an id that is not one": (
        lambda s, c: s.run_staff_action("compact_tool_results", "abc", None),
        "invalid_conversation_id",
    ),
    "an unknown staff action run": (
        lambda s, c: s.run_staff_action("bogus", c.pk, None),
        "unknown_action",
    ),
    "build_context of None": (lambda s, c: s.build_context(None), "invalid_conversation"),
    "context_status of None": (lambda s, c: s.context_status(None), "invalid_conversation"),
    "finish_exchange of None": (lambda s, c: s.finish_exchange(None), "invalid_conversation"),
    "chat_step on None": (lambda s, c: s.chat_step(None, no_model), "invalid_conversation"),
    "compact_tool_results min_chars a string": (
        lambda s, c: s.compact_tool_results(c, min_chars="x"),
        "invalid_min_chars",
    ),
    "compact_tool_results min_chars below 0": (
        lambda s, c: s.compact_tool_results(c, min_chars=-1),
        "invalid_min_chars",
    ),
    "chat_step with tools a string": (
        lambda s, c: s.chat_step(c, no_model, tools="abc"),
        "invalid_tools",
    ),
    "chat_step with a tool without a name": (
        lambda s, c: s.chat_step(c, no_model, tools=[{"description": "x"}]),
        "invalid_tools",
    ),
    "chat_step with recall and tools a string": (
        lambda s, c: s.chat_step(c, no_model, tools="abc", recall=True),
        "invalid_tools",
    ),
    "answer_tool_calls with a call that is not one": (
        lambda s, c: s.answer_tool_calls(c, [{"nope": 1}], no_tool),
        "invalid_tool_calls",
    ),
    "answer_tool_calls with calls a string": (
        lambda s, c: s.answer_tool_calls(c, "c1", no_tool),
        "invalid_tool_calls",
    ),
    # Each once raised a raw error where a coded ValidationError belongs.
    "correct_summary with a NUL": (lambda s, c: s.correct_summary(c, "a\x00b"), "nul_byte"),
    "correct_summary with a lone surrogate": (
        lambda s, c: s.correct_summary(c, "a\ud800b"),
        "invalid_unicode",
    ),
    "context_tokens of None": (lambda s, c: s.context_tokens(None), "invalid_conversation"),
    "context_tokens of 42": (lambda s, c: s.context_tokens(42), "invalid_conversation"),
    "context_tokens of an unsaved conversation": (
        lambda s, c: s.context_tokens(Conversation(title="unsaved")),
        "invalid_conversation",
    ),
    "context_tokens of a Message": (
        lambda s, c: s.context_tokens(c.messages.first()),
        "invalid_conversation",
    ),
    "process_exchange of a text": (lambda s, c: s.process_exchange("x"), "invalid_conversation_id"),
    "summarize_messages of a text": (lambda s, c: s.summarize_messages("x"), "invalid_messages"),
    "call_instructions of a number": (
        lambda s, c: s.call_instructions(5),
        "invalid_instructions",
    ),
    "call_instructions over the limit": (
        lambda s, c: s.call_instructions("x" * 4001),
        "invalid_instructions",
    ),
    "model_request of None": (lambda s, c: s.model_request(None), "invalid_context"),
    "a staff action for a user that does not exist": (
        lambda s, c: s.run_staff_action("compact_tool_results", c.pk, 10**9),
        "invalid_acting_user",
    ),
    "a staff action for a user id that is a text": (
        lambda s, c: s.run_staff_action("compact_tool_results", c.pk, "x"),
        "invalid_acting_user",
    ),
    "a staff action queued for id -1": (
        lambda s, c: s.queue_staff_action("compact_tool_results", -1),
        "invalid_conversation_id",
    ),
    "a staff action queued for id 10**30": (
        lambda s, c: s.queue_staff_action("compact_tool_results", 10**30),
        "invalid_conversation_id",
    ),
    "a staff action queued for a conversation never stored": (
        lambda s, c: s.queue_staff_action("compact_tool_results", 2**62),
        "conversation_deleted",
    ),
    "a staff action queued with 5,000 characters of instructions": (
        lambda s, c: s.queue_staff_action("regenerate_summary", c.pk, instructions="x" * 5000),
        "invalid_instructions",
    ),
    "an unknown keyword to a service": (
        lambda s, c: s.compact_tool_results(c, colour="blue"),
        "unknown_field",
    ),
    "an unknown keyword to a reading service": (
        lambda s, c: s.build_context(c, colour="blue"),
        "unknown_field",
    ),
    "a service called without its conversation": (
        lambda s, c: s.emergency_compact(),
        "invalid_arguments",
    ),
    "review_summary of a version id that is a text": (
        lambda s, c: s.review_summary(c, "x"),
        "invalid_version_id",
    ),
    "run_tool_call on None": (
        lambda s, c: s.run_tool_call(None, "recall", {"handle": "m1"}),
        "invalid_conversation",
    ),
    "tool_definitions of an unknown provider": (
        lambda s, c: s.tool_definitions("claude"),
        "unknown_provider",
    ),
    "review_summary of a version id past bigint": (
        lambda s, c: s.review_summary(c, 10**30),
        "invalid_version_id",
    ),
}


def no_model(request):
    raise AssertionError("the model was called")


def no_tool(name, arguments):
    raise AssertionError("a tool was run")


@pytest.mark.parametrize("case", list(BAD_SERVICE_CALLS))
def test_bad_arguments_to_the_services_are_refused_clearly_and_change_nothing(
    two_conversations, django_capture_on_commit_callbacks, case
):
    call, code = BAD_SERVICE_CALLS[case]
    mine, _ = two_conversations
    before = everything()

    with (
        django_capture_on_commit_callbacks() as enqueued,
        pytest.raises(ValidationError) as error,
    ):
        call(services, mine)

    assert error.value.code == code
    assert everything() == before
    assert enqueued == []


DELETED_REFUSES = {
    "add_message": lambda s, c: s.add_message(c, "user", "hi"),
    "ensure_context_summary": lambda s, c: s.ensure_context_summary(c),
    "emergency_compact": lambda s, c: s.emergency_compact(c, 2),
    "restore_originals": lambda s, c: s.restore_originals(c),
    "fork_continuation": lambda s, c: s.fork_continuation(c, "go on"),
    "fork_from_message": lambda s, c: s.fork_from_message(
        c, c.messages.filter(role="user").values_list("pk", flat=True).first() or 1
    ),
    "regenerate_window_summary": lambda s, c: s.regenerate_window_summary(c),
    "compact_tool_results": lambda s, c: s.compact_tool_results(c, min_chars=0),
    "chat_step": lambda s, c: s.chat_step(c, no_model, tools=[{"name": "read_post"}]),
    "finish_exchange": lambda s, c: s.finish_exchange(c),
    "answer_tool_calls": lambda s, c: s.answer_tool_calls(
        c, [{"id": "c9", "name": "recall", "arguments": {"handle": "m1"}}], no_tool
    ),
    "hooks.ensure_context_summary": lambda s, c: hooks.ensure_context_summary(c),
    "review_summary": lambda s, c: s.review_summary(c, 1),
    "correct_summary": lambda s, c: s.correct_summary(c, "## Goal\n- x"),
    "queue_staff_action": lambda s, c: s.queue_staff_action("compact_tool_results", c.pk),
    "compact_if_flagged": lambda s, c: s.compact_if_flagged(c),
    "prebuild_window_summary": lambda s, c: s.prebuild_window_summary(c),
    "remember_chat_tools": lambda s, c: s.remember_chat_tools(c, [{"name": "read_post"}]),
}


@pytest.mark.parametrize("service", ["build_context", "context_status", "context_tokens"])
def test_reading_a_purged_conversation_is_a_coded_refusal(two_conversations, service):
    mine, _ = two_conversations
    Conversation.objects.filter(pk=mine.pk).delete()

    with pytest.raises(ValidationError) as error:
        getattr(services, service)(mine)

    assert error.value.code == "conversation_deleted"


# Past every trigger, so that the pre-call hook would compact and shift at once.
PAST_THE_TRIGGERS = {
    "VERBATIM_AFTER_SHIFT": "recent",
    **EAGER,
    "MAX_MESSAGES_BEFORE_SUMMARY": 4,
    "MIN_RECENT_MESSAGES": 2,
    "CONTEXT_TOKEN_THRESHOLD": 1000,
    "TOOL_RESULT_CHAR_THRESHOLD": 200,
    "TRUNCATION_KEEP_CHARS": 100,
    "KEEP_NEWEST_TOOL_RESULTS": 0,
    "COMPACT_MIN_FREE_TOKENS": 0,
    "SUMMARY_REQUEST": "cached_suffix",
}


@pytest.mark.parametrize("service", list(DELETED_REFUSES))
@pytest.mark.parametrize("how", ["soft-deleted", "purged"])
def test_a_deleted_conversation_is_read_only_through_the_services(
    two_conversations, settings, django_capture_on_commit_callbacks, service, how
):
    settings.ASSISTANT_COMPACTION = PAST_THE_TRIGGERS
    mine, _ = two_conversations
    if how == "purged":
        Conversation.objects.filter(pk=mine.pk).delete()
    else:
        Conversation.objects.filter(pk=mine.pk).update(deleted_at=timezone.now())
    before = everything()

    with (
        django_capture_on_commit_callbacks() as enqueued,
        pytest.raises(ValidationError) as error,
    ):
        DELETED_REFUSES[service](services, mine)

    assert error.value.code == "conversation_deleted"
    assert everything() == before
    assert enqueued == []


def test_a_tool_result_for_another_conversations_call_is_refused(two_conversations):
    mine, other = two_conversations
    foreign_call = other.messages.filter(role="assistant", tool_calls__isnull=False).first()
    call_id = foreign_call.tool_calls[0]["id"]
    before = state(mine)

    with pytest.raises(ValidationError) as error:
        add_message(mine, "tool", "forged result", tool_call_id=call_id)

    assert error.value.code == "unknown_tool_call_id"
    assert state(mine) == before


def test_restoring_ids_of_another_conversation_touches_nothing(two_conversations):
    from assistant.tool_results.compaction import compact_tool_results, restore_originals

    mine, other = two_conversations
    compact_tool_results(other)
    before_other = state(other)
    foreign_ids = list(other.messages.values_list("id", flat=True))

    assert restore_originals(mine, foreign_ids) == 0
    assert state(other) == before_other


def test_a_five_megabyte_tool_result_is_stored_whole_and_compacted(db):
    conversation = Conversation.objects.create(title="big")
    big = ("<tr><td>row</td><td>日本語 ✓</td></tr>\n" * 200_000)[: 5 * 1024 * 1024 // 2]
    assert len(big.encode()) <= 5 * 1024 * 1024
    tool_turn(conversation, "Dump the table", [("run_sql", {"sql": "select *"}, big)])

    finish_exchange(conversation)
    from assistant.post_exchange.pipeline import process_exchange

    assert process_exchange(conversation.pk) is True

    result = conversation.messages.get(role="tool")
    assert result.content == big
    assert result.compaction == "truncated"
    assert len(result.compacted_content) < 5000


def test_unicode_and_control_characters_round_trip(db):
    conversation = Conversation.objects.create(title="unicode")
    text = "emoji 🧪, RTL \u202eabc, zero-width \u200b, CJK 漢字, tab\tand\r\nnewlines"

    message = add_message(conversation, "user", text)

    assert Message.objects.get(pk=message.pk).content == text
    assert conversation.messages.count() == 1


# --- the provider answering 529 and timing out for a while ------------------------------------


def failing(kind: str, count: int):
    from tests.fake_llm import overloaded, slow

    # A timeout: the reply comes after the client gave up (LLM_TIMEOUT_SECONDS).
    return [overloaded() if kind == "overloaded" else slow(1.5) for _ in range(count)]


# The words of the failures themselves; not their status numbers (529, 503), which
# a stored summary's index holds by chance once message ids reach them.
ERROR_WORDS = ("overloaded", "Overloaded", "UNAVAILABLE", "timed out", "Timeout")


def stored_texts(conversation: Conversation) -> list[str]:
    """Every text the app stored for the conversation: the strings of its
    state and metadata (not their numbers: a timestamp may hold "503"), and
    the compacted messages."""
    conversation.refresh_from_db()
    texts = strings_in([conversation.metadata, held_state(conversation)])
    texts += [m for m in conversation.messages.values_list("compacted_content", flat=True) if m]
    return texts


def strings_in(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*strings_in(list(value.keys())), *strings_in(list(value.values()))]
    if isinstance(value, list | tuple):
        return [text for item in value for text in strings_in(item)]
    return []


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
@pytest.mark.parametrize("failure", ["overloaded", "timeout"])
def test_a_failing_provider_falls_back_offline_and_stores_no_failure(
    db, fake_llm, settings, provider, failure
):
    from assistant.post_exchange.pipeline import process_exchange
    from assistant.precall.hook import ensure_context_summary
    from assistant.providers.offline.provider import OFFLINE_MODEL
    from assistant.window.context import build_context

    getattr(fake_llm, f"use_{provider}")(settings)
    settings.LLM_TIMEOUT_SECONDS = 0.4
    settings.LLM_MAX_RETRIES = 1
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        **EAGER,
        "TOOL_POLICIES": {"get_blog_post": "summarize"},
        "MAX_MESSAGES_BEFORE_SUMMARY": 12,
        "MIN_RECENT_MESSAGES": 4,
    }
    kind = "anthropic.messages" if provider == "anthropic" else "gemini.generate"
    fake_llm.script_summaries(*failing(failure, 200), provider=provider)
    conversation = Conversation.objects.create(title="outage", system_prompt="You help.")

    # Chats go on during the outage: every turn is stored, compacted, summarized.
    for post in range(4):
        tool_turn(conversation, f"Read post {post}", [("get_blog_post", {"id": post}, html(3000))])
        assert process_exchange(conversation.pk) is True
        ensure_context_summary(conversation)
        assert build_context(conversation).messages
    during = fake_llm.count(kind)
    originals = snapshot(conversation)

    assert during > 0  # the provider was asked, and failed
    events = CompactionEvent.objects.filter(conversation=conversation)
    assert set(events.values_list("kind", flat=True)) == {"tool_results", "window_summary"}
    tool_events = events.filter(kind="tool_results")
    assert tool_events.count() == 4
    assert set(tool_events.values_list("summarizer_model", flat=True)) == {OFFLINE_MODEL}
    assert not [t for t in stored_texts(conversation) if any(w in t for w in ERROR_WORDS)]
    assert conversation.compaction_summary

    # The provider recovers: the next summaries come from it again (answers timed out at
    # 0.4 s on a loaded machine would be retried, or fall back).
    fake_llm.reset()
    settings.LLM_TIMEOUT_SECONDS = 30
    tool_turn(conversation, "Read post 9", [("get_blog_post", {"id": 9}, html(3000))])
    assert process_exchange(conversation.pk) is True

    # One call for the new tool result, one to pre-build the next window summary.
    assert fake_llm.count(kind) == 2
    latest = CompactionEvent.objects.filter(conversation=conversation, kind="tool_results").first()
    assert latest.summarizer_model == getattr(settings, f"{provider.upper()}_SUMMARY_MODEL")
    assert snapshot(conversation)[: len(originals)] == originals


@pytest.mark.parametrize("failure", ["overloaded", "timeout"])
def test_without_fallback_a_failed_summary_stores_nothing_and_the_chat_goes_on(
    db, fake_llm, settings, failure
):
    from assistant.precall.hook import ensure_context_summary
    from assistant.window.context import build_context

    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    settings.LLM_TIMEOUT_SECONDS = 0.4
    settings.LLM_MAX_RETRIES = 1
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        **EAGER,
        "MAX_MESSAGES_BEFORE_SUMMARY": 8,
        "MIN_RECENT_MESSAGES": 4,
    }
    fake_llm.script_summaries(*failing(failure, 50))
    conversation = Conversation.objects.create(title="no fallback")
    for turn in range(6):
        add_message(conversation, "user", f"question {turn}")
        add_message(conversation, "assistant", f"answer {turn}")
    state_before = held_state(Conversation.objects.get(pk=conversation.pk))

    summary = ensure_context_summary(conversation)

    assert summary is None
    # One attempt: the chat path's deadline leaves the SDK's retries to the worker.
    assert fake_llm.count("anthropic.messages") == 1
    conversation.refresh_from_db()
    # No summary stored; only the failure is remembered, so the next try waits.
    stored = held_state(conversation)
    failure = stored.pop("summary_failure")
    assert stored == state_before
    assert failure["attempts"] == 1
    assert not CompactionEvent.objects.filter(conversation=conversation).exists()
    assert len(build_context(conversation).messages) == 12  # the chat goes on, uncompacted


# --- a lease holder that is alive but makes no progress -------------------------------------

HUNG_TRIGGER = {
    "VERBATIM_AFTER_SHIFT": "recent",
    **EAGER,
    "CONTEXT_TOKEN_THRESHOLD": 8000,
    "MAX_RECENT_TOKENS": 3000,
    "MAX_MESSAGES_BEFORE_SUMMARY": 1000,
}
# A stopped holder is given up on after a quarter of a second: a chat call bounded
# at 2 s then has eight times the stall for its own work on a loaded machine, and a
# holder waited on until the chat's deadline (5 s) still fails the bound.
STOPPED_HOLDER = {**HUNG_TRIGGER, "SUMMARY_STALL_SECONDS": 0.25}
# A live holder's heartbeat (a thread stamping every third of the stall) is late by
# seconds on a loaded machine: judged at the default 1 s, a live holder could be
# taken for a stalled one. Tests of live holders give it ten.
LIVE_HOLDER = {"SUMMARY_STALL_SECONDS": 10}


@pytest.mark.django_db(transaction=True)
def test_a_hung_lease_holder_costs_each_chat_call_under_two_seconds_and_no_oversized_request(
    fake_llm, settings
):
    import time

    from assistant.precall.hook import ensure_context_summary
    from assistant.window.context import build_context
    from tests.builders import chat_turns

    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = dict(STOPPED_HOLDER)
    conversation = Conversation.objects.create(title="hung holder", system_prompt="You help.")
    chat_turns(conversation, 10, size=2000)  # 20 messages of about 500 tokens each: 10,020
    originals = snapshot(conversation)
    waits, sizes, bounds = [], [], []
    get_provider()  # the SDK imported once per process, before the calls are timed

    with hung_lease_holder(conversation.pk) as held:
        for call in range(3):
            add_message(conversation, "user", f"question {call} " + "q" * 400)
            started = time.monotonic()
            ensure_context_summary(conversation)
            waits.append(time.monotonic() - started)
            context = build_context(conversation)
            newest_step = conversation.messages.filter(role="assistant").last().token_estimate
            sizes.append(context.tokens.total)
            bounds.append(HUNG_TRIGGER["CONTEXT_TOKEN_THRESHOLD"] + newest_step)
            add_message(conversation, "assistant", f"answer {call} " + "a" * 400)

    print(f"hung holder: waits {[round(w, 3) for w in waits]} s, request tokens {sizes}")
    assert all(wait < 2.0 for wait in waits), waits
    assert [size <= bound for size, bound in zip(sizes, bounds, strict=True)] == [True] * 3, sizes
    assert fake_llm.count("anthropic.messages") == 0  # the chat path did not call the summarizer
    assert held["renewed_after_hang"] is False  # the hung holder lost its lease: it writes nothing
    # One shift, on the first call, by the offline summarizer, after taking the lease over.
    from assistant.providers.offline.provider import OFFLINE_MODEL

    shifts = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert [(e.summarizer_model, e.details["took_over_stalled_lease"]) for e in shifts] == [
        (OFFLINE_MODEL, True)
    ]
    conversation.refresh_from_db()
    assert conversation.summary_lease_token is None
    assert snapshot(conversation)[: len(originals)] == originals


# --- liveness: a slow holder is not a stalled one (docs/operations.rst, "Faults") -----------


def request_and_bound(conversation: Conversation) -> tuple[int, int]:
    """The next request's size and the bound it must stay within: the trigger
    plus the newest step."""
    from assistant.window.context import build_context

    newest_step = conversation.messages.order_by("id").last().token_estimate
    return build_context(conversation).tokens.total, HUNG_TRIGGER["CONTEXT_TOKEN_THRESHOLD"] + (
        newest_step
    )


def window_shifts(conversation: Conversation) -> list[tuple[str, dict]]:
    events = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    return [(e.summarizer_model, e.details) for e in events.order_by("id")]


def assert_offline_takeover(conversation: Conversation, holder: str) -> None:
    """One shift, by the offline summarizer, after taking over a `holder`
    ("stalled" or "late") lease, and no summarizer failure booked for it."""
    from assistant.providers.offline.provider import OFFLINE_MODEL

    [(model, details)] = window_shifts(conversation)
    assert (model, details[f"took_over_{holder}_lease"], details["offline_fallback"]) == (
        OFFLINE_MODEL,
        True,
        f"{holder}_holder",
    )
    conversation.refresh_from_db()
    assert conversation.summary_failure is None  # a takeover is not a failure


def over_the_trigger(
    fake, settings, title: str, *replies, timeout: float = 30, **compaction
) -> Conversation:
    """A conversation of 10,020 tokens, over HUNG_TRIGGER's 8,000, whose summarizer
    (the anthropic SDK against the fake) answers with `replies`, each attempt timed
    out at `timeout` seconds. Its holders are live ones (LIVE_HOLDER) unless
    `compaction` says otherwise."""
    from tests.builders import chat_turns

    fake.use_anthropic(settings)
    settings.LLM_TIMEOUT_SECONDS = timeout
    settings.ASSISTANT_COMPACTION = {**HUNG_TRIGGER, **LIVE_HOLDER, **compaction}
    fake.script_summaries(*replies)
    conversation = Conversation.objects.create(title=title, system_prompt="You help.")
    chat_turns(conversation, 10, size=2000)
    return conversation


def worker_summarizing(conversation: Conversation, fake) -> tuple[threading.Thread, list[bool]]:
    """A worker's pre-build of the next summary in a thread (its own database
    connection, its own heartbeat), once its summarizer call has started."""
    from assistant.summary.prebuild import prebuild_window_summary

    built: list[bool] = []

    def worker() -> None:
        try:
            built.append(prebuild_window_summary(conversation))
        finally:
            connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    assert wait_until(lambda: fake.count("anthropic.messages") == 1, timeout=60)
    return thread, built


@pytest.mark.django_db(transaction=True)
def test_a_worker_frozen_in_its_summarizer_call_is_taken_over_within_two_seconds(
    fake_llm, settings, empty_queues, tmp_path
):
    import time

    from assistant.precall.hook import ensure_context_summary
    from tests.builders import chat_turns

    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = dict(STOPPED_HOLDER)
    # The worker's summarizer answers in 30 s: it is mid-call when it is frozen.
    fake_llm.script_summaries(slow(30), repeat=True)
    conversation = Conversation.objects.create(title="frozen worker", system_prompt="You help.")
    chat_turns(conversation, 10, size=2000)  # 10,020 tokens, over the 8,000 trigger
    originals = snapshot(conversation)

    # This process's first summary imports the SDK (seconds on a loaded machine): done
    # here, so the chat call measures the takeover (a web process pays it once).
    get_provider()
    with worker_process("frozen", tmp_path, STOPPED_HOLDER, fake_llm.env()) as worker:
        finish_exchange(conversation)  # the worker pre-builds the next summary
        log = tmp_path / "worker-frozen.log"
        assert wait_until(lambda: fake_llm.count("anthropic.messages") == 1, timeout=90), (
            log.read_text()
        )
        conversation.refresh_from_db()
        assert conversation.summary_lease_token is not None  # the worker holds the lease
        [child] = children(worker.pid)
        os.kill(child, signal.SIGSTOP)
        try:
            add_message(conversation, "user", "one more question " + "q" * 400)
            started = time.monotonic()
            ensure_context_summary(conversation)
            waited = time.monotonic() - started
            size, bound = request_and_bound(conversation)
        finally:
            os.kill(child, signal.SIGCONT)

    print(f"frozen worker: the chat call took {waited:.3f} s, request {size} <= {bound}")
    assert waited < 2.0
    assert size <= bound
    assert fake_llm.count("anthropic.messages") == 1  # the chat path did not call it again
    assert_offline_takeover(conversation, "stalled")
    assert snapshot(conversation)[: len(originals)] == originals


@pytest.mark.django_db(transaction=True)
def test_the_chat_waits_for_a_live_slow_worker_and_sends_with_its_summary(fake_llm, settings):
    import time

    from assistant.precall.hook import ensure_context_summary

    # Three times the stall limit: a holder judged by its progress would be taken over.
    # The deadline is wide: only a holder taken for a stalled one is not waited for.
    reply = slow(6, ok(text="The worker's summary."))
    conversation = over_the_trigger(
        fake_llm, settings, "slow worker", reply,
        SUMMARY_STALL_SECONDS=2, SUMMARY_CHAT_DEADLINE_SECONDS=120,
    )  # fmt: skip
    thread, built = worker_summarizing(conversation, fake_llm)
    add_message(conversation, "user", "one more question " + "q" * 400)
    started = time.monotonic()
    summary = ensure_context_summary(conversation)
    waited = time.monotonic() - started
    thread.join(timeout=60)
    size, bound = request_and_bound(conversation)

    print(f"slow worker: the chat waited {waited:.3f} s for it")
    assert built == [True]
    assert waited < 120.0  # within SUMMARY_CHAT_DEADLINE_SECONDS: never taken over
    assert size <= bound
    assert summary.startswith("The worker's summary.")
    assert fake_llm.count("anthropic.messages") == 1
    [(model, details)] = window_shifts(conversation)
    assert (model, details["prebuilt"], "offline_fallback" in details) == (
        settings.ANTHROPIC_SUMMARY_MODEL,
        True,
        False,
    )


@pytest.mark.django_db(transaction=True)
def test_two_callers_past_the_trigger_share_one_slow_summary(fake_llm, settings):
    import time

    from assistant.precall.hook import ensure_context_summary

    reply = slow(3, ok(text="One summary for both."))
    conversation = over_the_trigger(
        fake_llm, settings, "two callers", reply, SUMMARY_CHAT_DEADLINE_SECONDS=120
    )
    returned: dict[str, tuple[float, str | None]] = {}
    started = time.monotonic()

    def caller(name: str, delay: float) -> None:
        time.sleep(delay)
        try:
            summary = ensure_context_summary(Conversation.objects.get(pk=conversation.pk))
            returned[name] = (time.monotonic() - started, summary)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=caller, args=(n, d)) for n, d in (("a", 0), ("b", 0.5))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    print(f"two callers: back after {[round(t, 3) for t, _ in returned.values()]} s")
    assert fake_llm.count("anthropic.messages") == 1
    [(model, details)] = window_shifts(conversation)
    assert (model, "offline_fallback" in details, "took_over_stalled_lease" in details) == (
        settings.ANTHROPIC_SUMMARY_MODEL,
        False,
        False,
    )
    assert returned["a"][1] == returned["b"][1]
    assert returned["b"][1].startswith("One summary for both.")
    # Back once the summary landed, not at the deadline.
    assert returned["b"][0] < 120
    conversation.refresh_from_db()
    assert conversation.summary_failure is None


@pytest.mark.django_db(transaction=True)
def test_a_hanging_summarizer_holds_the_chat_only_until_its_deadline(fake_llm, settings):
    import time

    from assistant.precall.hook import ensure_context_summary
    from assistant.providers.offline.provider import OFFLINE_MODEL

    settings.LLM_MAX_RETRIES = 2  # the worker's chain: 3 x 30 s; the chat's deadline: 5 s
    conversation = over_the_trigger(fake_llm, settings, "hanging", slow(60), slow(60), slow(60))
    add_message(conversation, "user", "one more question " + "q" * 400)

    started = time.monotonic()
    ensure_context_summary(conversation)
    waited = time.monotonic() - started
    size, bound = request_and_bound(conversation)

    print(f"hanging summarizer: the chat call took {waited:.3f} s")
    assert waited < 20.0  # the 5 s deadline with room to spare; one attempt alone is 30 s
    assert size <= bound
    assert fake_llm.count("anthropic.messages") == 1  # one attempt on the chat path
    [(model, details)] = window_shifts(conversation)
    assert (model, details["fallback"], details["offline_fallback"]) == (
        OFFLINE_MODEL,
        True,
        "summarizer_failed",
    )


def test_past_the_deadline_the_worker_makes_the_models_summary_of_the_offline_split(
    fake_llm, settings, celery_worker
):
    from datetime import timedelta

    from django.utils import timezone

    from assistant.precall.hook import ensure_context_summary
    from assistant.providers.offline.provider import OFFLINE_MODEL

    # The chat path's call hangs past its deadline; the worker's answers at once.
    conversation = over_the_trigger(
        fake_llm,
        settings,
        "replaced by the worker",
        slow(60),
        ok(text="The model's summary."),
        COMPACTION_TIMING="cache_aware",
    )
    add_message(conversation, "user", "one more question " + "q" * 400)
    offline = ensure_context_summary(conversation)
    conversation.refresh_from_db()
    marker = conversation.offline_shift

    def built() -> bool:
        conversation.refresh_from_db()
        return conversation.pending_summary is not None

    assert wait_until(built, timeout=60)
    assert conversation.pending_summary.startswith("The model's summary.")
    assert conversation.pending_through_message_id == marker["through"]
    assert ensure_context_summary(conversation) == offline  # nothing rewrites the prefix yet
    hour_ago = timezone.now() - timedelta(hours=1)
    conversation.messages.filter(role="assistant").update(created_at=hour_ago)

    assert ensure_context_summary(conversation).startswith("The model's summary.")
    assert fake_llm.count("anthropic.messages") == 2  # the chat path's try, the worker's
    assert [
        (model, d.get("replaces_offline", False)) for model, d in window_shifts(conversation)
    ] == [
        (OFFLINE_MODEL, False),
        (settings.ANTHROPIC_SUMMARY_MODEL, True),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_holder_still_summarizing_past_the_chat_deadline_gives_way_to_an_offline_shift(
    fake_llm, settings
):
    import time

    from assistant.precall.hook import ensure_context_summary

    # Alive, beating, and later than the deadline by 8 s.
    conversation = over_the_trigger(
        fake_llm, settings, "late worker", slow(10), SUMMARY_CHAT_DEADLINE_SECONDS=2
    )
    thread, built = worker_summarizing(conversation, fake_llm)
    add_message(conversation, "user", "one more question " + "q" * 400)
    started = time.monotonic()
    ensure_context_summary(conversation)
    waited = time.monotonic() - started
    size, bound = request_and_bound(conversation)
    thread.join(timeout=60)

    print(f"late worker: the chat waited {waited:.3f} s, then shifted offline")
    assert 2.0 <= waited < 10.0  # the deadline, then the offline summarizer: not the holder
    assert size <= bound
    assert built == [True]  # taken over, yet its summary is kept (as pending)
    assert_offline_takeover(conversation, "late")


@pytest.mark.django_db(transaction=True)
def test_a_late_holders_summary_replaces_the_offline_one_at_the_next_prefix_rewrite(
    fake_llm, settings
):
    from datetime import timedelta

    from django.utils import timezone

    from assistant.precall.hook import ensure_context_summary
    from assistant.providers.offline.provider import OFFLINE_MODEL

    # Cache-aware timing: the worker's summary must wait for a rewrite of the prefix.
    conversation = over_the_trigger(
        fake_llm,
        settings,
        "late worker kept",
        slow(10, ok(text="The worker's summary.")),
        SUMMARY_CHAT_DEADLINE_SECONDS=2,
        COMPACTION_TIMING="cache_aware",
    )
    thread, built = worker_summarizing(conversation, fake_llm)
    add_message(conversation, "user", "one more question " + "q" * 400)
    offline = ensure_context_summary(conversation)  # past the deadline: an offline shift
    thread.join(timeout=60)
    conversation.refresh_from_db()
    marker = conversation.offline_shift
    pending = conversation.pending_summary

    assert built == [True]
    assert pending.startswith("The worker's summary.")
    assert conversation.pending_base_message_id == marker["base"]
    assert conversation.pending_through_message_id == marker["through"]
    # A request that rewrites nothing keeps the cached prefix: the offline summary stays.
    add_message(conversation, "assistant", "An answer.", input_tokens=6000)
    add_message(conversation, "user", "And then?")
    assert ensure_context_summary(conversation) == offline
    # The provider's cache went cold: the prefix is rewritten anyway, with the model's summary.
    hour_ago = timezone.now() - timedelta(hours=1)
    conversation.messages.filter(role="assistant").update(created_at=hour_ago)
    summary = ensure_context_summary(conversation)

    assert summary.startswith("The worker's summary.")
    assert fake_llm.count("anthropic.messages") == 1  # the holder's call, paid once and used
    shifts = window_shifts(conversation)
    assert [(model, d.get("replaces_offline", False)) for model, d in shifts] == [
        (OFFLINE_MODEL, False),
        (settings.ANTHROPIC_SUMMARY_MODEL, True),
    ]
    assert shifts[1][1]["through_message_id"] == marker["through"]
    conversation.refresh_from_db()
    assert conversation.offline_shift is None
    assert conversation.pending_summary is None


@pytest.mark.django_db(transaction=True)
def test_a_late_holders_summary_landing_during_the_offline_write_is_kept(
    fake_llm, settings, empty_queues, tmp_path, monkeypatch
):
    from datetime import timedelta

    from django.utils import timezone

    from assistant.precall.hook import ensure_context_summary
    from assistant.providers.offline.provider import OFFLINE_MODEL, OfflineProvider

    # The worker's summarizer answers in 8 s, the chat's deadline is 1 s: the chat takes
    # the live holder's lease over and shifts with the offline summarizer.
    compaction = {**HUNG_TRIGGER, **LIVE_HOLDER, "SUMMARY_CHAT_DEADLINE_SECONDS": 1}
    compaction["COMPACTION_TIMING"] = "cache_aware"
    worker_reply = slow(8, ok(text="The worker's summary."))
    conversation = over_the_trigger(
        fake_llm, settings, "landed meanwhile", worker_reply, ok(text="Extended."), **compaction
    )

    def landed() -> bool:
        conversation.refresh_from_db()
        return conversation.pending_summary is not None

    # The holder's summary lands between the takeover and the offline write: the
    # offline summarizer (the chat's, in this process) answers only once it has.
    offline_summarize = OfflineProvider.summarize

    def after_the_holder_landed(self, *args, **kwargs):
        assert wait_until(landed, timeout=60)
        return offline_summarize(self, *args, **kwargs)

    monkeypatch.setattr(OfflineProvider, "summarize", after_the_holder_landed)
    get_provider()  # the SDK imported now: the chat's deadline is not spent importing it
    worker_env = {**fake_llm.env(), "TEST_LLM_TIMEOUT_SECONDS": "30"}
    with worker_process("late", tmp_path, compaction, worker_env):
        finish_exchange(conversation)  # the worker pre-builds the next summary
        log = tmp_path / "worker-late.log"
        assert wait_until(lambda: fake_llm.count("anthropic.messages") == 1, timeout=90), (
            log.read_text()
        )
        add_message(conversation, "user", "one more question " + "q" * 400)
        offline = ensure_context_summary(conversation)
        conversation.refresh_from_db()
        marker = conversation.offline_shift
        assert_offline_takeover(conversation, "late")
        # Kept, not removed by the offline write: built on the split the offline one replaced.
        assert conversation.pending_summary.startswith("The worker's summary.")
        assert conversation.pending_base_message_id == marker["base"]

        def replacement_ready() -> bool:
            conversation.refresh_from_db()
            through = conversation.pending_through_message_id or 0
            return through >= marker["through"]

        # Short of the offline split, the worker extends it with the messages after it.
        assert wait_until(replacement_ready, timeout=60), log.read_text()
    add_message(conversation, "assistant", "An answer.", input_tokens=6000)
    add_message(conversation, "user", "And then?")
    assert ensure_context_summary(conversation) == offline  # nothing rewrites the prefix yet
    hour_ago = timezone.now() - timedelta(hours=1)
    conversation.messages.filter(role="assistant").update(created_at=hour_ago)
    summary = ensure_context_summary(conversation)

    worker_calls = fake_llm.requests_for("anthropic.messages")
    assert 1 <= len(worker_calls) <= 2  # the holder's call, and the extension if it was short
    if len(worker_calls) == 2:  # the extension starts from the holder's summary
        assert "The worker's summary." in json.dumps(worker_calls[1].body)
    assert summary.startswith(("The worker's summary.", "Extended."))
    assert [(m, d.get("replaces_offline", False)) for m, d in window_shifts(conversation)] == [
        (OFFLINE_MODEL, False),
        (settings.ANTHROPIC_SUMMARY_MODEL, True),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_staff_regenerate_run_has_the_summarizers_own_timeout_not_the_chat_deadline(
    fake_llm, settings
):
    from assistant.services import regenerate_window_summary
    from assistant.staff.operations import run_staff_action

    reply = slow(3, ok(text="The staff's summary."))
    conversation = over_the_trigger(
        fake_llm, settings, "staff run", reply, SUMMARY_CHAT_DEADLINE_SECONDS=1
    )

    run_staff_action("regenerate_summary", conversation.pk, None)

    assert fake_llm.count("anthropic.messages") == 1
    [(model, details)] = window_shifts(conversation)
    assert (model, "offline_fallback" in details) == (settings.ANTHROPIC_SUMMARY_MODEL, False)
    conversation.refresh_from_db()
    assert conversation.compaction_summary.startswith("The staff's summary.")
    # The same call on the chat path (the emergency levels use it) keeps its deadline.
    add_message(conversation, "user", "more " + "q" * 4000)
    fake_llm.script_summaries(slow(3))
    assert regenerate_window_summary(conversation) is True
    assert window_shifts(conversation)[-1][1]["offline_fallback"] == "summarizer_failed"
