"""The window shift: move the split, summarizing the newly old messages or
adopting the summary the worker built ahead, under the summary lease
(assistant.summary.leases), the result written only while the lease is still
ours; a failed summary backs off, a slow one on the chat path falls back to
the offline summarizer at the chat deadline. See docs/architecture.rst."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from assistant import providers as llm
from assistant.history import (
    Lifecycle,
    compacting,
    fresh_state,
    record_compaction,
    stopwatch,
    write_state,
)
from assistant.metadata_keys import PENDING_SUMMARY_KEYS
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys, OfflineFallback
from assistant.ops import telemetry
from assistant.ops.logs import log_event
from assistant.recall import updated_index
from assistant.settings.conf import CompactionConfig
from assistant.summary.backoff import failure_blocks, record_failure
from assistant.summary.generate import (
    LeaseLost,
    Suffix,
    SummaryOutcome,
    context_after,
    suffix_for,
    summarize_messages,
    summary_room,
)
from assistant.summary.leases import Lease, summary_lease, wait_for_release
from assistant.summary.pending import (
    adoption,
    adopts,
    ask_for_replacement,
    keep_landed_summary,
    landed_on,
)
from assistant.summary.versions import record_version
from assistant.window import (
    Shift,
    WindowState,
    choose_split,
    conversation_config,
    load_window,
    refreshed_window,
    split_boundaries,
    split_parts,
    verbatim_budget,
)

logger = logging.getLogger(__name__)


def compaction_cutoff_id(conversation: Conversation) -> int | None:
    """The id of the last summarized message, read from the database."""
    return fresh_state(conversation.pk).through_id


def regenerate_window_summary(
    conversation: Conversation,
    *,
    recent_fraction: float | None = None,
    keep_last: int | None = None,
    newest_step_only: bool = False,
    on_chat_path: bool = True,
) -> bool:
    """Shift the window now, whatever the triggers say, keeping
    `recent_fraction` of the window (or the last `keep_last` messages, or only
    the newest step and its turn's user message). True if it stored one.
    `on_chat_path`: the summarizer call has the chat path's deadline (False: a
    staff run, which has the summarizer's own timeout and retries)."""
    if recent_fraction is not None and (
        type(recent_fraction) not in (int, float) or not 0 <= recent_fraction <= 1
    ):
        raise ValidationError(
            f"recent_fraction must be a number from 0 to 1, got {recent_fraction!r}.",
            code="invalid_recent_fraction",
        )
    if keep_last is not None and (type(keep_last) is not int or keep_last < 0):
        raise ValidationError(
            f"keep_last must be a whole number of messages (0 or more), got {keep_last!r}.",
            code="invalid_keep_last",
        )
    before = compaction_cutoff_id(conversation)
    shift_window(
        conversation.pk,
        conversation_config(conversation.pk),
        recent_fraction=recent_fraction,
        keep_last=keep_last,
        newest_step_only=newest_step_only,
        on_chat_path=on_chat_path,
    )
    return compaction_cutoff_id(conversation) != before


def shift_window(
    conversation_id: int,
    config: CompactionConfig,
    shift: Shift | None = None,
    *,
    recent_fraction: float | None = None,
    keep_last: int | None = None,
    newest_step_only: bool = False,
    on_chat_path: bool = True,
    start_at: int | None = None,
) -> str | None:
    """Make the pre-call hook's `shift` (assistant.window.decide), adopting
    a pre-built summary when one fits, unless another caller got the context
    below what the plan saw (`Shift.still_due`); with no `shift`, shift now
    whatever the triggers say (staff, emergency), keeping what the split
    arguments ask. Returns the summary the next request carries. One
    process at a time: a caller that finds another one summarizing waits for
    it while its heartbeat goes on, up to SUMMARY_CHAT_DEADLINE_SECONDS, then
    uses what it stored. A holder whose heartbeat stopped (a frozen process),
    or one still summarizing past the deadline, is taken over, and the shift
    is made with the offline summarizer: the chat does not wait on a provider
    again, nor send a request over the trigger. The caller's own summarizer
    call has the same deadline (unless not `on_chat_path`). A shift the request
    does not need to fit (not `Shift.needed`) skips instead when the lease is held.
    `start_at`: the id of the first message to keep verbatim (staff's "summarize
    before"), taken back to the split boundary at or before it (`cut_start`)."""
    wait = shift is None or shift.needed
    seconds = config.SUMMARY_CHAT_DEADLINE_SECONDS
    deadline = time.monotonic() + seconds
    # The provider's SDK is imported and its client built before the lease, not inside it.
    provider = llm.get_provider(within=seconds if on_chat_path else None)
    for attempt in range(2):
        late = on_chat_path and attempt == 1 and time.monotonic() >= deadline
        with summary_lease(
            conversation_id, take_over_stalled=attempt == 1, take_over_late=late
        ) as lease:
            if lease is None and not wait:
                log_event("summary_skipped", conversation_id=conversation_id, reason="lease_held")
                return load_window(conversation_id).summary
            if lease is not None:
                summary = _shift_holding(
                    lease,
                    config,
                    shift,
                    Deadline(provider, deadline if on_chat_path else math.inf),
                    recent_fraction=recent_fraction,
                    keep_last=keep_last,
                    newest_step_only=newest_step_only,
                    start_at=start_at,
                )
        if lease is not None:
            ask_for_replacement(conversation_id)  # the lease released: the worker may take it
            return summary
        if attempt == 0:
            # Released, or given up on: the second claim takes over a holder whose
            # heartbeat stopped, or one still summarizing past the deadline.
            wait_for_release(conversation_id, timeout=max(0.0, deadline - time.monotonic()))
    return load_window(conversation_id, config).summary


@dataclass(frozen=True)
class Deadline:
    """The chat path's summarizer (`llm.get_provider(within=...)`) and the
    monotonic time past which it is not asked (the offline summarizer answers)."""

    provider: llm.Provider
    at: float

    def passed(self) -> bool:
        return time.monotonic() >= self.at


def _shift_holding(
    lease: Lease,
    config: CompactionConfig,
    shift: Shift | None,
    deadline: Deadline,
    **split: Any,
) -> str | None:
    if lease.took_over:
        log_event(
            "summary_lease_taken_over",
            conversation_id=lease.conversation_id,
            holder=lease.took_over_from,
        )
    state = load_window(lease.conversation_id, config)  # re-read under the lease
    start_at = split.pop("start_at", None)
    if start_at is not None:
        start = cut_start(state, start_at)
    elif shift is None:
        # A recent window the caller asked for (staff, emergency) is kept as asked.
        asked = split.get("recent_fraction") is not None or split.get("keep_last") is not None
        budget = verbatim_budget(state, config, recent=asked)
        start = choose_split(state.rows, config, budget=budget, **split)
    else:
        if not shift.still_due(state, config):
            return state.summary  # another process shifted it meanwhile
        base = state.through_id
        adopted = adopt_pending(state, lease)
        if adopted is not None:
            state = adopted
            # The adopted summary is this shift (unless it replaced an offline one
            # in place); a second one, made here on the chat path, only when the
            # context is still over a trigger.
            if state.through_id != base and not shift.due_after_adopting(state, config):
                return state.summary
        start = shift.split_in(state, config)
    if start is None:
        log_event(
            "summary_skipped", conversation_id=state.conversation_id, reason="split_cannot_move"
        )
        return state.summary
    over = state.context_tokens() >= config.CONTEXT_TOKEN_THRESHOLD
    if shift is not None and failure_blocks(state, _split_through(state, start) if over else None):
        log_event("summary_skipped", conversation_id=state.conversation_id, reason="backoff")
        return state.summary
    return _summarize_and_store(state, start, lease, config, deadline)


def cut_start(state: WindowState, message_id: int) -> int | None:
    """The index of the window row a cut before `message_id` keeps verbatim from: the
    split boundary at or before it (a turn's user message, or a step of the last turn),
    so no tool call is parted from its results; None when that is the window's first
    row or the message is not in the window."""
    index = next((i for i, row in enumerate(state.rows) if row.pk == message_id), None)
    if index is None:
        return None
    start = max((i for i in split_boundaries(state.rows) if i <= index), default=0)
    return start or None


def _split_through(state: WindowState, start: int) -> int | None:
    """The last message a split at `start` would summarize (None: nothing)."""
    newly_old, _ = split_parts(state, start)
    return newly_old[-1].pk if newly_old else None


def adopt_pending_summary(conversation_id: int, config: CompactionConfig | None = None) -> bool:
    """Take the pre-built summary now (the pre-call hook, when the cache is
    cold anyway); False when none fits or another process holds the lease."""
    with summary_lease(conversation_id) as lease:
        if lease is None:
            return False
        return adopt_pending(load_window(conversation_id, config), lease) is not None


def adopt_pending(state: WindowState, lease: Lease) -> WindowState | None:
    """Compare and swap: take the pre-built summary only if it was built on
    the split that is still current and makes the context smaller; or the
    model's summary replacing an offline one (`ConversationMetadata.offline_replacement`),
    of the same split or a later one, whatever its size. Returns the window
    it left (None: not adopted)."""
    columns = state.columns
    found = adoption(state)
    if found is None:
        return None
    if not adopts(state, found):
        write_state(lease.holding(), clear=PENDING_SUMMARY_KEYS)
        return None
    pending, through, anchor, kept, index, replaces = (
        found.summary, found.through, found.anchor, found.kept, found.index, found.replaces
    )  # fmt: skip
    usage = columns.get(MetadataKeys.PENDING_USAGE) or {}
    stored = _store_window(lease, pending, through, anchor, state, index, usage=usage)
    if stored is not None:
        record_compaction(
            state.conversation_id,
            CompactionEvent.Kind.WINDOW_SUMMARY,
            tokens_before=state.context_tokens(),  # the request's (docs/admin.rst)
            tokens_after=stored.context_tokens(),
            messages_affected=len(state.rows) - len(kept),
            duration_ms=0,  # built earlier by the worker: the chat did not wait
            summarizer_model=usage.get("model", ""),
            summarizer_input_tokens=usage.get("input_tokens", 0),
            summarizer_output_tokens=usage.get("output_tokens", 0),
            details={
                "through_message_id": through,
                "prebuilt": True,
                **({"replaces_offline": True} if replaces else {}),
                **{k: v for k, v in usage.items() if k.startswith("summarizer_cache_")},
                **undo_record(state),
            },
            summary=pending,
        )
    return stored


def _store_window(
    lease: Lease,
    summary: str,
    through: int,
    anchor: Message | None,
    state: WindowState,
    index: dict | None,
    offline: dict | None = None,
    usage: dict | None = None,
) -> WindowState | None:
    """Store a new split, its summary and the artifact index it renders, while
    the lease is still ours, and keep it as a version (its summarizer's `usage`:
    model, input_tokens, output_tokens). `offline`: the OFFLINE_SHIFT marker of a
    summary the offline summarizer wrote in a late or stalled holder's place.
    Returns the window it left, its size stored (None: the lease was lost)."""
    values = {
        MetadataKeys.COMPACTION_SUMMARY: summary,
        MetadataKeys.ARTIFACT_INDEX: index,
        MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: through,
        MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: state.rows[-1].pk,
    }
    remove = [*PENDING_SUMMARY_KEYS, MetadataKeys.SUMMARY_FAILURE]
    if offline is None:
        remove.append(MetadataKeys.OFFLINE_SHIFT)
    else:
        values[MetadataKeys.OFFLINE_SHIFT] = offline
    segment = state.segment
    if segment is not None and through > segment.after:
        # The new split reaches into the summarized segment: the window summary now
        # covers what it summarized, and its messages left after the split are verbatim.
        remove.append(MetadataKeys.SEGMENT_SUMMARY)
    if anchor is None:
        remove.append(MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID)
    else:
        values[MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID] = anchor.pk
    holding = lease.holding()
    if offline is None:
        stored = bool(write_state(holding, values, clear=remove))
    else:
        # A late holder's summary of this split that landed since the takeover stays
        # pending: it replaces the offline one (`keep_landed_summary`).
        landed = landed_on(state.through_id)
        stored = bool(write_state(holding.exclude(landed), values, clear=remove))
        kept = [key for key in remove if key not in PENDING_SUMMARY_KEYS]
        stored = stored or bool(write_state(holding.filter(landed), values, clear=kept))
    if not stored:
        return None
    usage = usage or {}
    record_version(
        state.conversation_id,
        summary,
        through,
        model=usage.get("model", ""),
        input_tokens=usage.get("input_tokens", 0),
        output_tokens=usage.get("output_tokens", 0),
    )
    return refreshed_window(state.conversation_id, state.config)


def _summarize_and_store(
    state: WindowState, start: int, lease: Lease, config: CompactionConfig, deadline: Deadline
) -> str | None:
    """The shift as one compaction: started before the summarizer is called, failed
    when the summary fails or would not make the context smaller, skipped when another
    holder's summary landed."""
    parts = split_parts(state, start)
    if not parts[0]:
        return state.summary
    kind = CompactionEvent.Kind.WINDOW_SUMMARY
    with compacting(state.conversation_id, kind, state.context_tokens()) as lifecycle:
        return _shift(state, (start, parts), lease, config, deadline, lifecycle)


def _shift(
    state: WindowState,
    where: tuple[int, tuple[list[Message], Message | None]],
    lease: Lease,
    config: CompactionConfig,
    deadline: Deadline,
    lifecycle: Lifecycle,
) -> str | None:
    start, (newly_old, anchor) = where
    kept = [anchor, *state.rows[start:]] if anchor else state.rows[start:]
    through = newly_old[-1].pk
    before = state.estimated_tokens()
    # The summary gives way to what stays verbatim: its room under the trigger.
    room = summary_room(state, config, kept)
    index = updated_index(state.meta.artifact_index, newly_old)
    # Taken over from a stalled or late holder, or freed by one only at the deadline: the
    # chat path does not wait on a provider again.
    late = not lease.took_over and deadline.passed()
    provider = llm.OfflineProvider() if lease.took_over or late else deadline.provider
    try:
        with stopwatch() as elapsed:
            outcome = _summarize_or_log(
                state.conversation_id,
                newly_old,
                state.summary,
                lease,
                room,
                index,
                provider,
                suffix_for(state, newly_old),
                config,
                deadline.at,
            )
    except LeaseLost as lost:
        # Taken over: not a failure of the summarizer, so no backoff is booked.
        keep_landed_summary(state, lost.outcome, through, anchor, index)
        return load_window(state.conversation_id, config).summary
    if outcome is None:
        record_failure(lease, state)
        lifecycle.fail("the summarizer gave no usable summary")
        return state.summary  # the cached summary stays exactly as it was
    after = context_after(state, outcome.text, kept)
    if after >= before:
        log_event("summary_discarded", conversation_id=state.conversation_id, reason="not_smaller")
        lifecycle.fail("the summary would not make the context smaller")
        record_failure(lease, state, through=through)
        return state.summary
    offline = _offline_shift(state, through, lease, late=late or outcome.fallback)
    usage = {
        "model": outcome.model,
        "input_tokens": outcome.input_tokens,
        "output_tokens": outcome.output_tokens,
    }
    stored = _store_window(lease, outcome.text, through, anchor, state, index, offline, usage)
    if stored is None:
        keep_landed_summary(state, outcome, through, anchor, index)
        return load_window(state.conversation_id, config).summary
    # The event reads the request's size before and after (docs/admin.rst, "Token figures").
    sizes = (state.context_tokens(), stored.context_tokens())
    _record_shift(state, lease, outcome, sizes, len(newly_old), through, elapsed.ms, late)
    return outcome.text


def _record_shift(
    state: WindowState,
    lease: Lease,
    outcome: SummaryOutcome,
    sizes: tuple[int, int],
    messages_affected: int,
    through: int,
    duration_ms: int,
    late: bool,
) -> None:
    """The window_summary event of a stored shift, with why the offline summarizer
    wrote it when it did (`_fallback_details`)."""
    record_compaction(
        state.conversation_id,
        CompactionEvent.Kind.WINDOW_SUMMARY,
        tokens_before=sizes[0],
        tokens_after=sizes[1],
        messages_affected=messages_affected,
        duration_ms=duration_ms,
        summarizer_model=outcome.model,
        summarizer_input_tokens=outcome.input_tokens,
        summarizer_output_tokens=outcome.output_tokens,
        details={
            "through_message_id": through,
            "calls": outcome.calls,
            "fallback": outcome.fallback or lease.took_over or late,
            **outcome.usage_details(),
            **_fallback_details(lease, outcome, late=late),
            **undo_record(state),
        },
        summary=outcome.text,
    )


def undo_record(state: WindowState) -> dict[str, Any]:
    """What a shift replaced, in its event's details: the window state the request
    was built from before it (`assistant.staff.undo_compaction` puts it back)."""
    return {
        "undo": {
            "summary": state.summary,
            "through": state.through_id,
            "anchor": state.anchor.pk if state.anchor is not None else None,
            "artifact_index": state.meta.artifact_index,
            "segment": state.segment.stored() if state.segment is not None else None,
        }
    }


def _offline_shift(state: WindowState, through: int, lease: Lease, *, late: bool) -> dict | None:
    """The OFFLINE_SHIFT marker of a shift the offline summarizer makes on the chat
    path (a late or stalled holder, the deadline, a failed summarizer; None: the
    summarizer made it): the model's summary of the same split is made off the
    chat path, from the late holder's when it lands (`awaits_holder`), else from
    the summary the shift started from."""
    if not (lease.took_over or late):
        return None
    return {
        "base": state.through_id,
        "through": through,
        "previous": state.summary,
        "awaits_holder": lease.took_over_from == "late",
    }


def _fallback_details(lease: Lease, outcome: SummaryOutcome, *, late: bool) -> dict:
    """Why the offline summarizer wrote this shift (`offline_fallback`), counted in
    the fallbacks metric when a holder is the reason (the registry counts a failed
    summarizer call). `late`: a holder released the lease only at the deadline."""
    if lease.took_over_from == "stalled":
        telemetry.offline_takeover("stalled")
        return {"took_over_stalled_lease": True, "offline_fallback": OfflineFallback.STALLED_HOLDER}
    if lease.took_over_from == "late":
        telemetry.offline_takeover("late")
        return {"took_over_late_lease": True, "offline_fallback": OfflineFallback.LATE_HOLDER}
    if late:
        telemetry.offline_takeover("late")
        return {"offline_fallback": OfflineFallback.LATE_HOLDER}
    if outcome.fallback:
        return {"offline_fallback": OfflineFallback.SUMMARIZER_FAILED}
    return {}


def _summarize_or_log(
    conversation_id: int,
    messages: Sequence[Message],
    previous: str | None,
    lease: Lease,
    room: int,
    index: dict,
    provider: llm.Provider | None = None,
    suffix: Suffix | None = None,
    config: CompactionConfig | None = None,
    deadline: float | None = None,
) -> SummaryOutcome | None:
    """The summary, or None (logged) when it failed; LeaseLost passes (taken over)."""
    try:
        return summarize_messages(
            messages,
            previous_summary=previous,
            on_chunk=lease.renew,
            max_tokens=room,
            provider=provider,
            index=index,
            suffix=suffix,
            config=config,
            deadline=deadline,
        )
    except LeaseLost:
        raise
    except Exception as exc:  # a failed summary never breaks the chat or the history
        logger.warning(
            "summary_failed conversation=%s error=%s", conversation_id, type(exc).__name__
        )
        return None
