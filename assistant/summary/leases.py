"""The summary lease: one summary generation per conversation at a time.

`summary_lease(conversation_id)` is a context manager. Claimed with a
conditional UPDATE (free, expired, or held by a process that is gone), held
with no open transaction and no row lock while the LLM runs, and honoured on
write: a result is stored only `WHERE` the token is still ours.

While it holds the lease, the holding process keeps a heartbeat: a daemon
thread stamps the lease every SUMMARY_STALL_SECONDS / 3 (the expiry is the
stamp: the last beat is the expiry less SUMMARY_LEASE_SECONDS), and stops when
the lease is released. A slow summarizer call is not a stalled one: its holder
keeps beating however long the call takes. A holder that stops beating (a
frozen process, a partition) is given up on after SUMMARY_STALL_SECONDS and
its lease may be taken over (`claim(..., take_over_stalled=True)`); so may a
live one that a chat caller waited on past its deadline (`take_over_late`).
The former holder's later writes then match no row.

Time comes from the database clock, never from an app server's, so two
machines whose clocks disagree cannot both think they hold the lease. On
PostgreSQL the holder's backend pid is recorded too: a holder whose
connection is gone (a killed worker, a terminated connection) has no backend
left, so its lease is taken over at once instead of after it expires.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from django.db import DatabaseError, connection, connections
from django.db.models import BooleanField, DateTimeField, ExpressionWrapper, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from assistant.models import Conversation
from assistant.ops import telemetry
from assistant.settings.conf import compaction_config

logger = logging.getLogger(__name__)


class SummaryInTransaction(RuntimeError):
    """A summary lease was needed inside the caller's transaction: its row lock
    would be held for the whole LLM call, blocking every other caller."""


@dataclass(frozen=True)
class Lease:
    conversation_id: int
    token: uuid.UUID
    # Claimed from a holder whose heartbeat stopped ("stalled") or that a chat caller
    # waited on past SUMMARY_CHAT_DEADLINE_SECONDS ("late"); None: a free row.
    took_over_from: str | None = None

    @property
    def took_over(self) -> bool:
        return self.took_over_from is not None

    def holding(self) -> QuerySet[Conversation]:
        """The conversation row, only while this lease still holds it."""
        return Conversation.objects.filter(pk=self.conversation_id, summary_lease_token=self.token)

    def renew(self) -> bool:
        """Stamp the lease from now (database clock); False if it was lost
        (taken over, or expired and claimed by another)."""
        return self.holding().update(**_lease_columns(self.token)) == 1

    def beat(self) -> bool:
        """The heartbeat's stamp: the expiry only, the holder's backend pid stays
        the claiming connection's (the heartbeat's own connection is not the holder)."""
        return self.holding().update(summary_lease_expires_at=_expiry()) == 1

    def release(self) -> bool:
        return (
            self.holding().update(
                summary_lease_token=None,
                summary_lease_expires_at=None,
                summary_lease_holder_pid=None,
            )
            == 1
        )


@contextmanager
def summary_lease(
    conversation_id: int, *, take_over_stalled: bool = False, take_over_late: bool = False
) -> Iterator[Lease | None]:
    """Hold the conversation's summary lease for the block, with a heartbeat;
    yields None when a live holder has it (and, with `take_over_stalled`, its
    heartbeat goes on; with `take_over_late` too, None never: see `claim`).
    Refuses to run inside the caller's transaction."""
    refuse_inside_transaction()
    lease = claim(
        conversation_id, take_over_stalled=take_over_stalled, take_over_late=take_over_late
    )
    if lease is None:
        yield None
        return
    try:
        with heartbeat(lease):
            yield lease
    finally:
        lease.release()


@contextmanager
def heartbeat(lease: Lease) -> Iterator[None]:
    """Stamp `lease` every SUMMARY_STALL_SECONDS / 3 from a daemon thread (its
    own database connection) while the block runs: frozen or killed with the
    process, so only a holder that is alive keeps its lease."""
    if connection.in_atomic_block:
        # Only a test case's own transaction gets here (refuse_inside_transaction):
        # no other connection sees the lease row, so no other caller can judge it.
        yield
        return
    stop = threading.Event()
    interval = compaction_config().SUMMARY_STALL_SECONDS / 3

    def beat() -> None:
        try:
            while not stop.wait(interval) and _beat(lease):
                pass
        finally:
            connections.close_all()  # this thread's connection only

    thread = threading.Thread(target=beat, name="summary-lease-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def claim(
    conversation_id: int, *, take_over_stalled: bool = False, take_over_late: bool = False
) -> Lease | None:
    """The lease when it is free, expired or its holder is gone; with
    `take_over_stalled`, also when its holder's heartbeat stopped for
    SUMMARY_STALL_SECONDS; with `take_over_late`, from any holder (a chat caller
    past its deadline). `Lease.took_over_from` says which."""
    token = uuid.uuid4()
    claimable = Q(summary_lease_token__isnull=True) | Q(summary_lease_expires_at__lt=Now())
    if connection.vendor == "postgresql":
        claimable |= Q(_holder_gone())
    rows = Conversation.objects.filter(pk=conversation_id)
    if rows.filter(claimable).update(**_lease_columns(token)) == 1:
        return Lease(conversation_id, token)
    if take_over_stalled and rows.filter(_stalled()).update(**_lease_columns(token)) == 1:
        return Lease(conversation_id, token, took_over_from="stalled")
    if take_over_late and rows.update(**_lease_columns(token)) == 1:
        return Lease(conversation_id, token, took_over_from="late")
    return None


