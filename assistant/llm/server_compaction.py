"""The providers' own compaction, as the app records and resends it
(docs/provider-compaction.rst).

A compaction is stored on the message that carried it (`Message.provider_compaction`)
as a `Record`: the wire that made it, its block or item verbatim, whether it holds a
summary (`live`: a failed Anthropic compaction has null content and changes nothing),
whether it was asked for on demand, and its own usage (Anthropic's compaction
iterations, outside the answer's usage). A live record starts every later request:
the messages before it are summarized in it, and stay in the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from assistant.llm.base import Usage

# How a compaction of one wire reads in another's request (a conversation that changed
# provider): Anthropic's summary is text; OpenAI's item is encrypted.
FOREIGN_SUMMARY = "Summary of the earlier part of this conversation:\n{summary}"
FOREIGN_ENCRYPTED = (
    "[The earlier part of this conversation was compacted by another provider; "
    "search_history and recall reach its messages.]"
)


@dataclass(frozen=True)
class Record:
    wire: str
    block: dict[str, Any]
    live: bool
    on_demand: bool = False
    usage: Usage | None = None
    # Items the provider keeps before its item (the user messages `responses.compact`
    # returns), sent back before it.
    retained: tuple[dict[str, Any], ...] = ()

    def stored(self) -> dict[str, Any]:
        usage = None
        if self.usage is not None:
            usage = {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
                "cache_read_tokens": self.usage.cache_read_tokens,
                "cache_write_tokens": self.usage.cache_write_tokens,
            }
        stored = {
            "wire": self.wire,
            "block": self.block,
            "live": self.live,
            "on_demand": self.on_demand,
            "usage": usage,
        }
        return {**stored, "retained": list(self.retained)} if self.retained else stored

    @classmethod
    def of(cls, stored: dict[str, Any]) -> Record:
        usage = stored.get("usage")
        return cls(
            stored["wire"],
            stored["block"],
            bool(stored.get("live")),
            bool(stored.get("on_demand")),
            Usage(**usage) if usage else None,
            tuple(stored.get("retained") or ()),
        )


def summary_text(stored: dict[str, Any]) -> str:
    """What a stored compaction says in plain text: Anthropic's summary, or a note for
    an encrypted one (a request to another wire, the admin)."""
    content = stored["block"].get("content")
    if isinstance(content, str) and content:
        return FOREIGN_SUMMARY.format(summary=content)
    return FOREIGN_ENCRYPTED
