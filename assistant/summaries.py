"""Strategy 2: the sliding window and its cached summary.

The summary of everything up to a split point is cached in the
conversation's metadata with the id of the last summarized message. It is
regenerated only when the split moves, and then incrementally: the
summarizer reads the previous summary plus the newly old messages only.
Identifiers from the summarized messages are carried forward
deterministically, so a lossy summarizer cannot erode them update by update.

One generation per conversation at a time: a lease on the conversation row
(assistant.leases), the LLM called with no transaction open, the result
written only while the lease is still ours.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from assistant import llm
from assistant.conf import CompactionConfig, compaction_config
from assistant.events import record_compaction, stopwatch
from assistant.leases import claim_summary_lease, holding, release_summary_lease, wait_for_lease
from assistant.llm.prompts import render_transcript
from assistant.logs import log_event
from assistant.metadata import merge_metadata, read_metadata
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.salience import key_identifiers
from assistant.tokens import estimate_tokens
from assistant.window import (
    WindowState,
    anticipated_keep,
    choose_split,
    load_window,
    should_shift,
)

logger = logging.getLogger(__name__)

CARRIED_HEADING = "## Identifiers carried forward"
PENDING_KEYS = (
    MetadataKeys.PENDING_SUMMARY,
    MetadataKeys.PENDING_THROUGH_MESSAGE_ID,
    MetadataKeys.PENDING_BASE_MESSAGE_ID,
    MetadataKeys.PENDING_USAGE,
)


@dataclass(frozen=True)
class SummaryOutcome:
    text: str
    model: str
    input_tokens: int
    output_tokens: int
    fallback: bool
    calls: int


def as_neutral(message: Message) -> dict:
    """A message as the model sees it, in the neutral format of assistant.llm."""
    content = getattr(message, "model_content", None)
    if content is None:  # not loaded through model_view()
        content = message.compacted_content
    if content is None:
        content = message.content
    neutral: dict = {"role": message.role, "content": content}
    if message.tool_calls:
        neutral["tool_calls"] = message.tool_calls
    if message.role == Message.Role.TOOL:
        neutral["tool_call_id"] = message.tool_call_id
        neutral["tool_name"] = message.tool_name
    return neutral


def summarize_messages(
    messages: Sequence[Message], *, previous_summary: str | None = None
) -> SummaryOutcome:
    """Summarize `messages` (merging into `previous_summary`), in chunks the
    summarizer can take. No database writes; raises if the provider fails
    and no fallback is configured."""
    config = compaction_config()
    body = _body(previous_summary) if previous_summary else None
    model, fallback, calls, tokens_in, tokens_out = "", False, 0, 0, 0
    for chunk in _chunks(messages, config, previous_summary):
        result = llm.summarize(render_transcript(chunk), previous_summary=body)
        body = _body(result.text)
        model, fallback = result.model, fallback or result.fallback
        calls += 1
        tokens_in += result.usage.prompt_tokens
        tokens_out += result.usage.output_tokens
    text = body or ""
    carried = _carried_identifiers(previous_summary, messages, text, config)
    if carried:
        text = f"{text}\n\n{CARRIED_HEADING}\n" + "; ".join(carried)
    return SummaryOutcome(text, model, tokens_in, tokens_out, fallback, calls)


def ensure_context_summary(conversation: Conversation) -> str | None:
    """The pre-exchange hook: shift the window if the context reached a
    trigger (using a pre-built summary when one is ready) and return the
    summary the next request carries."""
    config = compaction_config()
    state = load_window(conversation.pk)
    if state.metadata.get(MetadataKeys.NEEDS_EMERGENCY_COMPACTION):
        from assistant.emergency import compact_if_flagged

        compact_if_flagged(conversation)
        state = load_window(conversation.pk)
    if not should_shift(state, config):
        return state.summary
    return _shift(conversation.pk, config)


def compaction_cutoff_id(conversation: Conversation) -> int | None:
    """The id of the last summarized message, read from the database."""
    value = read_metadata(conversation.pk).get(MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID)
    return int(value) if value is not None else None


def regenerate_window_summary(
    conversation: Conversation,
    *,
    recent_fraction: float | None = None,
    keep_last: int | None = None,
) -> bool:
    """Shift the window now, whatever the triggers say, keeping
    `recent_fraction` of the window (or the last `keep_last` messages,
    extended back to the start of their user turn). True if it stored one."""
    before = compaction_cutoff_id(conversation)
    _shift(
        conversation.pk,
        compaction_config(),
        force=True,
        recent_fraction=recent_fraction,
        keep_last=keep_last,
    )
    return compaction_cutoff_id(conversation) != before


def prebuild_window_summary(conversation: Conversation) -> bool:
    """Run by the post-exchange task: past the soft watermark, build the
    summary the next shift will need and keep it as pending, so the chat
    path adopts it instead of waiting on the summarizer."""
    config = compaction_config()
    state = load_window(conversation.pk)
    if not should_shift(state, config, share=config.SOFT_WATERMARK):
        return False
    if state.metadata.get(MetadataKeys.PENDING_SUMMARY) and (
        state.metadata.get(MetadataKeys.PENDING_BASE_MESSAGE_ID) == state.through_id
    ):
        return False  # one is ready for the current split: building another wastes a call
    start = choose_split(state.rows, config, keep_last=anticipated_keep(state, config))
    if start is None:
        return False
    through = state.rows[start - 1].pk
    token = claim_summary_lease(conversation.pk)
    if token is None:
        return False  # someone is summarizing this conversation right now
    try:
        fresh = load_window(conversation.pk)
        if fresh.through_id != state.through_id:
            return False  # the window shifted meanwhile; the next exchange re-evaluates
        try:
            outcome = summarize_messages(state.rows[:start], previous_summary=state.summary)
        except llm.ProviderError as exc:
            if exc.retryable:
                raise  # off the chat path: the post-exchange task retries with backoff
            logger.warning(
                "summary_failed conversation=%s error=%s", conversation.pk, type(exc).__name__
            )
            return False
        stored = merge_metadata(
            holding(conversation.pk, token),
            {
                MetadataKeys.PENDING_SUMMARY: outcome.text,
                MetadataKeys.PENDING_THROUGH_MESSAGE_ID: through,
                MetadataKeys.PENDING_BASE_MESSAGE_ID: state.through_id,
                MetadataKeys.PENDING_USAGE: {
                    "model": outcome.model,
                    "input_tokens": outcome.input_tokens,
                    "output_tokens": outcome.output_tokens,
                },
            },
        )
        if stored:
            log_event("summary_prebuilt", conversation_id=conversation.pk, through=through)
        return bool(stored)
    finally:
        release_summary_lease(conversation.pk, token)


def _shift(
    conversation_id: int,
    config: CompactionConfig,
    *,
    force: bool = False,
    recent_fraction: float | None = None,
    keep_last: int | None = None,
) -> str | None:
    token = claim_summary_lease(conversation_id)
    if token is None:
        # Another process is summarizing this conversation: use its result,
        # never summarize the same split a second time.
        wait_for_lease(conversation_id)
        return load_window(conversation_id).summary
    try:
        state = load_window(conversation_id)  # re-read under the lease
        if not force and not should_shift(state, config):
            return state.summary
        if not force and _adopt_pending(state, token):
            state = load_window(conversation_id)
            if not should_shift(state, config):
                return state.summary
        start = choose_split(
            state.rows, config, recent_fraction=recent_fraction, keep_last=keep_last
        )
        if start is None:
            log_event(
                "summary_skipped", conversation_id=conversation_id, reason="split_cannot_move"
            )
            return state.summary
        return _summarize_and_store(state, start, token)
    finally:
        release_summary_lease(conversation_id, token)


def _adopt_pending(state: WindowState, token) -> bool:
    """Compare and swap: take the pre-built summary only if it was built on
    the split that is still current."""
    metadata = state.metadata
    pending = metadata.get(MetadataKeys.PENDING_SUMMARY)
    through = metadata.get(MetadataKeys.PENDING_THROUGH_MESSAGE_ID)
    if not pending or metadata.get(MetadataKeys.PENDING_BASE_MESSAGE_ID) != state.through_id:
        return False
    if through not in {row.pk for row in state.rows}:
        return False
    before = state.context_tokens()
    stored = merge_metadata(
        holding(state.conversation_id, token),
        {
            MetadataKeys.COMPACTION_SUMMARY: pending,
            MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: through,
            MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: state.rows[-1].pk,
        },
        remove=PENDING_KEYS,
    )
    if stored:
        kept = [row for row in state.rows if row.pk > through]
        usage = metadata.get(MetadataKeys.PENDING_USAGE) or {}
        record_compaction(
            state.conversation_id,
            CompactionEvent.Kind.WINDOW_SUMMARY,
            tokens_before=before,
            tokens_after=_context_after(state, pending, kept),
            messages_affected=len(state.rows) - len(kept),
            duration_ms=0,  # built earlier by the worker: the chat did not wait
            summarizer_model=usage.get("model", ""),
            summarizer_input_tokens=usage.get("input_tokens", 0),
            summarizer_output_tokens=usage.get("output_tokens", 0),
            details={"through_message_id": through, "prebuilt": True},
        )
    return bool(stored)


def _summarize_and_store(state: WindowState, start: int, token) -> str | None:
    newly_old, kept = state.rows[:start], state.rows[start:]
    through = newly_old[-1].pk
    before = state.context_tokens()
    with stopwatch() as elapsed:
        outcome = _summarize_or_log(state.conversation_id, newly_old, state.summary)
    if outcome is None:
        return state.summary  # the cached summary stays exactly as it was
    stored = merge_metadata(
        holding(state.conversation_id, token),
        {
            MetadataKeys.COMPACTION_SUMMARY: outcome.text,
            MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: through,
            MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: state.rows[-1].pk,
        },
        remove=PENDING_KEYS,
    )
    if not stored:
        log_event("summary_discarded", conversation_id=state.conversation_id, reason="lease_lost")
        return load_window(state.conversation_id).summary
    record_compaction(
        state.conversation_id,
        CompactionEvent.Kind.WINDOW_SUMMARY,
        tokens_before=before,
        tokens_after=_context_after(state, outcome.text, kept),
        messages_affected=len(newly_old),
        duration_ms=elapsed.ms,
        summarizer_model=outcome.model,
        summarizer_input_tokens=outcome.input_tokens,
        summarizer_output_tokens=outcome.output_tokens,
        details={
            "through_message_id": through,
            "calls": outcome.calls,
            "fallback": outcome.fallback,
        },
    )
    return outcome.text


def _summarize_or_log(
    conversation_id: int, messages: Sequence[Message], previous: str | None
) -> SummaryOutcome | None:
    try:
        return summarize_messages(messages, previous_summary=previous)
    except Exception as exc:  # a failed summary never breaks the chat or the history
        logger.warning(
            "summary_failed conversation=%s error=%s", conversation_id, type(exc).__name__
        )
        return None


def _context_after(state: WindowState, summary: str, kept: Sequence[Message]) -> int:
    return (
        estimate_tokens(state.system_prompt)
        + estimate_tokens(state.parent_summary or "")
        + estimate_tokens(summary)
        + sum(row.token_estimate for row in kept)
    )


def _body(summary: str) -> str:
    return summary.split(f"\n{CARRIED_HEADING}", 1)[0].rstrip()


def _carried(summary: str | None) -> list[str]:
    if not summary or CARRIED_HEADING not in summary:
        return []
    tail = summary.split(CARRIED_HEADING, 1)[1]
    return [item.strip() for item in tail.split(";") if item.strip()]


def _carried_identifiers(
    previous: str | None, messages: Sequence[Message], body: str, config: CompactionConfig
) -> list[str]:
    """Every key identifier seen so far stays either in the summary's body or
    in the carried list: those of the newly summarized messages (newest
    first), those the previous body held and this one dropped, and those
    carried before, within a size cap that drops the oldest first."""
    ranked: list[str] = []
    for message in reversed(messages):
        # From tool output only sentences with specific identifiers: fifty
        # table rows of dates must not push out the one order number.
        minimum = 2 if message.role == Message.Role.TOOL else 1
        ranked.extend(key_identifiers(as_neutral(message)["content"], minimum=minimum))
    ranked.extend(key_identifiers(_body(previous) if previous else "", minimum=1))
    ranked.extend(_carried(previous))
    kept, seen, size = [], set(), 0
    for item in ranked:
        if item in seen or item in body or len(item) > 200:
            continue
        if size + len(item) + 2 > config.CARRIED_IDENTIFIERS_MAX_CHARS:
            break
        seen.add(item)
        kept.append(item)
        size += len(item) + 2
    return kept


def _chunks(
    messages: Sequence[Message], config: CompactionConfig, previous: str | None
) -> list[list[dict]]:
    """Cut the slice into pieces the summarizer can take with the running
    summary beside them; a single oversized message is cut to fit."""
    budget = min(config.SUMMARIZER_MAX_INPUT_TOKENS, llm.get_provider().max_input_tokens)
    budget = max(budget - estimate_tokens(previous or "") - 1000, 1000)
    max_chars = budget * config.CHARS_PER_TOKEN
    chunks: list[list[dict]] = [[]]
    used = 0
    for message in messages:
        neutral = as_neutral(message)
        if len(neutral["content"]) > max_chars:
            neutral["content"] = neutral["content"][:max_chars] + " [cut for the summarizer]"
        cost = estimate_tokens(neutral["content"]) + 20
        if chunks[-1] and used + cost > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(neutral)
        used += cost
    return [chunk for chunk in chunks if chunk]
