"""The audit trail: a CompactionEvent row and one structured log line per
compaction. Logs carry ids, kinds, counts and durations, never content. The
one place compaction events are recorded, so also where they are counted
(assistant.ops.telemetry) and where the hosts' signals (assistant.signals) are
sent, on commit.

Who asked for a compaction is carried by a context variable rather than
threaded through every strategy: `with acting_as(user): ...` around a service
call (the admin, a command, a worker task run for a staff user) makes each
event recorded inside it name that user; automatic work names nobody.

A staff action is one event however many compactions it makes (`one_event`):
the context before and after it, and in its details each part it made.

Every compaction has a start and exactly one end (`compacting`): the start as it
begins, the end (completed, failed or skipped) as its block ends, each sent as
`assistant.signals.compaction_event` and to the listeners of the step under way
(`listening`: chat_step's `on_compaction`). A compaction recorded with no block
of its kind open (the worker's tool results, the provider's own) gets its start
and end as it is recorded. A listener or receiver that raises is logged and the
compaction goes on.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.dispatch import Signal

from assistant import signals
from assistant.history.arguments import MAX_ID
from assistant.models import CompactionEvent, Conversation
from assistant.ops import telemetry
from assistant.ops.logs import log_event
from assistant.window import current_limits

EMERGENCY_LEVELS: dict[str, int] = {
    CompactionEvent.Kind.EMERGENCY_1: 1,
    CompactionEvent.Kind.EMERGENCY_2: 2,
}

_acting_user_id: ContextVar[int | None] = ContextVar("assistant_acting_user_id", default=None)
# Inside `one_event`: its conversation, the parts recorded so far and its lifecycle
# (None outside one).
_parts: ContextVar[tuple[int, list[dict[str, Any]], Lifecycle] | None] = ContextVar(
    "assistant_event_parts", default=None
)
# Inside `one_rewrite`: its conversation, the request's size before it, and the
# window-summary events held until it ends, each with its lifecycle and summary
# (None outside one).
_rewrite: ContextVar[tuple[int, int, list[Held]] | None] = ContextVar(
    "assistant_rewrite", default=None
)
# The compactions under way (`compacting`), innermost last.
_open: ContextVar[tuple[Lifecycle, ...]] = ContextVar("assistant_open_compactions", default=())
# Details every event recorded inside `noted` carries (the compact tool's
# "requested_by": "model"), keyed by conversation.
_noted: ContextVar[tuple[int, dict[str, Any]] | None] = ContextVar(
    "assistant_noted_details", default=None
)
# The listeners of the step under way (`listening`).
_listeners: ContextVar[tuple[Callable[[signals.CompactionNotice], Any], ...]] = ContextVar(
    "assistant_compaction_listeners", default=()
)
# The kind of a staff action's one event: that of its most telling part.
KIND_ORDER = (
    CompactionEvent.Kind.EMERGENCY_2,
    CompactionEvent.Kind.EMERGENCY_1,
    CompactionEvent.Kind.WINDOW_SUMMARY,
    CompactionEvent.Kind.FORK_SUMMARY,
    CompactionEvent.Kind.RESTORE,
    CompactionEvent.Kind.TOOL_RESULTS,
    CompactionEvent.Kind.DEDUP,
    CompactionEvent.Kind.MEDIA,
)
# Details of the parts that add up in the one event (the cost module reads them).
SUMMED_DETAILS = ("summarizer_cache_read_tokens", "summarizer_cache_write_tokens")


@contextmanager
def acting_as(user: Any) -> Iterator[None]:
    """Attribute the compaction events recorded inside the block to `user`
    (a user or a user id). None keeps whoever an enclosing block acts for."""
    user_id = acting_user_of(user)
    if user_id is None:
        yield
        return
    token = _acting_user_id.set(user_id)
    try:
        yield
    finally:
        _acting_user_id.reset(token)


def acting_user_of(user: Any) -> int | None:
    """The id of an acting user (a user, a user id, or None), once it names a stored
    user: anything else is ValidationError `invalid_acting_user`, before the action runs
    (an event or a history entry naming no user would be refused by the database)."""
    user_id = getattr(user, "pk", user)
    if user_id is None:
        return None
    if (
        type(user_id) is not int
        or not 1 <= user_id <= MAX_ID
        or not get_user_model().objects.filter(pk=user_id).exists()
    ):
        raise ValidationError(
            f"The acting user {user!r} is not a stored user (a user, its id, or None).",
            code="invalid_acting_user",
        )
    return user_id


def acting_user_id() -> int | None:
    """The id of the user the current block acts for, if any."""
    return _acting_user_id.get()


@dataclass
class Stopwatch:
    started: float = 0.0

    @property
    def ms(self) -> int:
        return int((time.perf_counter() - self.started) * 1000)


@contextmanager
def stopwatch() -> Iterator[Stopwatch]:
    yield Stopwatch(time.perf_counter())


@dataclass
class Lifecycle:
    """One compaction from its start to its one end. `fail(error)` makes its end
    `failed`; a block that records its event ends `completed`; else `skipped`. A
    lifecycle inside a staff action's `one_event` is one of its parts: silent."""

    conversation_id: int
    kind: str
    tokens_before: int
    silent: bool = False
    compaction_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    acting_user_id: int | None = None
    event: CompactionEvent | None = None
    summary: str | None = None
    error: str | None = None
    held: bool = False  # its event waits for the end of the rewrite it is in
    ended: bool = False

    def fail(self, error: str) -> None:
        self.error = error[:500]

    def start(self) -> None:
        self.acting_user_id = acting_user_id()
        self._emit(
            signals.CompactionNotice(
                self.compaction_id,
                self.conversation_id,
                signals.STARTED,
                self.kind,
                self.tokens_before,
                acting_user_id=self.acting_user_id,
            )
        )

    def end(self) -> None:
        """The one end: failed (an error), completed (an event), else skipped."""
        if self.ended:
            return
        self.ended = True
        event = self.event
        status = (
            signals.FAILED
            if self.error is not None
            else signals.COMPLETED
            if event is not None
            else signals.SKIPPED
        )
        self._emit(
            signals.CompactionNotice(
                self.compaction_id,
                self.conversation_id,
                signals.ENDED,
                event.kind if event is not None else self.kind,
                self.tokens_before,
                status=status,
                tokens_after=event.tokens_after if event is not None else None,
                summary=self.summary if event is not None else None,
                error=self.error,
                event_id=event.pk if event is not None else None,
                acting_user_id=self.acting_user_id,
            )
        )

    def _emit(self, notice: signals.CompactionNotice) -> None:
        if self.silent:
            return
        _send(signals.compaction_event, sender=Conversation, notice=notice)
        for listener in _listeners.get():
            try:
                listener(notice)
            except Exception as error:  # the host's callback never loses the compaction
                log_event(
                    "compaction_callback_failed",
                    level=logging.WARNING,
                    conversation_id=notice.conversation_id,
                    compaction_id=notice.compaction_id,
                    error=type(error).__name__,
                )