def _beat(lease: Lease) -> bool:
    """One heartbeat; False once the lease is lost. A database error skips the
    beat (the next one tries again; silence past SUMMARY_STALL_SECONDS loses
    the lease, as it should while this process cannot reach the database)."""
    try:
        return lease.beat()
    except DatabaseError as error:
        logger.warning(
            "summary_lease_heartbeat_failed conversation=%s error=%s",
            lease.conversation_id,
            type(error).__name__,
        )
        connections.close_all()
        return True


def held_by_live_holder(conversation_id: int) -> bool:
    return _live_holder(conversation_id).exists()


def held_by_beating_holder(conversation_id: int) -> bool:
    """A live holder has the lease and its heartbeat stamped it within SUMMARY_STALL_SECONDS."""
    return _live_holder(conversation_id).exclude(_stalled()).exists()


def _live_holder(conversation_id: int) -> QuerySet[Conversation]:
    rows = Conversation.objects.filter(
        pk=conversation_id,
        summary_lease_token__isnull=False,
        summary_lease_expires_at__gte=Now(),
    )
    if connection.vendor == "postgresql":
        rows = rows.exclude(_holder_gone())
    return rows


def wait_for_release(conversation_id: int, timeout: float | None = None) -> bool:
    """Wait while a live holder summarizes this conversation and its heartbeat
    goes on; True once free. A dead holder (expired, or its database session
    gone) is not waited on, nor one whose heartbeat stopped for
    SUMMARY_STALL_SECONDS: False then, as when SUMMARY_CHAT_DEADLINE_SECONDS
    (or `timeout`) runs out."""
    deadline = time.monotonic() + (
        compaction_config().SUMMARY_CHAT_DEADLINE_SECONDS if timeout is None else timeout
    )
    delay, waited = 0.05, False
    while held_by_beating_holder(conversation_id):
        if time.monotonic() >= deadline:
            telemetry.lease_wait("timed_out")
            return False
        time.sleep(delay)
        delay, waited = min(delay * 2, 0.25), True
    free = not held_by_live_holder(conversation_id)
    if waited or not free:
        telemetry.lease_wait("released" if free else "stalled")
    return free


def refuse_inside_transaction() -> None:
    # Test cases wrap each test in an atomic block of their own; those are
    # not the caller's transaction (Django marks them for its durability check).
    if any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks):
        raise SummaryInTransaction(
            "The summary lease must not be claimed inside a transaction: its row lock would "
            "be held for the whole LLM call. Call the pre-call hook outside transaction.atomic() "
            "(with ATOMIC_REQUESTS, decorate the chat view with transaction.non_atomic_requests)."
        )


def _holder_gone() -> RawSQL:
    """The holder's backend has exited: its lease is dead whatever its expiry says."""
    return RawSQL(
        "summary_lease_holder_pid IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM pg_stat_activity WHERE pid = summary_lease_holder_pid)",
        [],
        output_field=BooleanField(),
    )


def _stalled() -> Q:
    """The holder's last stamp (expiry less SUMMARY_LEASE_SECONDS) is older than
    SUMMARY_STALL_SECONDS; also true of an expired lease."""
    config = compaction_config()
    silent = timedelta(seconds=config.SUMMARY_LEASE_SECONDS - config.SUMMARY_STALL_SECONDS)
    return Q(
        summary_lease_token__isnull=False,
        summary_lease_expires_at__lt=ExpressionWrapper(
            Now() + silent, output_field=DateTimeField()
        ),
    )


def _lease_columns(token: uuid.UUID) -> dict:
    return {
        "summary_lease_token": token,
        "summary_lease_expires_at": _expiry(),
        "summary_lease_holder_pid": _backend_pid(),
    }


def _expiry() -> ExpressionWrapper:
    seconds = compaction_config().SUMMARY_LEASE_SECONDS
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


def _backend_pid() -> int | None:
    if connection.vendor != "postgresql":
        return None
    return connection.connection.info.backend_pid if connection.connection else _query_pid()


def _query_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]
