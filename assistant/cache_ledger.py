"""What compaction has saved a conversation under prompt caching, so that
a voluntary compaction is made only when the conversation can afford it.

Prices as DESIGN 7 counts them, relative to an uncached input token: a
request reads its unchanged leading part from the provider's cache and
writes the rest, and the summarizer's input costs 1.0x. The cache's two
prices are the chat model's (`cache_prices`, from ASSISTANT_MODEL_PRICES):
Anthropic reads at 0.1x and writes at 1.25x; Gemini's implicit caching
reads at its discount and writes with no premium. A compaction step makes
the next request write everything after the first changed message instead
of reading it, and a window shift also pays the summarizer to read what it
summarizes: together the step's cost (`step_cost`). From then on every
request carries the freed tokens no more (read price each, the `gap`). The
ledger keeps the balance of both against sending everything: a step that
is not forced (by the trigger) is taken only when the balance covers its
cost, so a conversation never costs more than sending everything would
have, even if it ends right after the step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from assistant.cost import price_of
from assistant.models import Message, MetadataKeys


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

    @classmethod
    def of(cls, metadata: dict[str, Any]) -> Ledger:
        value = metadata.get(MetadataKeys.CACHE_LEDGER) or {}
        return cls(
            float(value.get("balance", 0.0)), int(value.get("gap", 0)), int(value.get("since", 0))
        )

    def balance_now(self, rows: list[Message], prices: CachePrices = ANTHROPIC) -> float:
        """The balance, with the savings of every model call since `since`."""
        calls = sum(1 for row in rows if row.role == Message.Role.ASSISTANT and row.pk > self.since)
        return self.balance + prices.read * self.gap * calls

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
        """The metadata value once a step freed `freed` tokens at `cost`."""
        return {
            "balance": round(self.balance_now(rows, prices) - cost, 1),
            "gap": self.gap + max(freed, 0),
            "since": newest_id,
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
