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

import json
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from assistant.providers.base import Usage
from assistant.text import estimate_tokens

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


_KEYS = {"wire", "block", "live", "on_demand", "usage"}


def validated(stored: Any) -> dict[str, Any] | None:
    """A provider compaction as Message.provider_compaction stores it, or None."""
    if stored is None:
        return None
    if (
        not isinstance(stored, dict)
        or not _KEYS <= set(stored) <= _KEYS | {"retained"}
        or not isinstance(stored.get("retained", []), list)
        or not isinstance(stored["block"], dict)
        or stored["block"].get("type") != "compaction"
        or not isinstance(stored["wire"], str)
    ):
        raise ValidationError(
            "provider_compaction must be a recorded compaction "
            "(assistant.providers.compaction_blocks.Record.stored()).",
            code="invalid_provider_compaction",
        )
    return stored


def block_tokens(stored: dict[str, Any] | None) -> int:
    """What the block adds to its message's size in a request."""
    if not stored or not stored.get("live"):
        return 0
    block = stored["block"]
    text = block.get("content") or block.get("encrypted_content") or summary_text(stored)
    retained = stored.get("retained")  # the user messages responses.compact kept
    return estimate_tokens(str(text)) + (estimate_tokens(json.dumps(retained)) if retained else 0)
