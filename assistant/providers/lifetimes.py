"""The prompt-cache lifetimes each provider sells (docs/compaction.rst, "Cache
lifetimes"): the one table the app's choice (assistant.window.lifetime), its cost
figures and the bench's pricing rules read.

- Anthropic: 5 minutes (the default, a write at the model's cache-write price, 1.25x)
  or 1 hour (`"ttl": "1h"` on a breakpoint, a write at 2.0x); reads 0.1x either way.
- OpenAI: in-memory retention (about 5 minutes, up to an hour off-peak: counted at 300 s)
  and, on the models that offer it, `prompt_cache_retention: "24h"`; no write premium.
- Gemini: implicit caching only here (an explicit cache is billed by the hour of
  storage, which pays only for a prefix read many times an hour: see the docs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from assistant.providers.wire import normalized_model


@dataclass(frozen=True)
class CacheLifetime:
    """One lifetime a provider sells: its name on the wire, how long a prefix stays
    cached after it was last used, and what writing it costs over an uncached input
    token (None: the model's listed cache-write price)."""

    name: str
    seconds: int
    write: float | None = None


FIVE_MINUTES = CacheLifetime("5m", 300)
ONE_HOUR = CacheLifetime("1h", 3600, 2.0)
IN_MEMORY = CacheLifetime("in_memory", 300)
DAY = CacheLifetime("24h", 86_400)

LIFETIMES: dict[str, tuple[CacheLifetime, ...]] = {
    "anthropic": (FIVE_MINUTES, ONE_HOUR),
    "openai": (IN_MEMORY, DAY),
    "openai_responses": (IN_MEMORY, DAY),
}
# The OpenAI models that offer `prompt_cache_retention: "24h"` (by name prefix).
RETENTION_MODELS = ("gpt-5", "gpt-4.1")


def lifetimes_of(provider: str, model: str = "") -> tuple[CacheLifetime, ...]:
    """The lifetimes `provider` sells for `model`, the default first; () where the
    provider has no prompt cache to choose for (Gemini's implicit cache, offline)."""
    found = LIFETIMES.get(provider, ())
    if DAY in found and not normalized_model(model).startswith(RETENTION_MODELS):
        return found[:1]
    return found


def lifetime_named(name: str) -> CacheLifetime | None:
    return next((x for table in LIFETIMES.values() for x in table if x.name == name), None)


# The providers whose requests carry a cache-routing key (OpenAI's `prompt_cache_key`).
KEYED = ("openai", "openai_responses")


def routes_by_cache_key(provider: str) -> bool:
    return provider in KEYED


def asking_lifetime(
    request: dict[str, Any], provider: str, lifetime: CacheLifetime | None, cache_key: str | None
) -> dict[str, Any]:
    """`request` as `provider` is asked for `lifetime`: Anthropic's `"ttl": "1h"` on each
    cache_control breakpoint; OpenAI's `prompt_cache_key` (when given) and
    `prompt_cache_retention: "24h"` where chosen."""
    if provider == "anthropic" and lifetime == ONE_HOUR:
        for message in [{"content": request.get("system")}, *(request.get("messages") or [])]:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and "cache_control" in block:
                    block["cache_control"] = {**block["cache_control"], "ttl": "1h"}
    if routes_by_cache_key(provider):
        if cache_key is not None:
            request = {**request, "prompt_cache_key": cache_key}
        if lifetime == DAY:
            request = {**request, "prompt_cache_retention": "24h"}
    return request
