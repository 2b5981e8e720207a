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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
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
# Inside `one_event`: its conversation and the parts recorded so far (None outside one).
_parts: ContextVar[tuple[int, list[dict[str, Any]]] | None] = ContextVar(
    "assistant_event_parts", default=None
)
# Inside `one_rewrite`: its conversation, the request's size before it, and the
# window-summary events held until it ends (None outside one).
_rewrite: ContextVar[tuple[int, int, list[dict[str, Any]]] | None] = ContextVar(
    "assistant_rewrite", default=None
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


@contextmanager
def one_event(conversation_id: int, size: Callable[[], int]) -> Iterator[None]:
    """Record the compactions of the conversation made inside the block as one
    event: the most telling part's kind, the context before and after the
    block (`size()`), the parts' messages, durations and summarizer tokens
    added up, and each part (its kind, messages and details) in its details.
    Written when the block ends, even by an error (what was done is kept)."""
    before = size()
    parts: list[dict[str, Any]] = []
    token = _parts.set((conversation_id, parts))
    try:
        yield
    finally:
        _parts.reset(token)
        if parts:
            _record_parts(conversation_id, parts, before, size())


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
    events: list[dict[str, Any]] = []
    token = _rewrite.set((conversation_id, before, events))
    try:
        yield
    finally:
        _rewrite.reset(token)
        if events:
            size = after()
            for fields in events:
                record_compaction(
                    conversation_id, **{**fields, "tokens_before": before, "tokens_after": size}
                )


def _record_parts(
    conversation_id: int, parts: list[dict[str, Any]], before: int, after: int
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
    record_compaction(
        conversation_id,
        next(kind for kind in KIND_ORDER if kind in kinds),
        tokens_before=before,
        tokens_after=after,
        messages_affected=_messages_affected(parts),
        duration_ms=sum(part["duration_ms"] for part in parts),
        summarizer_model=next((p["summarizer_model"] for p in parts if p["summarizer_model"]), ""),
        summarizer_input_tokens=sum(part["summarizer_input_tokens"] for part in parts),
        summarizer_output_tokens=sum(part["summarizer_output_tokens"] for part in parts),
        details=details,
    )


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
) -> CompactionEvent | None:
    """The event row, its log line, its metric and (on commit) its signals;
    inside `one_event` for this conversation, a part of that one event
    instead (None: the row is written when the block ends)."""
    fields = {
        "kind": kind,
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "messages_affected": messages_affected,
        "duration_ms": duration_ms,
        "summarizer_model": summarizer_model,
        "summarizer_input_tokens": summarizer_input_tokens,
        "summarizer_output_tokens": summarizer_output_tokens,
        "details": details or {},
    }
    if _held(conversation_id, fields):
        return None
    collecting = _parts.get()
    if collecting is not None and collecting[0] == conversation_id:
        collecting[1].append(fields)
        return None
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


def _held(conversation_id: int, fields: dict[str, Any]) -> bool:
    """A window summary inside `one_rewrite` of its conversation waits for its end."""
    rewriting = _rewrite.get()
    if fields["kind"] != CompactionEvent.Kind.WINDOW_SUMMARY or rewriting is None:
        return False
    if rewriting[0] != conversation_id:
        return False
    rewriting[2].append(fields)
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
