"""Strategy 2: the sliding window and its cached summary: generating it.

The summary of everything up to a split point is cached in the
conversation's state (assistant.history.state_writes) with the id of the last
summarized message. It is regenerated only when the split moves, and then incrementally: the
summarizer reads the previous summary plus the newly old messages only.
Fact statements of the summarized messages are carried forward
deterministically (assistant.summary.facts), so a lossy summarizer cannot erode them
update by update.

This module asks the summarizer (in chunks, or as a cached-suffix request) and
bounds what it answers; the shift that stores it is assistant.summary.shift,
the summary built ahead on the worker assistant.summary.prebuild.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from assistant import providers as llm
from assistant.history import entry_point, optional_text, sequence_of
from assistant.models import (
    Message,
)
from assistant.providers import (
    InvalidRequest,
    describe_message,
    render_transcript,
    suffix_instruction,
)
from assistant.recall import render, without_index
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.summary.facts import (
    summary_body,
    with_carried_facts,
    with_facts_within,
    without_markers,
)
from assistant.summary.guidance import guided_by
from assistant.text import KEEP_VERBATIM, estimate_tokens, truncate_tool_result
from assistant.window import (
    TOKEN_RATIO_DRIFT,
    Context,
    IncompleteToolCall,
    WindowState,
    as_neutral,
    context_from_state,
    trigger_estimate,
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
        """The cached part of the summarizer's input, for the event's details (cost/pricing.py
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
    tools = state.meta.chat_tools  # JSON text: see chat.remember_chat_tools
    return Suffix(context, first_kept, json.loads(tools) if tools else None)


@entry_point(messages=sequence_of(Message), previous_summary=optional_text)
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
    summarizer can take. The artifact `index` (assistant.recall.artifact_index, rendered
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
    chunks = _chunks(messages, config, previous_summary, provider)
    # The conversation's language and instructions reach every prompt built inside.
    with guided_by(messages[0].conversation_id, config) if messages else nullcontext():
        request = _cached_request(suffix, messages, chunks, body, provider)
        if request is not None:
            tally = _summarize_cached(request, provider, on_chunk)
        else:
            tally = _summarize_chunks(chunks, body, chosen, on_chunk, deadline)
    index_tokens, rest = shares(tally.body or "", max_tokens, config)
    index_text = render(index, index_tokens)
    text = with_carried_facts(
        tally.body or "",
        [as_neutral(message) for message in messages],
        previous_summary,
        min(config.CARRIED_FACTS_MAX_TOKENS, rest - used(index_text)),
    )
    return _made(tally, with_index(text, index_text))


@dataclass
class _Tally:
    """The summarizer's running text and what its calls used."""

    body: str | None
    model: str = ""
    fallback: bool = False
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cache_read: int = 0
    cache_write: int = 0
    lost: bool = False  # the lease, after the last call answered: the summary is still made


def _made(tally: _Tally, text: str) -> SummaryOutcome:
    """The summary made, or LeaseLost carrying it when the lease was lost after
    the last summarizer call answered."""
    outcome = SummaryOutcome(
        text,
        tally.model,
        tally.tokens_in,
        tally.tokens_out,
        tally.fallback,
        tally.calls,
        tally.cache_read,
        tally.cache_write,
    )
    if tally.lost:
        raise LeaseLost(outcome)
    return outcome


def _summarize_cached(
    request: llm.CachedRequest, provider: llm.Provider, on_chunk: Callable[[], object] | None
) -> _Tally:
    """One call with the conversation's own cached request."""
    _progress(on_chunk)
    result = llm.summarize_cached(request, provider=provider)
    lost = not _alive(on_chunk)
    usage = result.usage
    return _Tally(
        without_markers(summary_body(result.text)),
        result.model,
        result.fallback,
        1,
        usage.prompt_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        lost,
    )


def _summarize_chunks(
    chunks: Sequence[list[dict]],
    body: str | None,
    chosen: dict[str, Any],
    on_chunk: Callable[[], object] | None,
    deadline: float | None,
) -> _Tally:
    """One call per chunk, each merging into the running summary; past the
    `deadline` the offline summarizer answers (a fallback). The lease lost
    before the last call: LeaseLost; after it: `_Tally.lost`."""
    tally = _Tally(body)
    for number, chunk in enumerate(chunks, 1):
        _progress(on_chunk)
        transcript = without_markers(render_transcript(chunk))
        late = deadline is not None and time.monotonic() >= deadline
        if late:
            chosen = {"provider": llm.OfflineProvider()}
        result = llm.summarize(transcript, previous_summary=tally.body, **chosen)
        tally.lost = not _alive(on_chunk)
        if tally.lost and number < len(chunks):
            raise LeaseLost()
        tally.body = without_markers(summary_body(result.text))
        tally.model, tally.fallback = result.model, tally.fallback or result.fallback or late
        tally.calls += 1
        tally.tokens_in += result.usage.prompt_tokens
        tally.tokens_out += result.usage.output_tokens
    return tally


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
    return trigger - context_after(state, "", kept)


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


def context_after(state: WindowState, summary: str, kept: Sequence[Message]) -> int:
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