@dataclass
class Held:
    fields: dict[str, Any]
    lifecycle: Lifecycle | None
    summary: str | None


@contextmanager
def compacting(conversation_id: int, kind: str, tokens_before: int) -> Iterator[Lifecycle]:
    """One compaction of `kind`: its start now, its one end when the block ends. The
    event of this kind recorded inside completes it (`record_compaction`, with its
    summary); `lifecycle.fail(error)` fails it; an error raised inside fails it and
    goes on; nothing recorded skips it."""
    held = _parts.get()
    silent = held is not None and held[0] == conversation_id
    lifecycle = Lifecycle(conversation_id, kind, tokens_before, silent=silent)
    lifecycle.start()
    token = _open.set((*_open.get(), lifecycle))
    try:
        yield lifecycle
    except BaseException as error:
        lifecycle.fail(f"{type(error).__name__}: {error}")
        lifecycle.held = False
        raise
    finally:
        _open.reset(token)
        if not lifecycle.held:
            lifecycle.end()


@contextmanager
def noted(conversation_id: int, **details: Any) -> Iterator[None]:
    """Add `details` to the details of every compaction event of the conversation
    recorded inside the block (why it was made: the compact tool's
    {"requested_by": "model"})."""
    token = _noted.set((conversation_id, details))
    try:
        yield
    finally:
        _noted.reset(token)


@contextmanager
def listening(listener: Callable[[signals.CompactionNotice], Any] | None) -> Iterator[None]:
    """Hand `listener` every start and end made inside the block (a step's
    `on_compaction`), beside the signal. None listens to nothing."""
    if listener is None:
        yield
        return
    token = _listeners.set((*_listeners.get(), listener))
    try:
        yield
    finally:
        _listeners.reset(token)


