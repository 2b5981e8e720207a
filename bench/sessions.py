"""The real agent conversations of bench/data/real (format in its README),
loaded as neutral messages with their retention probes. Pure Python."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

OURS = "ours"
OURS_SUFFIX = "ours (cached suffix)"
OURS_OPENAI = "ours (OpenAI's cache prices)"
# Our app under PROVIDER_COMPACTION (bench/provider_replay.py): Anthropic's compaction
# emulated at the trigger, or on demand where ours would shift.
OURS_PROVIDER = 'ours, PROVIDER_COMPACTION "provider"'
OURS_AUTO = 'ours, PROVIDER_COMPACTION "auto"'
# Ours is replayed on the sessions' own clock (bench/timing.py): OURS and OURS_OPENAI with
# the providers' default lifetimes (as the app sends without a choice), and on the long
# sessions with CACHE_LIFETIME fixed to the other lifetimes or "auto" (the app's choice
# per request): name -> (wire, CACHE_LIFETIME). OpenAI's "auto" is its 24h retention on
# the price model (the same write price, a longer life: `choose_lifetime` never picks
# less), so it is not replayed apart.
OURS_CLOCK = "ours on the clock, CACHE_LIFETIME {lifetime}"
CLOCK_REPLAYS = {
    OURS: ("anthropic", "5m"),
    OURS_OPENAI: ("openai", "in_memory"),
    OURS_CLOCK.format(lifetime="1h"): ("anthropic", "1h"),
    OURS_CLOCK.format(lifetime="auto"): ("anthropic", "auto"),
    OURS_CLOCK.format(lifetime="24h"): ("openai", "24h"),
}
EVERYTHING = "send everything"
LANGCHAIN = "LangChain SummarizationMiddleware"
LANGMEM = "langmem summarize_messages"
CLEAR_LIBRARY = "clear_tool_uses (Anthropic)"
CLEAR_DOCS = "clear_tool_uses (from the docs)"
OPENHANDS = "OpenHands LLMSummarizingCondenser"
COMPACT = "compact_20260112 at {trigger}"
MASKING = "Complexity Trap observation masking"
HYBRID = "Complexity Trap hybrid"
# The peers of the frontier targets (docs/benchmarks.rst) (the docs form of clear_tool_uses
# is a check on the library form, not a peer of its own): on each long session, ours and
# every other strategy are judged against those of them that break no tool pair there.
PEERS = (
    LANGCHAIN,
    LANGMEM,
    CLEAR_LIBRARY,
    OPENHANDS,
    MASKING,
    HYBRID,
    COMPACT.format(trigger="150,000"),
    COMPACT.format(trigger="50,000"),
)
REAL = Path(__file__).resolve().parent / "data" / "real"
# The files carry no system prompt (the converter dropped them): every
# strategy gets this one, so it weighs the same everywhere.
SYSTEM_PROMPT = (
    "You are an agent that completes the user's request with the tools you are given. "
    "Read tool results carefully and keep identifiers exact."
)


@dataclass
class Session:
    name: str
    messages: list[dict[str, Any]]
    probes: dict[int, list[str]] = field(default_factory=dict)  # message index -> identifiers
    meta: dict[str, Any] = field(default_factory=dict)
    # Each message's time, seconds since the epoch (its `ts`; None where the source has none).
    times: list[float | None] = field(default_factory=list)

    def call_time(self, index: int) -> float | None:
        """When the model call producing message `index` was sent: at the time of the
        last message it carries (the one before), None without a clock."""
        return self.times[index - 1] if 0 < index <= len(self.times) else None

    @property
    def model_calls(self) -> int:
        return sum(m["role"] == "assistant" for m in self.messages)

    @property
    def probe_count(self) -> int:
        return sum(len(p) for p in self.probes.values())

    def newest_step(self, index: int) -> list[dict[str, Any]]:
        """What came last before the model call that produces message `index`: the newest
        assistant message and everything after it (its results, a user message), or the
        messages so far when there is none."""
        start = next(
            (i for i in range(index - 1, -1, -1) if self.messages[i]["role"] == "assistant"), 0
        )
        return self.messages[start:index]

    def turn_ends(self) -> set[int]:
        """Indices of the last message of each user turn."""
        ends = {i - 1 for i, m in enumerate(self.messages) if m["role"] == "user" and i > 0}
        ends.add(len(self.messages) - 1)
        return ends


def neutral(raw: dict[str, Any]) -> dict[str, Any]:
    """A file line as the neutral message add_message and the converters take."""
    message: dict[str, Any] = {"role": raw["role"], "content": raw.get("content") or ""}
    if raw.get("tool_calls"):
        message["tool_calls"] = [
            {"id": c["id"], "name": c["name"], "arguments": c.get("arguments") or {}}
            for c in raw["tool_calls"]
        ]
    if raw["role"] == "tool":
        message["tool_call_id"] = raw["tool_call_id"]
        message["tool_name"] = raw.get("tool_name") or ""
    return message


def seconds(ts: str | None) -> float | None:
    """An ISO 8601 time ("2026-02-11T20:36:45.618Z") as seconds since the epoch."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() if ts else None


def load_session(path: Path) -> Session:
    raws = [json.loads(line) for line in path.read_text().splitlines() if line]
    messages = [neutral(raw) for raw in raws]
    times = [seconds(raw.get("ts")) for raw in raws]
    stem = path.name.removesuffix(".jsonl")
    needles = json.loads((path.parent / f"{stem}.needles.json").read_text())
    meta = json.loads((path.parent / f"{stem}.meta.json").read_text())
    probes: dict[int, list[str]] = {}
    # step_asks are checked at their own model call, asks at the first call of
    # their turn: both are keyed by the index of the assistant message produced.
    # Every ask is also a step_ask (the files' rule: "'step_asks' = all"), so a
    # probe is counted once.
    for ask in [*needles.get("step_asks", []), *needles.get("asks", [])]:
        at = probes.setdefault(ask["message_index"], [])
        if ask["needle"] not in at:
            at.append(ask["needle"])
    return Session(stem, messages, probes, meta, times)


def load_sessions(directory: Path = REAL) -> list[Session]:
    return [load_session(path) for path in sorted(directory.glob("*.jsonl"))]
