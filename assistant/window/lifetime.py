"""Each request's prompt-cache lifetime, chosen per conversation (docs/compaction.rst,
"Cache lifetimes"), and the key that routes a conversation's OpenAI requests to one
cache.

The break-even rule: a lifetime L (write price w_L over an uncached input token, read
price r) is expected to cost, on the request about to be sent,

    cost(L) = w_L x (W + R) + q_L x P x (w_L - r)

where W is what the request writes anyway (the tokens after its cached prefix), R what
the decision plans to rewrite (the whole context while a prepared shift is pending, or
past COMPACT_WATERMARK, where a cold cache is compacted for free), P the request's
whole prompt, and q_L the share of the conversation's gaps so far (between its model
calls) longer than L: the chance that the cache L keeps has expired by the next call,
which then writes P again instead of reading it. The cheapest lifetime is chosen; a tie
keeps the provider's default. With no gap yet, q = 0 and the default (cheapest write)
wins. Where the writes cost the same (OpenAI's in-memory and 24h retention), the longer
lifetime never costs more.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise
from typing import Any

from django.utils import timezone
from django.utils.crypto import salted_hmac

from assistant.models import Conversation, Message, MetadataKeys
from assistant.providers import (
    CacheLifetime,
    asking_lifetime,
    configured_chat_model,
    lifetime_named,
    lifetimes_of,
    routes_by_cache_key,
)
from assistant.settings.app import app_setting
from assistant.settings.conf import compaction_config
from assistant.window.ledger import CachePrices, cache_prices
from assistant.window.limits import chat_model

# Where the lifetime a request was sent with is kept: the answer's metadata.
LIFETIME_KEY = "cache_lifetime"


def lifetime_cost(
    lifetime: CacheLifetime,
    prices: CachePrices,
    gaps: Sequence[float],
    prompt: int,
    written: int,
    rewrite: int = 0,
) -> float:
    """cost(L) of the module docstring, in uncached-input tokens."""
    write = prices.write if lifetime.write is None else lifetime.write
    expiring = sum(gap > lifetime.seconds for gap in gaps) / len(gaps) if gaps else 0.0
    return write * (written + rewrite) + expiring * prompt * (write - prices.read)


def choose_lifetime(
    provider: str,
    model: str,
    prices: CachePrices,
    gaps: Sequence[float],
    prompt: int,
    written: int,
    rewrite: int = 0,
) -> CacheLifetime | None:
    """The lifetime of the next request: the host's (CACHE_LIFETIME) where the provider
    sells it, else the cheapest by the break-even rule; None where the provider offers
    no lifetime to choose."""
    options = lifetimes_of(provider, model)
    if not options:
        return None
    fixed = compaction_config().CACHE_LIFETIME
    if fixed != "auto":
        chosen = lifetime_named(fixed)
        return chosen if chosen in options else options[0]
    return min(options, key=lambda x: lifetime_cost(x, prices, gaps, prompt, written, rewrite))


def call_gaps(rows: Sequence[Message]) -> list[float]:
    """Seconds between the conversation's model calls (its answers) in `rows`, in order."""
    times = [row.created_at for row in rows if row.role == Message.Role.ASSISTANT]
    return [(b - a).total_seconds() for a, b in pairwise(times)]


def lifetime_in_use(rows: Sequence[Message]) -> CacheLifetime | None:
    """The lifetime the newest answer's request was sent with (None: not recorded)."""
    for row in reversed(rows):
        if row.role == Message.Role.ASSISTANT:
            return lifetime_named(str((row.metadata or {}).get(LIFETIME_KEY) or ""))
    return None


def prompt_cache_key(conversation_id: int) -> str:
    """OpenAI's `prompt_cache_key` for a conversation: an HMAC of its id under the
    deployment's SECRET_KEY, so the same conversation always lands on the same cache
    and the key names no id."""
    return salted_hmac(
        "assistant.prompt_cache_key", str(conversation_id), algorithm="sha256"
    ).hexdigest()[:40]


def openai_own_api() -> bool:
    """Whether the app's OpenAI calls go to OpenAI's own API (OPENAI_BASE_URL unset or
    api.openai.com), or a compatible server opted in (PROMPT_CACHE_KEY_COMPATIBLE)."""
    base = app_setting("OPENAI_BASE_URL") or ""
    return not base or "api.openai.com" in base or compaction_config().PROMPT_CACHE_KEY_COMPATIBLE


LOADED = ("created_at", "role", "model", "metadata", "input_tokens")
LOADED_USAGE = ("cache_read_tokens", "cache_write_tokens")


def request_lifetime(conversation_id: int, provider: str, prompt: int) -> CacheLifetime | None:
    """The lifetime of the conversation's next request of `prompt` tokens: its gaps so
    far, what the previous request's prompt leaves to write, and the planned rewrite
    (the whole prompt: a pending shift's, or past the watermark a cold cache's) by the
    break-even rule (`choose_lifetime`)."""
    rows = list(
        Message.objects.filter(conversation_id=conversation_id, role=Message.Role.ASSISTANT)
        .order_by("-id")
        .only(*LOADED, *LOADED_USAGE)[:200]
    )[::-1]
    model = (
        chat_model(rows[-1].metadata, rows[-1].model) if rows else configured_chat_model(provider)
    )
    if not lifetimes_of(provider, model):
        return None
    state = (
        Conversation.objects.filter(pk=conversation_id)
        .values(MetadataKeys.PENDING_SUMMARY, MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID)
        .first()
        or {}
    )
    cached = expected_cache_read(
        rows[-1] if rows else None, state.get(MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID)
    )
    config = compaction_config()
    # Past the watermark a cold cache is compacted for free (decision.decide): a longer
    # lifetime that keeps it warm puts that rewrite off to a call that pays its premium.
    rewrites = state.get(MetadataKeys.PENDING_SUMMARY) is not None or (
        prompt >= config.COMPACT_WATERMARK * config.CONTEXT_TOKEN_THRESHOLD
    )
    return choose_lifetime(
        provider,
        model,
        cache_prices(model),
        call_gaps(rows),
        prompt,
        max(0, prompt - cached),
        prompt if rewrites else 0,
    )


def expected_cache_read(
    previous: Message | None, epoch: int | None, at: datetime | None = None
) -> int:
    """The prefix a request made at `at` (now) expects the provider to read from its
    cache: the whole prompt of the previous call (`previous`, the conversation's newest
    answer before it), unless a compaction has rewritten the request since (the context
    epoch is at or past that answer) or the cache that call left has expired (the
    lifetime it asked for, else CACHE_TTL_SECONDS). The lifetime choice prices what is
    left to write from it, and the cache check (assistant.history.cache_check) compares
    the provider's reported reads with it."""
    if previous is None or (epoch is not None and previous.pk <= epoch):
        return 0
    in_use = lifetime_in_use([previous])
    alive = in_use.seconds if in_use else compaction_config().CACHE_TTL_SECONDS
    if ((at or timezone.now()) - previous.created_at).total_seconds() > alive:
        return 0
    return previous.prompt_tokens or 0


def with_lifetime(
    request: dict[str, Any], conversation_id: int, provider: str, lifetime: CacheLifetime | None
) -> dict[str, Any]:
    """The request as the provider is asked for `lifetime` (`providers.asking_lifetime`),
    with OpenAI's `prompt_cache_key` on its own API or where PROMPT_CACHE_KEY_COMPATIBLE
    opts in."""
    key = prompt_cache_key(conversation_id) if routes_by_cache_key(provider) else None
    return asking_lifetime(request, provider, lifetime, key if openai_own_api() else None)