@contextmanager
def one_event(conversation_id: int, size: Callable[[], int], kind: str) -> Iterator[None]:
    """Record the compactions of the conversation made inside the block as one
    event: the most telling part's kind, the context before and after the
    block (`size()`), the parts' messages, durations and summarizer tokens
    added up, and each part (its kind, messages and details) in its details.
    Written when the block ends, even by an error (what was done is kept). It is
    one compaction, started as `kind`: its parts start and end nothing."""
    before = size()
    parts: list[dict[str, Any]] = []
    lifecycle = Lifecycle(conversation_id, kind, before)
    lifecycle.start()
    token = _parts.set((conversation_id, parts, lifecycle))
    try:
        yield
    except BaseException as error:
        lifecycle.fail(f"{type(error).__name__}: {error}")
        raise
    finally:
        _parts.reset(token)
        if parts:
            _record_parts(conversation_id, parts, before, size(), lifecycle)
        lifecycle.end()


@contextmanager
def one_rewrite(conversation_id: int, before: int, after: Callable[[], int]) -> Iterator[None]:
    """A rewrite of the conversation's next request (the pre-call hook's steps, an
    emergency level): a window summary recorded inside reads the request's size
    `before` the rewrite and `after()` it, when the block ends, not the shift's own
    part (the results the same rewrite compacts are in its fall: docs/admin.rst,
    "Token figures"); it is written then, even by an error. An enclosing rewrite of
    the same conversation stands."""
    held = _rewrite.get()
    if held is not None and held[0] == conversation_id:
        yield
        return
    events: list[Held] = []
    token = _rewrite.set((conversation_id, before, events))
    try:
        yield
    finally:
        _rewrite.reset(token)
        if events:
            size = after()
            for waiting in events:
                fields = {**waiting.fields, "tokens_before": before, "tokens_after": size}
                if waiting.lifecycle is not None:
                    waiting.lifecycle.held = False
                _record(conversation_id, fields, waiting.summary, waiting.lifecycle)


def _record_parts(
    conversation_id: int,
    parts: list[dict[str, Any]],
    before: int,
    after: int,
    lifecycle: Lifecycle,
) -> None:
    kinds = {part["kind"] for part in parts}
    details: dict[str, Any] = {
        key: sum(part["details"].get(key, 0) for part in parts)
        for key in SUMMED_DETAILS
        if any(key in part["details"] for part in parts)
    }
    details["parts"] = [
        {
            "kind": part["kind"],
            "messages_affected": part["messages_affected"],
            "tokens_before": part["tokens_before"],
            "tokens_after": part["tokens_after"],
            **part["details"],
        }
        for part in parts
    ]
    fields = {
        "kind": next(kind for kind in KIND_ORDER if kind in kinds),
        "tokens_before": before,
        "tokens_after": after,
        "messages_affected": _messages_affected(parts),
        "duration_ms": sum(part["duration_ms"] for part in parts),
        "summarizer_model": next(
            (p["summarizer_model"] for p in parts if p["summarizer_model"]), ""
        ),
        "summarizer_input_tokens": sum(part["summarizer_input_tokens"] for part in parts),
        "summarizer_output_tokens": sum(part["summarizer_output_tokens"] for part in parts),
        "details": details,
    }
    _record(conversation_id, fields, lifecycle.summary, lifecycle)


def _messages_affected(parts: list[dict[str, Any]]) -> int:
    """The parts' messages, an emergency level's left out where other parts are
    there: it counts again the tool results its own parts compacted."""
    counted = [part for part in parts if part["kind"] not in EMERGENCY_LEVELS] or parts
    return sum(part["messages_affected"] for part in counted)


def record_compaction(
    conversation_id: int,
    kind: str,
    *,
    tokens_before: int,
    tokens_after: int,
    messages_affected: int,
    duration_ms: int,
    summarizer_model: str = "",
    summarizer_input_tokens: int = 0,
    summarizer_output_tokens: int = 0,
    details: dict | None = None,
    summary: str | None = None,
) -> CompactionEvent | None:
    """The event row, its log line, its metric and (on commit) its signals;
    inside `one_event` for this conversation, a part of that one event
    instead (None: the row is written when the block ends). It completes the
    innermost `compacting` block of its kind open for the conversation (with
    `summary`, where one was made); with none open, its start and end are sent
    now."""
    fields = {
        "kind": kind,
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "messages_affected": messages_affected,
        "duration_ms": duration_ms,
        "summarizer_model": summarizer_model,
        "summarizer_input_tokens": summarizer_input_tokens,
        "summarizer_output_tokens": summarizer_output_tokens,
        "details": {**(details or {}), **_noted_for(conversation_id)},
    }
    return _record(conversation_id, fields, summary, _open_of(conversation_id, kind))


