"""What a voluntary compaction step is expected to save, and what
compaction has saved a conversation so far under prompt caching: a step
that is not forced (by the trigger, a cold cache or an overflow) is taken
only when both cover its cost.

Prices as docs/compaction.rst counts them, relative to an uncached input token: a
request reads its unchanged leading part from the provider's cache and
writes the rest, and the summarizer's input costs 1.0x. The cache's two
prices are the chat model's (`cache_prices`, from ASSISTANT_MODEL_PRICES):
Anthropic reads at 0.1x and writes at 1.25x; Gemini's implicit caching
reads at its discount and writes with no premium. A compaction step makes
the next request write everything after the first changed message instead
of reading it, and a window shift also pays the summarizer to read what it
summarizes: together the step's cost (`step_cost`).

A step pays for itself when what it saves on its own reaches that cost
(`Outlook.saves`): the freed tokens are not read by the calls expected
before the trigger, and the forced shift at the trigger comes later. Savings
the conversation made earlier never license a step that does not pay. The
ledger keeps the balance of the steps taken against sending everything (from
a step on, every request carries the freed tokens no more: the `gap`, at
the read price per call); a step is also taken only when the balance covers
its cost, so a conversation never costs more than sending everything would
have, even if it ends right after the step."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from assistant.models import Message, MetadataKeys
from assistant.providers import price_of


@dataclass(frozen=True)
class CachePrices:
    """A cached input token's prices over an uncached one's."""

    read: float = 0.1
    write: float = 1.25


# A model with no price (or a free one) is judged at Anthropic's prices: the
# dearest write premium, so no step is taken that a caching provider makes a loss.
ANTHROPIC = CachePrices()


def cache_prices(model: str) -> CachePrices:
    """The cache prices of `model` (its ASSISTANT_MODEL_PRICES entry) relative
    to its uncached input price."""
    price = price_of(model)
    if price is None or price.input <= 0:
        return ANTHROPIC
    return CachePrices(read=price.cache_read / price.input, write=price.cache_write / price.input)


@dataclass(frozen=True)
class Ledger:
    balance: float = 0.0  # tokens (at 1.0x) saved against sending everything, as of `since`
    gap: int = 0  # how much smaller the context is than sending everything
    since: int = 0  # the newest message when the ledger was last written
    calls: int = 0  # the model calls the conversation had made by `since`
    rewrites: int = 0  # the calls whose request a step rewrote, by `since`

    @classmethod
    def of(cls, columns: Mapping[str, Any]) -> Ledger:
        value = columns.get(MetadataKeys.CACHE_LEDGER) or {}
        return cls(
            float(value.get("balance", 0.0)),
            int(value.get("gap", 0)),
            int(value.get("since", 0)),
            int(value.get("calls", 0)),
            int(value.get("rewrites", 0)),
        )

    def calls_since(self, rows: list[Message]) -> int:
        return sum(1 for row in rows if row.role == Message.Role.ASSISTANT and row.pk > self.since)

    def calls_now(self, rows: list[Message]) -> int:
        """The model calls the conversation has made (`rows`: the window,
        which holds at least as many as a ledger written before it counted)."""
        window = sum(1 for row in rows if row.role == Message.Role.ASSISTANT)
        return max(self.calls + self.calls_since(rows), window)

    def prefix_life(self, rows: list[Message]) -> float | None:
        """The model calls a cached prefix has lasted in this conversation, on
        average: its calls over the rewrites the steps made (None: no step yet,
        nothing says when the next comes)."""
        if not self.rewrites:
            return None
        return max(self.calls_now(rows), 1) / self.rewrites

    def balance_now(self, rows: list[Message], prices: CachePrices = ANTHROPIC) -> float:
        """The balance, with the savings of every model call since `since`."""
        return self.balance + prices.read * self.gap * self.calls_since(rows)

    def affords(self, rows: list[Message], cost: float, prices: CachePrices = ANTHROPIC) -> bool:
        return self.balance_now(rows, prices) >= cost

    def after_step(
        self,
        rows: list[Message],
        *,
        freed: int,
        cost: float,
        newest_id: int,
        prices: CachePrices = ANTHROPIC,
    ) -> dict[str, Any]:
        """The stored value once a step freed `freed` tokens at `cost`."""
        return {
            "balance": round(self.balance_now(rows, prices) - cost, 1),
            "gap": self.gap + max(freed, 0),
            "since": newest_id,
            "calls": self.calls_now(rows),
            # Steps of one call (a shift and the results it keeps) are one rewrite.
            "rewrites": self.rewrites + (newest_id != self.since),
        }


def step_cost(
    tail_before: int,
    tail_after: int,
    *,
    cold: bool = False,
    summarizer_input: int = 0,
    prices: CachePrices = ANTHROPIC,
) -> float:
    """What a step costs the next request beyond not taking it: the tail after
    the first changed message is written (`tail_after`) instead of read (or,
    on a `cold` cache, instead of written anyway), plus what the summarizer
    read to make the step (1.0x)."""
    instead = prices.write if cold else prices.read
    return prices.write * tail_after - instead * tail_before + summarizer_input


@dataclass(frozen=True)
class Outlook:
    """Where the window is heading without a voluntary step: `tokens` now,
    growing by `per_call` tokens a model call until the token `trigger`,
    where a forced shift costs `shift_cost` and leaves `kept` tokens. How
    long the conversation goes on is not known: its remaining calls are
    taken as memoryless with a mean of the calls it has made (`calls`), so
    a step never bets on a future longer than the past."""

    tokens: int
    per_call: float
    trigger: int
    shift_cost: float
    kept: int
    calls: int

    @property
    def reached(self) -> float:
        """The chance that the conversation reaches the trigger (0 with no call
        made yet): its remaining calls memoryless with a mean of `calls`."""
        if self.calls <= 0:
            return 0.0
        return self._reached_within(self.calls)

    def _reached_within(self, mean: float) -> float:
        """The chance that the trigger comes before the end of a memoryless
        stretch of calls with that mean."""
        to_trigger = max(self.trigger - self.tokens, 0) / max(self.per_call, 1.0)
        return math.exp(-to_trigger / mean)

    def saves(
        self, freed: int, prices: CachePrices = ANTHROPIC, *, prefix_life: float | None = None
    ) -> float:
        """What freeing `freed` tokens now is expected to save: they are not
        read by the calls made before the trigger, and, if the conversation
        reaches it, the forced shift (and every one after it) comes that many
        tokens of growth later. With `prefix_life` (a results batch: the next
        rewrite of the prefix, a shift, compacts or summarizes those results
        anyway), only until that rewrite too: the cached prefix's remaining
        calls memoryless with that mean, as it has lasted in this conversation
        (`Ledger.prefix_life`), and the forced shift deferred only when it
        comes before."""
        if self.calls <= 0:
            return 0.0
        mean = self.calls if prefix_life is None else 1 / (1 / self.calls + 1 / prefix_life)
        reached = self._reached_within(mean)
        reads = prices.read * freed * mean * (1 - reached)  # E[min(calls left, to_trigger)]
        deferred = self.shift_cost * freed / max(self.trigger - self.kept, 1)
        return reads + reached * deferred
