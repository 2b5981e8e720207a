"""One strategy's replay of one real session: what `bench.real` records and the tables
and the frontier (bench/frontier.py) read. Pure Python."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from bench.payload import CostMeter, Rates


@dataclass
class Outcome:
    """One strategy on one conversation."""

    strategy: str
    conversation: str
    meter: CostMeter
    summarizer: dict[str, dict[str, int]] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    summarizer_cost: float | None = None  # priced by the strategy (compaction iterations)
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def summarizer_input(self) -> int:
        return sum(v.get("input_tokens", 0) for v in self.summarizer.values())

    @property
    def summarizer_output(self) -> int:
        return sum(v.get("output_tokens", 0) for v in self.summarizer.values())

    @property
    def cost(self) -> float:
        """Chat requests under caching plus summarizer input at 1.0x, or as
        the strategy prices it (Anthropic's compaction iterations read the cache)."""
        return self.cost_under(None)

    def cost_under(self, rates: Rates | None) -> float:
        """`cost` with the chat requests at other cache prices (None: Anthropic's)."""
        summarizer = self.summarizer_input if self.summarizer_cost is None else self.summarizer_cost
        chat = self.meter.cost if rates is None else self.meter.cost_under(rates)
        return chat + summarizer

    def as_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "conversation": self.conversation,
            **self.meter.as_dict(),
            "summarizer_input": self.summarizer_input,
            "summarizer_output": self.summarizer_output,
            "summarizer_cost": self.summarizer_cost,
            "cost_with_summarizer": round(self.cost, 1),
            "counters": self.counters,
            "error": self.error,
            "seconds": round(self.seconds, 2),
        }


def failure_text(exc: BaseException) -> str:
    """An exception as one line: its type, message and where it was raised."""
    last = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} ({last.filename.rsplit('/', 1)[-1]}:{last.lineno})"
