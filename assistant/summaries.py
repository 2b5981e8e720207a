"""Strategy 2: the sliding window and its cached summary.

The summary of everything up to a split point is cached in the
conversation's metadata with the id of the last summarized message. It is
regenerated only when the split moves, and then incrementally: the
summarizer reads the previous summary plus the newly old messages only.
Fact statements of the summarized messages are carried forward
deterministically (assistant.facts), so a lossy summarizer cannot erode them
update by update.

One generation per conversation at a time: a lease on the conversation row
(assistant.leases), the LLM called with no transaction open, the result
written only while the lease is still ours.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q

from assistant import llm, telemetry
from assistant.artifacts import render, updated_index, without_index
from assistant.conf import CompactionConfig, compaction_config
from assistant.context import Context, IncompleteToolCall, as_neutral, context_from_state
from assistant.events import record_compaction, stopwatch
from assistant.facts import summary_body, with_carried_facts, with_facts_within, without_markers
from assistant.leases import Lease, summary_lease, wait_for_release
from assistant.llm.convert import InvalidRequest
from assistant.llm.prompts import describe_message, render_transcript, suffix_instruction
from assistant.logs import log_event
from assistant.metadata import merge_metadata, read_metadata
from assistant.models import (
    PENDING_SUMMARY_KEYS,
    CompactionEvent,
    Conversation,
    Message,
    MetadataKeys,
    OfflineFallback,
)
from assistant.queue import PREBUILD_TASK, enqueue_on_commit
from assistant.tokens import estimate_tokens
from assistant.truncation import KEEP_VERBATIM, truncate_tool_result
from assistant.window import (
    TOKEN_RATIO_DRIFT,
    Shift,
    WindowState,
    choose_split,
    load_window,
    refresh_size,
    split_parts,
    trigger_estimate,
    verbatim_budget,
    worker_split,
)

logger = logging.getLogger(__name__)

# Room a summarizer call keeps beside the slice and the running summary (the
# instruction and the answer's start), and the least a chunk may hold.
CHUNK_RESERVE_TOKENS = 1000
# What one message's framing ("[tool read_file]", the role) adds to its text.
MESSAGE_FRAME_TOKENS = 20


@dataclass(frozen=True)
class SummaryOutcome:
    text: str
    model: str
    input_tokens: int  # the whole prompt, cached parts included
    output_tokens: int
    fallback: bool
    calls: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def usage_details(self) -> dict[str, int]:
        """The cached part of the summarizer's input, for the event's details (cost.py
        prices it at the cache prices)."""
        if not (self.cache_read_tokens or self.cache_write_tokens):
            return {}
        return {
            "summarizer_cache_read_tokens": self.cache_read_tokens,
            "summarizer_cache_write_tokens": self.cache_write_tokens,
        }


@dataclass(frozen=True)
class Suffix:
    """What a "cached_suffix" summary request is made of: the context the
    conversation's next request would send (its last one, plus what came since) and
    the first message after the summarized part that stays verbatim."""

    context: Context
    first_kept: Message | None
    tools: list[dict] | None = None


def suffix_for(state: WindowState, newly_old: Sequence[Message]) -> Suffix | None:
    """The cached-suffix request of a shift summarizing `newly_old`, or None when the
    transcript path applies (the setting, or a turn whose tool calls are unanswered)."""
    if state.config.SUMMARY_REQUEST != "cached_suffix" or not newly_old:
        return None
    try:
        context = context_from_state(state)
    except IncompleteToolCall:
        return None
    last = newly_old[-1].pk
    first_kept = next((row for row in state.rows if row.pk > last), None)
    tools = state.metadata.get(MetadataKeys.CHAT_TOOLS)  # JSON text: see chat.remember_chat_tools
    return Suffix(context, first_kept, json.loads(tools) if tools else None)


def summarize_messages(
    messages: Sequence[Message],
    *,
    previous_summary: str | None = None,
    on_chunk: Callable[[], object] | None = None,
    max_tokens: int | None = None,
    provider: llm.Provider | None = None,
    index: dict | None = None,
    suffix: Suffix | None = None,
    config: CompactionConfig | None = None,
    deadline: float | None = None,
) -> SummaryOutcome:
    """Summarize `messages` (merging into `previous_summary`), in chunks the
    summarizer can take. The artifact `index` (assistant.artifacts, rendered
    at the end) and the carried facts share what `max_tokens` (the room for
    the whole summary, in the window's estimates) leaves beside the
    summarizer's text (`shares`). `on_chunk` is called as the work advances
    (before and after each summarizer call, e.g. to renew the summary lease);
    when it returns False (the lease was lost) the work stops with LeaseLost.
    No database writes; raises if the provider fails and no fallback is
    configured. `provider`: the configured one unless given. `suffix`: ask the
    chat model with the conversation's own cached request instead ("cached_suffix",
    one call), when the provider has a prompt cache to read. `config`: the
    caller's settings (read here when it has none). `deadline`: the monotonic
    time past which no call goes to `provider` (the chat path's; the offline
    summarizer answers the rest)."""
    config = config or compaction_config()
    previous_summary = without_index(previous_summary)
    # Only a provider given explicitly is passed on: llm.summarize picks the configured one.
    chosen: dict[str, Any] = {"provider": provider} if provider is not None else {}
    provider = provider or llm.get_provider()
    # The summarizer reads the previous summary whole, carried facts included: it can
    # merge them back into its text, and they are carried again only if it does not.
    body = previous_summary or None
    model, fallback, calls, tokens_in, tokens_out = "", False, 0, 0, 0
    cache_read = cache_write = 0
    chunks = _chunks(messages, config, previous_summary, provider)
    request = _cached_request(suffix, messages, chunks, body, provider)
    lost = False  # the lease, after the last call answered: the summary is still made
    if request is not None:
        _progress(on_chunk)
        result = llm.summarize_cached(request, provider=provider)
        lost = not _alive(on_chunk)
        chunks = []
        body = without_markers(summary_body(result.text))
        model, fallback, calls = result.model, result.fallback, 1
        tokens_in, tokens_out = result.usage.prompt_tokens, result.usage.output_tokens
        cache_read, cache_write = result.usage.cache_read_tokens, result.usage.cache_write_tokens
    for number, chunk in enumerate(chunks, 1):
        _progress(on_chunk)
        transcript = without_markers(render_transcript(chunk))
        late = deadline is not None and time.monotonic() >= deadline
        if late:
            chosen = {"provider": llm.OfflineProvider()}
        result = llm.summarize(transcript, previous_summary=body, **chosen)
        lost = not _alive(on_chunk)
        if lost and number < len(chunks):
            raise LeaseLost()
        body = without_markers(summary_body(result.text))
        model, fallback = result.model, fallback or result.fallback or late
        calls += 1
        tokens_in += result.usage.prompt_tokens
        tokens_out += result.usage.output_tokens
    index_tokens, rest = shares(body or "", max_tokens, config)
    index_text = render(index, index_tokens)
    text = with_carried_facts(
        body or "",
        [as_neutral(message) for message in messages],
        previous_summary,
        min(config.CARRIED_FACTS_MAX_TOKENS, rest - used(index_text)),
    )
    outcome = SummaryOutcome(
        with_index(text, index_text),
        model,
        tokens_in,
        tokens_out,
        fallback,
        calls,
        cache_read,
        cache_write,
    )
    if lost:
        raise LeaseLost(outcome)
    return outcome


def _cached_request(
    suffix: Suffix | None,
    messages: Sequence[Message],
    chunks: list[list[dict]],
    previous: str | None,
    provider: llm.Provider,
) -> llm.CachedRequest | None:
    """The cached-suffix request, or None for the transcript path: no suffix asked, a
    provider with no prompt cache (offline: no key), or a context the chat model could
    not take with the instruction."""
    if suffix is None or not provider.reads_prompt_cache or not messages:
        return None
    context = suffix.context
    if context.tokens.total + SUFFIX_ROOM_TOKENS > provider.max_input_tokens:
        return None
    first_kept = as_neutral(suffix.first_kept) if suffix.first_kept is not None else None
    request = llm.CachedRequest(
        system=context.system,
        summaries=context.summaries,
        messages=context.messages,
        instruction=suffix_instruction(
            describe_message(as_neutral(messages[0])),
            describe_message(first_kept) if first_kept else None,
            bool(context.window_summary),
        ),
        # The same information for a summarizer without a cache (the offline fallback).
        transcript="\n".join(without_markers(render_transcript(chunk)) for chunk in chunks),
        previous_summary=previous,
        tools=list(suffix.tools or ()),
    )
    try:  # the request's own check: never sent malformed
        request.body(provider.name)
    except InvalidRequest:
        return None
    return request


# Room for the instruction and the summary beside the context, in tokens.
SUFFIX_ROOM_TOKENS = 4000


def shares(body: str, max_tokens: int | None, config: CompactionConfig) -> tuple[int, int]:
    """(the index's budget, what the index and the carried facts share): what
    the summarizer's `body` leaves of `max_tokens` (None: no bound but the
    settings'), the index taking at most half of it and the carried facts
    what the index leaves, each within its own setting."""
    if max_tokens is None:
        return config.ARTIFACT_INDEX_MAX_TOKENS, config.CARRIED_FACTS_MAX_TOKENS
    rest = max(0, max_tokens - used(body) - 1)  # the blank line before the index
    return min(config.ARTIFACT_INDEX_MAX_TOKENS, rest // 2), rest


def with_index(text: str, index_text: str) -> str:
    if not index_text:
        return text
    return f"{text}\n\n{index_text}" if text else index_text


def bounded_summary(
    summary: str, index: dict | None, max_tokens: int, config: CompactionConfig
) -> str:
    """A pre-built `summary` within `max_tokens`, the room the window left it
    when it is adopted (more steps may have come since it was built): its
    index rendered again and its carried facts cut, the newest kept, within
    what its summarizer's text leaves (`shares`)."""
    if used(summary) <= max_tokens:
        return summary
    text = without_index(summary) or ""
    index_tokens, rest = shares(summary_body(text), max_tokens, config)
    index_text = render(index, index_tokens)
    facts = min(config.CARRIED_FACTS_MAX_TOKENS, rest - used(index_text))
    return with_index(with_facts_within(text, facts), index_text)


def used(text: str) -> int:
    return estimate_tokens(text) if text else 0


def summary_room(state: WindowState, config: CompactionConfig, kept: Sequence[Message]) -> int:
    """The room a new summary has under the trigger (in the window's
    estimates) beside the system part, the parent summary and `kept`: sized
    for the ratio the provider may reach before the stored one is renewed,
    so that the index and the carried facts it holds never put the next
    requests over the trigger."""
    trigger = trigger_estimate(state, config, drift=TOKEN_RATIO_DRIFT)
    return trigger - _context_after(state, "", kept)


class LeaseLost(RuntimeError):
    """The summary lease was taken over while this process summarized: its
    result cannot be stored as the window's, so the work stops. `outcome`: the
    summary, when the last summarizer call had already answered (the holder
    keeps it as pending: `keep_landed_summary`)."""

    def __init__(self, outcome: SummaryOutcome | None = None) -> None:
        super().__init__("the summary lease was lost while summarizing")
        self.outcome = outcome


def _progress(on_progress: Callable[[], object] | None) -> None:
    if not _alive(on_progress):
        raise LeaseLost()


def _alive(on_progress: Callable[[], object] | None) -> bool:
    return on_progress is None or on_progress() is not False


def compaction_cutoff_id(conversation: Conversation) -> int | None:
    """The id of the last summarized message, read from the database."""
    value = read_metadata(conversation.pk).get(MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID)
    return int(value) if value is not None else None


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
        compaction_config(),
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
    does not need to fit (not `Shift.needed`) skips instead when the lease is held."""
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
    **split,
):
    if lease.took_over:
        log_event(
            "summary_lease_taken_over",
            conversation_id=lease.conversation_id,
            holder=lease.took_over_from,
        )
    state = load_window(lease.conversation_id, config)  # re-read under the lease
    if shift is None:
        start = choose_split(state.rows, config, budget=verbatim_budget(state, config), **split)
    else:
        if not shift.still_due(state, config):
            return state.summary  # another process shifted it meanwhile
        split = state.through_id
        if adopt_pending(state, lease):
            state = load_window(lease.conversation_id, config)
            # The adopted summary is this shift (unless it replaced an offline one
            # in place); a second one, made here on the chat path, only when the
            # context is still over a trigger.
            if state.through_id != split and not shift.due_after_adopting(state, config):
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


def _split_through(state: WindowState, start: int) -> int | None:
    """The last message a split at `start` would summarize (None: nothing)."""
    newly_old, _ = split_parts(state, start)
    return newly_old[-1].pk if newly_old else None


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
    if state.meta.offline_shift and state.meta.offline_replacement is None:
        return build_offline_replacement(state, config)
    if state.meta.has_pending_summary:
        return False  # one is ready for the current split: building another wastes a call
    start = worker_split(state, config, requested=requested)
    if start is None:
        return False
    newly_old, anchor = split_parts(state, start)
    if not newly_old:
        return False
    if failure_blocks(state):
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
        try:
            outcome = summarize_messages(
                newly_old,
                previous_summary=_model_summary(state),
                on_chunk=lease.renew,
                max_tokens=summary_room(state, config, kept),
                index=index,
                suffix=suffix_for(state, newly_old),
                config=config,
                provider=provider,
            )
        except LeaseLost as lost:
            return keep_landed_summary(state, lost.outcome, through, anchor, index)
        except llm.ProviderError as exc:
            if exc.retryable:
                raise  # off the chat path: the post-exchange task retries with backoff
            logger.warning(
                "summary_failed conversation=%s error=%s", conversation.pk, type(exc).__name__
            )
            record_failure(lease, state)
            return False
        stored = merge_metadata(
            lease.holding(), _pending_values(outcome, state.through_id, through, anchor, index)
        )
    if stored:
        log_event("summary_prebuilt", conversation_id=conversation.pk, through=through)
    return bool(stored)


def _pending_values(
    outcome: SummaryOutcome,
    base: int | None,
    through: int,
    anchor: Message | int | None,
    index: dict | None,
) -> dict[str, Any]:
    """The metadata of a pending summary of `base`..`through`."""
    return {
        MetadataKeys.PENDING_SUMMARY: outcome.text,
        MetadataKeys.PENDING_THROUGH_MESSAGE_ID: through,
        MetadataKeys.PENDING_BASE_MESSAGE_ID: base,
        MetadataKeys.PENDING_ANCHOR_MESSAGE_ID: getattr(anchor, "pk", anchor),
        MetadataKeys.PENDING_ARTIFACT_INDEX: index,
        MetadataKeys.PENDING_USAGE: {
            "model": outcome.model,
            "input_tokens": outcome.input_tokens,
            "output_tokens": outcome.output_tokens,
            **outcome.usage_details(),
        },
    }


def _model_summary(state: WindowState) -> str | None:
    """The summary a new one is built on: the model's of the current split when it
    is ready to replace the offline one there (`WindowMeta.offline_replacement`)."""
    replacement = state.meta.offline_replacement
    if replacement is not None and replacement.through_id == state.through_id:
        return replacement.text
    return state.summary


def keep_landed_summary(
    state: WindowState,
    outcome: SummaryOutcome | None,
    through: int,
    anchor: Message | None,
    index: dict | None,
) -> bool:
    """A holder whose lease was taken over while its summarizer call ran keeps
    the summary that call returned as pending (built on `state`'s split), when
    the split has not moved since, or when the taker shifted with the offline
    summarizer from the same split: then the model's summary replaces the
    offline one at the next prefix rewrite (`adopt_pending`); when it stops
    short of the offline split, the worker extends it (`build_offline_replacement`).
    Discarded otherwise (a model's summary holds the window). Written without
    the lease, guarded by the split in the same UPDATE."""
    conversation_id = state.conversation_id
    base = state.through_id
    split = (
        Q(metadata__compaction_through_message_id=base)
        if base is not None
        else ~Q(metadata__has_key=MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID)
    )
    # An offline summary (the holder's own fallback) replaces nothing.
    kept = (
        outcome is not None
        and not outcome.fallback
        and merge_metadata(
            Conversation.objects.filter(
                split | Q(metadata__offline_shift__base=base), pk=conversation_id
            ),
            _pending_values(outcome, base, through, anchor, index),
        )
    )
    if not kept:
        log_event("summary_discarded", conversation_id=conversation_id, reason="lease_lost")
        return False
    log_event("summary_kept", conversation_id=conversation_id, reason="lease_lost", through=through)
    ask_for_replacement(conversation_id)
    return True


def ask_for_replacement(conversation_id: int) -> None:
    """Ask the worker for the model's summary of an offline split
    (`build_offline_replacement`) when it has one to make: none is pending
    yet, and no late holder's is still to land."""
    meta = load_window(conversation_id).meta
    offline = meta.offline_shift
    if not offline or meta.offline_replacement is not None:
        return
    pending = meta.pending
    started = pending is not None and pending.base_id == offline.get("base")
    if started or not offline.get("awaits_holder"):
        enqueue_on_commit(PREBUILD_TASK, conversation_id, unless_queued=True)


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
        if load_window(state.conversation_id, config).meta.offline_shift != offline:
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
        values = _pending_values(outcome, base, through, state.meta.anchor_id, index)
        stored = merge_metadata(lease.holding(), values)
    if stored:
        log_event("summary_replacement_built", conversation_id=conversation_id, through=through)
    return bool(stored)


def adopt_pending_summary(conversation_id: int, config: CompactionConfig | None = None) -> bool:
    """Take the pre-built summary now (the pre-call hook, when the cache is
    cold anyway); False when none fits or another process holds the lease."""
    with summary_lease(conversation_id) as lease:
        return lease is not None and adopt_pending(load_window(conversation_id, config), lease)


def adopt_pending(state: WindowState, lease: Lease) -> bool:
    """Compare and swap: take the pre-built summary only if it was built on
    the split that is still current and makes the context smaller; or the
    model's summary replacing an offline one (`WindowMeta.offline_replacement`),
    of the same split or a later one, whatever its size."""
    metadata = state.metadata
    pending: str = metadata.get(MetadataKeys.PENDING_SUMMARY) or ""
    through = metadata.get(MetadataKeys.PENDING_THROUGH_MESSAGE_ID)
    replaces = state.meta.offline_replacement is not None
    reachable = {row.pk for row in state.rows} | ({state.through_id} if replaces else set())
    if not (state.meta.has_pending_summary or replaces) or through not in reachable:
        return False
    kept = [row for row in state.rows if row.pk > through]
    anchor_id = metadata.get(MetadataKeys.PENDING_ANCHOR_MESSAGE_ID)
    anchor = next((row for row in [*state.rows, state.anchor] if row and row.pk == anchor_id), None)
    sent = [anchor, *kept] if anchor else kept
    index = metadata.get(MetadataKeys.PENDING_ARTIFACT_INDEX)
    room = summary_room(state, state.config, sent)
    pending = bounded_summary(pending, index, room, state.config)
    before = state.estimated_tokens()
    after = _context_after(state, pending, sent)
    if after >= before and not replaces:
        merge_metadata(lease.holding(), remove=PENDING_SUMMARY_KEYS)
        return False
    stored = _store_window(lease, pending, through, anchor, state, index)
    if stored:
        usage = metadata.get(MetadataKeys.PENDING_USAGE) or {}
        record_compaction(
            state.conversation_id,
            CompactionEvent.Kind.WINDOW_SUMMARY,
            tokens_before=before,
            tokens_after=after,
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
            },
        )
    return bool(stored)


def failure_blocks(state: WindowState, over_trigger_split: int | None = None) -> bool:
    """A summary failed lately from the current split: wait before the next
    try. Only a split made because the context is over the trigger
    (`over_trigger_split`, the last message it summarizes) goes on after a
    summary of another split was refused as not smaller: the newest step
    was too large to leave then, and a later split can summarize it."""
    failure = state.metadata.get(MetadataKeys.SUMMARY_FAILURE) or {}
    if failure.get("base") != state.through_id or time.time() >= failure.get("retry_at", 0):
        return False
    refused = failure.get("through")
    return refused is None or over_trigger_split is None or refused == over_trigger_split


def record_failure(lease: Lease, state: WindowState, *, through: int | None = None) -> None:
    """Remember a failed summary from the current split, with a doubling
    delay; `through`: the split whose summary was refused as not smaller
    (None: the summarizer itself failed)."""
    failure = state.metadata.get(MetadataKeys.SUMMARY_FAILURE) or {}
    attempts = failure.get("attempts", 0) + 1 if failure.get("base") == state.through_id else 1
    delay = state.config.SUMMARY_RETRY_SECONDS * 2 ** min(attempts - 1, 10)
    merge_metadata(
        lease.holding(),
        {
            MetadataKeys.SUMMARY_FAILURE: {
                "base": state.through_id,
                "through": through,
                "attempts": attempts,
                "retry_at": time.time() + delay,
            }
        },
    )
    log_event("summary_failure_recorded", conversation_id=state.conversation_id, attempts=attempts)


def _store_window(
    lease: Lease,
    summary: str,
    through: int,
    anchor: Message | None,
    state: WindowState,
    index: dict | None,
    offline: dict | None = None,
) -> bool:
    """Store a new split, its summary and the artifact index it renders, while
    the lease is still ours. `offline`: the OFFLINE_SHIFT marker of a summary
    the offline summarizer wrote in a late or stalled holder's place."""
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
    if anchor is None:
        remove.append(MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID)
    else:
        values[MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID] = anchor.pk
    stored = bool(merge_metadata(lease.holding(), values, remove=remove))
    if stored:
        refresh_size(state.conversation_id, state.config)
    return stored


def _summarize_and_store(
    state: WindowState, start: int, lease: Lease, config: CompactionConfig, deadline: Deadline
) -> str | None:
    newly_old, anchor = split_parts(state, start)
    if not newly_old:
        return state.summary
    kept = [anchor, *state.rows[start:]] if anchor else state.rows[start:]
    through = newly_old[-1].pk
    before = state.estimated_tokens()
    # The summary gives way to what stays verbatim: its room under the trigger.
    room = summary_room(state, config, kept)
    index = updated_index(state.metadata.get(MetadataKeys.ARTIFACT_INDEX), newly_old)
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
        return state.summary  # the cached summary stays exactly as it was
    after = _context_after(state, outcome.text, kept)
    if after >= before:
        log_event("summary_discarded", conversation_id=state.conversation_id, reason="not_smaller")
        record_failure(lease, state, through=through)
        return state.summary
    offline = _offline_shift(state, through, lease, late=late or outcome.fallback)
    if not _store_window(lease, outcome.text, through, anchor, state, index, offline):
        keep_landed_summary(state, outcome, through, anchor, index)
        return load_window(state.conversation_id, config).summary
    record_compaction(
        state.conversation_id,
        CompactionEvent.Kind.WINDOW_SUMMARY,
        tokens_before=before,
        tokens_after=after,
        messages_affected=len(newly_old),
        duration_ms=elapsed.ms,
        summarizer_model=outcome.model,
        summarizer_input_tokens=outcome.input_tokens,
        summarizer_output_tokens=outcome.output_tokens,
        details={
            "through_message_id": through,
            "calls": outcome.calls,
            "fallback": outcome.fallback or lease.took_over or late,
            **outcome.usage_details(),
            **_fallback_details(lease, outcome, late=late),
        },
    )
    return outcome.text


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


def _context_after(state: WindowState, summary: str, kept: Sequence[Message]) -> int:
    return (
        state.tokens(state.system)
        + state.tokens(state.parent_summary)
        + state.tokens(summary)
        + sum(row.token_estimate for row in kept)
    )


def _summarizer_texts(messages: Sequence[Message], config: CompactionConfig) -> dict[int, str]:
    """Message id -> what the summarizer reads for a tool result the context
    still carries whole: the compaction the worker prepared, else, past the
    size threshold and under the "prune" policy, its truncation; only where
    that is shorter, and never for a result staff pinned verbatim. That is
    the result as the context will carry it (as eager timing already would),
    not the whole original again at the summarizer's price. Carried facts
    still come from the original (`with_carried_facts`)."""
    ids = [m.pk for m in messages if m.role == Message.Role.TOOL and not m.compaction]
    if not ids:
        return {}
    texts = {}
    rows = (
        Message.objects.filter(pk__in=ids)
        .exclude(metadata__has_key=KEEP_VERBATIM)
        .values_list("pk", "content", "prepared_content", "tool_name")
    )
    for pk, content, prepared, tool_name in rows:
        text = prepared
        if (
            text is None
            and len(content) >= config.TOOL_RESULT_CHAR_THRESHOLD
            and config.policy_for(tool_name) == "prune"
        ):
            text = truncate_tool_result(content, config)
        if text is not None and len(text) < len(content):
            texts[pk] = text
    return texts


def _chunks(
    messages: Sequence[Message],
    config: CompactionConfig,
    previous: str | None,
    provider: llm.Provider,
) -> list[list[dict]]:
    """Cut the slice into pieces the summarizer can take with the running
    summary beside them; a single oversized message is cut to fit."""
    budget = min(config.SUMMARIZER_MAX_INPUT_TOKENS, provider.max_input_tokens)
    per_token = config.CHARS_PER_TOKEN
    budget = max(
        budget - estimate_tokens(previous or "", per_token) - CHUNK_RESERVE_TOKENS,
        CHUNK_RESERVE_TOKENS,
    )
    max_chars = budget * config.CHARS_PER_TOKEN
    chunks: list[list[dict]] = [[]]
    used = 0
    readable = _summarizer_texts(messages, config)
    for message in messages:
        neutral = as_neutral(message)
        neutral["content"] = readable.get(message.pk, neutral["content"])
        if len(neutral["content"]) > max_chars:
            neutral["content"] = neutral["content"][:max_chars] + " [cut for the summarizer]"
        cost = estimate_tokens(neutral["content"], per_token) + MESSAGE_FRAME_TOKENS
        if chunks[-1] and used + cost > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(neutral)
        used += cost
    return [chunk for chunk in chunks if chunk]
