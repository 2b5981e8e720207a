"""Summaries off the chat path (docs/compaction.rst: the worker pre-builds the next
summary, so the chat rarely waits on it).

The post-exchange task runs once per turn, but the pre-call hook shifts
inside turns: a summary the worker builds at the end of a turn is for a
split that the next turn's calls have long moved past. So, once a Celery
worker is known to serve the conversation (its tasks stamp WORKER_SEEN_AT),
the hook asks it for the summary of the split it is heading for (past
SOFT_WATERMARK, or when an early shift pays), and every shift the request
does not need to fit waits for that summary instead of making the user wait
on the summarizer: an early shift, and one at the trigger once compacting
the consumed results got the request under it. Only a shift the request
needs waits on the worker or summarizes on the chat path. The pre-call flow
runs this as its plan's window step (`leave_to_worker`) when a worker is ahead.
"""

from __future__ import annotations

import logging
import time

from assistant.history import PREBUILD_TASK, enqueue_on_commit, fresh_state, remember, write_state
from assistant.models import Conversation, MetadataKeys
from assistant.providers import ProviderError
from assistant.settings.conf import CompactionConfig
from assistant.summary.prebuild import prebuild_window_summary
from assistant.window import (
    MoveWindow,
    WindowState,
    load_window,
    shift_within_latency,
    split_parts,
    worker_split,
)

logger = logging.getLogger(__name__)


def ask_worker_ahead(state: WindowState) -> bool:
    """Ask the worker for the summary of the split ahead, once per split;
    True when a request for the current split is outstanding."""
    if state.meta.has_pending_summary or not state.meta.worker_seen:
        return False
    request = state.meta.prebuild_request or {}
    if "base" in request and request["base"] == state.through_id:
        return not request.get("answered")
    # How long the worker took to answer the last request: the latency the next
    # pre-build projects its split by (`worker_split`).
    took = {"took": request["took"]} if request.get("took") else {}
    request = {"base": state.through_id, "at": time.time(), **took}
    asked = {MetadataKeys.PREBUILD_REQUEST: request}
    write_state(Conversation.objects.filter(pk=state.conversation_id), asked)
    remember(state.columns, asked)
    # The queued marker keeps one such task waiting per conversation.
    enqueue_on_commit(PREBUILD_TASK, state.conversation_id, unless_queued=True)
    return True


def ask_after_shift(before: WindowState, after: WindowState, worker_ahead: bool) -> None:
    """Right after a shift (`before` -> `after`): ask the worker for the next
    summary at once when the next shift is due within one worker latency
    (`shift_within_latency`), rather than at the next call, a call later."""
    moved = after.through_id != before.through_id
    if moved and worker_ahead and shift_within_latency(after, after.config):
        ask_worker_ahead(after)


def defer_to_worker(state: WindowState, config: CompactionConfig) -> bool:
    """Whether an early shift waits for the worker's summary: while the
    request for the current split is outstanding, for at most
    SUMMARY_WAIT_SECONDS. A worker that does not answer by then is no longer
    waited for, until one runs this conversation's work again."""
    if not ask_worker_ahead(state):
        return False
    asked = float(state.meta.prebuild_request.get("at", 0))
    if time.time() - asked < config.SUMMARY_WAIT_SECONDS:
        return True
    unseen = [MetadataKeys.WORKER_SEEN_AT]
    write_state(Conversation.objects.filter(pk=state.conversation_id), clear=unseen)
    remember(state.columns, clear=unseen)
    return False


def leave_to_worker(
    state: WindowState, window: MoveWindow, *, changed: bool = False, adopted: bool = False
) -> MoveWindow | None:
    """The window step with a worker ahead (`MoveWindow.worker_ahead`): with no
    shift due, ask it for the next summary (`MoveWindow.ask_worker`); a shift
    the request does not need to fit (an early one, or one at the trigger once
    compacting the consumed results got the request under it) waits for the
    worker's summary (`defer_to_worker`). Returns the step to make here, checked
    on `state` (`changed`: an earlier step changed the window; `adopted`: by
    adopting the pre-built summary); None when the worker makes it."""
    if changed:
        window = window.on(state, state.config, adopted=adopted)
    shift = window.shift
    if shift is None:
        if window.ask_worker:
            ask_worker_ahead(state)
        return None
    if not shift.needed and defer_to_worker(state, state.config):
        return None
    return window


def note_worker(conversation_id: int) -> None:
    """Called by the Celery tasks: a worker serves this conversation."""
    write_state(
        Conversation.objects.filter(pk=conversation_id),
        {MetadataKeys.WORKER_SEEN_AT: round(time.time(), 3)},
    )


def serve_prebuild_request(conversation_id: int) -> bool:
    """The worker's side of `ask_worker_ahead`: build the summary of the
    split the hook is heading for, then mark the request answered (whatever
    came of it, so the hook stops waiting), unless the split could not move
    yet (asked a latency ahead, before the window grew): then the request is
    dropped, its latency kept, and the hook asks again. False when nothing
    was built."""
    conversation = Conversation.objects.filter(pk=conversation_id, deleted_at__isnull=True).first()
    if conversation is None:
        return False
    request = fresh_state(conversation_id).prebuild_request
    built = False
    try:
        built = prebuild_window_summary(conversation, requested=True)
        return built
    except ProviderError as exc:  # the hook summarizes itself; never retried from here
        logger.warning(
            "summary_failed conversation=%s error=%s", conversation_id, type(exc).__name__
        )
        return False
    finally:
        current = fresh_state(conversation_id).prebuild_request
        if request and current.get("base") == request.get("base"):
            took = round(time.time() - float(current.get("at", 0)), 3)
            answered = {**current, "answered": True, "took": took}
            if not built and _nothing_to_split_yet(conversation_id):
                answered = {"took": current["took"]} if current.get("took") else {}
            write_state(
                Conversation.objects.filter(pk=conversation_id),
                {MetadataKeys.PREBUILD_REQUEST: answered},
            )


def _nothing_to_split_yet(conversation_id: int) -> bool:
    """The split the hook asked for cannot move yet (the window holds no
    older step to summarize), and no summary is pending for it."""
    state = load_window(conversation_id)
    if state.meta.has_pending_summary or state.meta.offline_shift:
        return False
    start = worker_split(state, state.config, requested=True)
    return start is None or not split_parts(state, start)[0]
