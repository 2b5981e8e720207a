"""The summary built ahead on the worker: kept as pending, for the chat path
to adopt (assistant.strategies.shift) instead of waiting on the summarizer.
When to ask for it is the flow's (assistant.flows.prebuild)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from assistant import llm
from assistant.models import Conversation, Message, MetadataKeys
from assistant.ops.logs import log_event
from assistant.settings.conf import compaction_config
from assistant.store.leases import Lease, summary_lease
from assistant.store.metadata import merge_metadata
from assistant.strategies.shift import failure_blocks, record_failure
from assistant.strategies.summary import (
    LeaseLost,
    SummaryOutcome,
    suffix_for,
    summarize_messages,
    summary_room,
)
from assistant.text.artifacts import updated_index
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
    decision says (`assistant.window.decision.worker_split`)."""
    config = compaction_config()
    state = load_window(conversation.pk, config)
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
        if load_window(conversation.pk, config).through_id != state.through_id:
            return False  # the window shifted meanwhile; the next exchange re-evaluates
        index = updated_index(state.metadata.get(MetadataKeys.ARTIFACT_INDEX), newly_old)
        kept = [anchor, *state.rows[start:]] if anchor else state.rows[start:]
        outcome = _summarize(state, lease, newly_old, kept, index, provider)
        if outcome is None:
            return False
        pending = _pending(outcome, state, through, anchor, index)
        stored = merge_metadata(lease.holding(), pending)
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
    """The summary of `newly_old`, or None (the lease lost, or a provider
    failure that retrying will not fix, recorded for the back-off)."""
    config = state.config
    try:
        return summarize_messages(
            newly_old,
            previous_summary=state.summary,
            on_chunk=lease.renew,
            max_tokens=summary_room(state, config, kept),
            index=index,
            suffix=suffix_for(state, newly_old),
            config=config,
            provider=provider,
        )
    except LeaseLost:
        log_event("summary_discarded", conversation_id=state.conversation_id, reason="lease_lost")
        return None
    except llm.ProviderError as exc:
        if exc.retryable:
            raise  # off the chat path: the post-exchange task retries with backoff
        logger.warning(
            "summary_failed conversation=%s error=%s", state.conversation_id, type(exc).__name__
        )
        record_failure(lease, state)
        return None


def _pending(
    outcome: SummaryOutcome,
    state: WindowState,
    through: int,
    anchor: Message | None,
    index: dict,
) -> dict[str, Any]:
    """The metadata of a pending summary: what adopting it needs."""
    return {
        MetadataKeys.PENDING_SUMMARY: outcome.text,
        MetadataKeys.PENDING_THROUGH_MESSAGE_ID: through,
        MetadataKeys.PENDING_BASE_MESSAGE_ID: state.through_id,
        MetadataKeys.PENDING_ANCHOR_MESSAGE_ID: anchor.pk if anchor else None,
        MetadataKeys.PENDING_ARTIFACT_INDEX: index,
        MetadataKeys.PENDING_USAGE: {
            "model": outcome.model,
            "input_tokens": outcome.input_tokens,
            "output_tokens": outcome.output_tokens,
            **outcome.usage_details(),
        },
    }
