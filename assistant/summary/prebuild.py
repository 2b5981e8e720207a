"""The summary built ahead on the worker: kept as pending, for the chat path
to adopt (assistant.summary.shift) instead of waiting on the summarizer.
When to ask for it is the flow's (assistant.summary.worker)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from assistant import providers as llm
from assistant.history import fresh_state, write_state
from assistant.models import Conversation, Message
from assistant.ops.logs import log_event
from assistant.recall import updated_index
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.summary.backoff import failure_blocks, record_failure
from assistant.summary.generate import (
    LeaseLost,
    SummaryOutcome,
    suffix_for,
    summarize_messages,
    summary_room,
)
from assistant.summary.leases import Lease, summary_lease
from assistant.summary.pending import keep_landed_summary, model_summary, pending_values
from assistant.window import (
    WindowState,
    load_window,
    split_parts,
    worker_split,
)

logger = logging.getLogger(__name__)


def prebuild_window_summary(conversation: Conversation, *, requested: bool = False) -> bool:
    """Build the summary the next shift will need and keep it as pending, so
    the chat path adopts it instead of waiting on the summarizer. Run by the
    post-exchange task past the soft watermark (the split a shift at the
    trigger will take, projected), or at the pre-call hook's request inside
    a turn (`requested`: the split the hook would take now, from what the
    window holds when the worker gets to it): where, and whether at all, the
    projection says (`assistant.window.projection.worker_split`)."""
    config = compaction_config()
    state = load_window(conversation.pk, config)
    if state.meta.offline_shift and state.meta.offline_replacement is None:
        return build_offline_replacement(state, config)
    if state.meta.has_pending_summary:
        return False  # one is ready for the current split: building another wastes a call
    start = worker_split(state, config, requested=requested)
    if start is None:
        return False
    newly_old, anchor = split_parts(state, start)
    if not newly_old or failure_blocks(state):
        return False
    through = newly_old[-1].pk
    provider = llm.get_provider()  # its SDK imported before the lease, not inside it
    with summary_lease(conversation.pk) as lease:
        if lease is None:
            return False  # someone is summarizing this conversation right now
        if fresh_state(conversation.pk).through_id != state.through_id:
            return False  # the window shifted meanwhile; the next exchange re-evaluates
        index = updated_index(state.meta.artifact_index, newly_old)
        kept = [anchor, *state.rows[start:]] if anchor else state.rows[start:]
        try:
            outcome = _summarize(state, lease, newly_old, kept, index, provider)
        except LeaseLost as lost:
            return keep_landed_summary(state, lost.outcome, through, anchor, index)
        if outcome is None:
            return False
        pending = pending_values(outcome, state.through_id, through, anchor, index)
        stored = write_state(lease.holding(), pending)
    if stored:
        log_event("summary_prebuilt", conversation_id=conversation.pk, through=through)
    return bool(stored)


def _summarize(
    state: WindowState,
    lease: Lease,
    newly_old: Sequence[Message],
    kept: Sequence[Message],
    index: dict,
    provider: llm.Provider,
) -> SummaryOutcome | None:
    """The summary of `newly_old`, or None (a provider failure that retrying
    will not fix, recorded for the back-off); LeaseLost passes (the caller
    keeps a landed summary)."""
    config = state.config
    try:
        return summarize_messages(
            newly_old,
            previous_summary=model_summary(state),
            on_chunk=lease.renew,
            max_tokens=summary_room(state, config, kept),
            index=index,
            suffix=suffix_for(state, newly_old),
            config=config,
            provider=provider,
        )
    except llm.ProviderError as exc:
        if exc.retryable:
            raise  # off the chat path: the post-exchange task retries with backoff
        logger.warning(
            "summary_failed conversation=%s error=%s", state.conversation_id, type(exc).__name__
        )
        record_failure(lease, state)
        return None


def build_offline_replacement(state: WindowState, config: CompactionConfig) -> bool:
    """The model's summary of the split the offline summarizer wrote
    (OFFLINE_SHIFT), made off the chat path and kept as pending until the next
    prefix rewrite adopts it: the late holder's landed summary extended with
    the messages after it, else the summary the shift started from with the
    messages it summarized. Waits for a late holder still summarizing."""
    conversation_id = state.conversation_id
    offline = state.meta.offline_shift
    through, base = offline["through"], offline.get("base")
    pending = state.meta.pending
    previous: str | None
    if pending is not None and pending.base_id == base and (pending.through_id or 0) < through:
        start, previous = pending.through_id, pending.text
    elif offline.get("awaits_holder"):
        return False  # the holder's summary, when it lands, is where this starts
    else:
        start, previous = base, offline.get("previous")
    since = load_window(conversation_id, config, through_id=start or 0).rows
    newly_old = [row for row in since if row.pk <= through and row.pk != state.meta.anchor_id]
    if not newly_old:
        return False
    kept = [state.anchor, *state.rows] if state.anchor else state.rows
    index = state.meta.artifact_index  # the offline split's: this summary is of the same split
    provider = llm.get_provider()  # its SDK imported before the lease, not inside it
    with summary_lease(state.conversation_id) as lease:
        if lease is None:
            return False
        if fresh_state(state.conversation_id).offline_shift != offline:
            return False  # adopted, or the window shifted again meanwhile
        try:
            outcome = summarize_messages(
                newly_old,
                previous_summary=previous,
                on_chunk=lease.renew,
                max_tokens=summary_room(state, config, kept),
                index=index,
                config=config,
                provider=provider,
            )
        except LeaseLost:
            log_event("summary_discarded", conversation_id=conversation_id, reason="lease_lost")
            return False
        values = pending_values(outcome, base, through, state.meta.anchor_id, index)
        stored = write_state(lease.holding(), values)
    if stored:
        log_event("summary_replacement_built", conversation_id=conversation_id, through=through)
    return bool(stored)