def _noted_for(conversation_id: int) -> dict[str, Any]:
    held = _noted.get()
    return dict(held[1]) if held is not None and held[0] == conversation_id else {}


def _open_of(conversation_id: int, kind: str) -> Lifecycle | None:
    """The innermost compaction of this kind under way for the conversation, its
    event not recorded yet."""
    for lifecycle in reversed(_open.get()):
        if (
            lifecycle.conversation_id == conversation_id
            and lifecycle.kind == kind
            and lifecycle.event is None
            and not lifecycle.held
        ):
            return lifecycle
    return None


def _record(
    conversation_id: int,
    fields: dict[str, Any],
    summary: str | None,
    lifecycle: Lifecycle | None,
) -> CompactionEvent | None:
    if _held(conversation_id, fields, summary, lifecycle):
        return None
    collecting = _parts.get()
    if collecting is not None and collecting[0] == conversation_id:
        collecting[1].append(fields)
        if summary:
            collecting[2].summary = summary
        return None
    event = _write(conversation_id, fields)
    if lifecycle is None:  # made with no block open: its start and end now
        lifecycle = Lifecycle(conversation_id, fields["kind"], fields["tokens_before"])
        lifecycle.start()
        if fields["kind"] == CompactionEvent.Kind.PROVIDER_FAILED:
            lifecycle.fail("the provider's compaction failed")
        lifecycle.event, lifecycle.summary = event, summary
        lifecycle.end()
    else:
        lifecycle.event, lifecycle.summary = event, summary
        if not _is_open(lifecycle):
            lifecycle.end()  # a held event, written at the end of its rewrite
    return event


def _is_open(lifecycle: Lifecycle) -> bool:
    return any(open_ is lifecycle for open_ in _open.get())


def _write(conversation_id: int, fields: dict[str, Any]) -> CompactionEvent:
    kind = fields["kind"]
    tokens_before, tokens_after = fields["tokens_before"], fields["tokens_after"]
    messages_affected, duration_ms = fields["messages_affected"], fields["duration_ms"]
    summarizer_model, details = fields["summarizer_model"], fields["details"]
    user_id = acting_user_id()
    event = CompactionEvent.objects.create(
        conversation_id=conversation_id, acting_user_id=user_id, **fields
    )
    log_event(
        kind,
        conversation_id=conversation_id,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        messages_affected=messages_affected,
        duration_ms=duration_ms,
        summarizer_model=summarizer_model or None,
        acting_user_id=user_id,
    )
    telemetry.compaction(
        kind,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        prebuilt=bool((details or {}).get("prebuilt")),
    )
    transaction.on_commit(lambda: send_signals(event))
    return event


def _held(
    conversation_id: int,
    fields: dict[str, Any],
    summary: str | None,
    lifecycle: Lifecycle | None,
) -> bool:
    """A window summary inside `one_rewrite` of its conversation waits for its end,
    and so does the end of its compaction."""
    rewriting = _rewrite.get()
    if fields["kind"] != CompactionEvent.Kind.WINDOW_SUMMARY or rewriting is None:
        return False
    if rewriting[0] != conversation_id:
        return False
    if lifecycle is not None:
        lifecycle.held = True
    rewriting[2].append(Held(fields, lifecycle, summary))
    return True


def send_signals(event: CompactionEvent) -> None:
    """context_compacted for every event (its share of the window: of the conversation's
    model's), then emergency_compaction for an emergency level."""
    window = current_limits(event.conversation_id).window
    common = {
        "conversation_id": event.conversation_id,
        "event_id": event.pk,
        "tokens_before": event.tokens_before,
        "tokens_after": event.tokens_after,
        "acting_user_id": event.acting_user_id,
    }
    _send(
        signals.context_compacted,
        sender=Conversation,
        kind=event.kind,
        window=window,
        share_of_window=event.tokens_after / window,
        **common,
    )
    level = EMERGENCY_LEVELS.get(event.kind)
    if level is not None:
        _send(signals.emergency_compaction, sender=Conversation, level=level, **common)


def _send(signal: Signal, **kwargs: Any) -> None:
    """A host's receiver that fails is logged, never the chat's or the worker's failure."""
    for receiver, result in signal.send_robust(**kwargs):
        if isinstance(result, Exception):
            log_event(
                "signal_receiver_failed",
                level=logging.WARNING,
                receiver=getattr(receiver, "__qualname__", repr(receiver))[:120],
                error=type(result).__name__,
            )
