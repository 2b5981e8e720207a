"""The cache checked against the provider's usage (docs/compaction.rst, "Cache breaks").

Each recorded answer's cache reads are compared with the prefix its request expected
to read (`window.expected_cache_read`: the previous call's whole prompt, while nothing
has rewritten the request and the cache that call left is alive). A shortfall of more
than max(SHORTFALL_SHARE of it, SHORTFALL_MIN_TOKENS) is a cache break: the prefix
changed where the app did not change it (a system prompt with a timestamp, tools in a
new order, an edited earlier message) or the provider dropped it. It is recorded as a
CompactionEvent of kind `cache_break`, outside `record_compaction`: no
`context_compacted` signal, no compaction metric, and `CompactionEvent.objects.
compactions()` leaves it out of the cost figures, the compaction counts and the undo.

The check runs where the app plans a cache (`providers.lifetimes_of`: Anthropic, OpenAI;
not Gemini's implicit cache) and the provider has shown that it reports one: the
previous answer recorded a cache read or write, or was judged itself (an
OpenAI-compatible server that leaves them out is never judged). What each answer
expected is kept in its metadata (EXPECTED_KEY), the one source of the admin's
expected hit rate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db.models import BigIntegerField, Count, ExpressionWrapper, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, Least

from assistant.history.figures import share
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.ops import telemetry
from assistant.ops.logs import log_event
from assistant.providers import lifetimes_of
from assistant.window import LOADED, LOADED_USAGE, expected_cache_read

# Where an answer keeps the cache read its request expected.
EXPECTED_KEY = "expected_cache_read_tokens"
SHORTFALL_SHARE = 0.05
SHORTFALL_MIN_TOKENS = 1024


def cache_expectation(conversation_id: int, provider: str, model: str) -> int | None:
    """The cache read the answer about to be recorded expected (two queries), or None
    where it is not judged: a provider the app plans no cache for, or a conversation
    whose previous answer recorded no cache use and was not judged itself. A different
    model or provider than the previous answer's has a cache of its own: 0."""
    if not lifetimes_of(provider, model):
        return None
    previous = (
        Message.objects.filter(conversation_id=conversation_id, role=Message.Role.ASSISTANT)
        .order_by("-id")
        .only(*LOADED, *LOADED_USAGE, "provider")
        .first()
    )
    if previous is None:
        return None
    judged = EXPECTED_KEY in (previous.metadata or {})
    if not (judged or previous.cache_read_tokens or previous.cache_write_tokens):
        return None
    if (previous.provider, previous.model) != (provider, model):
        return 0
    epoch = (
        Conversation.objects.filter(pk=conversation_id)
        .values_list(MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID, flat=True)
        .first()
    )
    return expected_cache_read(previous, epoch)


def record_cache_break(
    message: Message, expected: int, diagnosis: dict[str, Any] | None = None
) -> CompactionEvent | None:
    """The answer's cache break, when its reported cache read falls short of `expected`
    by more than the bound: the event (its details: both figures, and the provider's
    diagnosis where the response carries one), its metric and a warning log line."""
    reported = message.cache_read_tokens or 0
    if expected - reported <= max(SHORTFALL_SHARE * expected, SHORTFALL_MIN_TOKENS):
        return None
    details: dict[str, Any] = {
        "expected_cache_read_tokens": expected,
        "reported_cache_read_tokens": reported,
        "message_id": message.pk,
        "provider": message.provider,
        "model": message.model,
    }
    if diagnosis:
        details["diagnosis"] = diagnosis
    prompt = message.prompt_tokens or 0
    event = CompactionEvent.objects.create(
        conversation_id=message.conversation_id,
        kind=CompactionEvent.Kind.CACHE_BREAK,
        tokens_before=prompt,
        tokens_after=prompt,
        details=details,
    )
    telemetry.cache_break(message.provider, message.model)
    log_event(
        CompactionEvent.Kind.CACHE_BREAK,
        level=logging.WARNING,
        conversation_id=message.conversation_id,
        message_id=message.pk,
        expected_cache_read_tokens=expected,
        reported_cache_read_tokens=reported,
        reason=(diagnosis or {}).get("type"),
    )
    return event


@dataclass(frozen=True)
class CacheHits:
    """A conversation's checked calls: their prompts, what they expected to read from
    the cache, and what the provider reported it read (tokens)."""

    calls: int
    prompt_tokens: int
    expected_tokens: int
    reported_tokens: int

    @property
    def expected_rate(self) -> str:
        return share(self.expected_tokens, self.prompt_tokens)

    @property
    def reported_rate(self) -> str:
        return share(self.reported_tokens, self.prompt_tokens)


def cache_hits(conversation_id: int) -> CacheHits | None:
    """The conversation's expected and reported cache hit rates over its checked calls
    (None before the first): one query."""
    prompt = ExpressionWrapper(
        Coalesce("input_tokens", 0)
        + Coalesce("cache_read_tokens", 0)
        + Coalesce("cache_write_tokens", 0),
        output_field=BigIntegerField(),
    )
    expected = Cast(KeyTextTransform(EXPECTED_KEY, "metadata"), BigIntegerField())
    totals = Message.objects.filter(
        conversation_id=conversation_id,
        role=Message.Role.ASSISTANT,
        metadata__has_key=EXPECTED_KEY,
    ).aggregate(
        calls=Count("id"),
        prompt=Sum(prompt),
        expected=Sum(Least(expected, prompt)),
        reported=Sum(Coalesce("cache_read_tokens", 0)),
    )
    if not totals["prompt"]:
        return None
    return CacheHits(totals["calls"], totals["prompt"], totals["expected"], totals["reported"])
