"""How a token figure reads, wherever it is shown (the admin, History, the event
list, the demo, the commands): one format, one unit, and a label saying what it
measures (docs/admin.rst, "Token figures").

A compaction event's before and after measure one of two things
(`measures`): the next request (a window summary, an emergency
level, a fork's summary, a staff action, a restore, the provider's compaction)
or the messages the step compacted (the tool results compacted, the duplicates
stubbed, the old media).
"""

from __future__ import annotations

from typing import Any

from assistant.models import CompactionEvent

ARROW = "→"
# The kinds whose own event measures the messages it compacted, not the request.
MESSAGE_KINDS = frozenset(
    {
        CompactionEvent.Kind.TOOL_RESULTS,
        CompactionEvent.Kind.DEDUP,
        CompactionEvent.Kind.MEDIA,
    }
)


def measures(event: Any) -> str:
    """What an event's `tokens_before` and `tokens_after` measure: the messages the
    step compacted, for one of MESSAGE_KINDS made on its own; else the next request
    (a staff action's one event, whatever its kind). `event`: a CompactionEvent, or
    anything with its `kind` and `details`."""
    if event.kind in MESSAGE_KINDS and "parts" not in (event.details or {}):
        return "the messages compacted"
    return "the request"


def token_count(tokens: int) -> str:
    """`1187` -> "1,187 tokens"."""
    return f"{tokens:,} tokens"


def token_change(before: int, after: int, measured: str = "") -> str:
    """`22137, 1187, "the request"` -> "the request: 22,137 → 1,187 tokens"."""
    figures = f"{before:,} {ARROW} {token_count(after)}"
    return f"{measured}: {figures}" if measured else figures


def share(tokens: int, whole: int) -> str:
    """`1358, 1047576` -> "0.1%": a share of a window or a trigger, one decimal."""
    return f"{100 * tokens / whole:.1f}%" if whole else "—"
