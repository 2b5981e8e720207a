"""What a replay records at each model call, shared by our strategy and the baselines.

Pure Python: every figure is computed from the request a strategy would send
(system, summaries, messages), with the benchmark's tokenizer-like count.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from bench.fake_summarizer import count_tokens
from demo.workload import Fact

MESSAGE_OVERHEAD_TOKENS = 4  # role and framing, as providers count it
# A fact is answerable when its value and its label stand this close in one message.
ANSWERABLE_DISTANCE = 200
# The section a summary carries forward deterministically (facts, or identifiers before).
_CARRIED_SECTION = re.compile(r"^## [^\n]*carried forward[^\n]*$", re.M | re.I)


def message_tokens(message: dict[str, Any]) -> int:
    content = message.get("content") or ""
    cached = message.get("_tokens")
    if cached is not None and cached[0] is content:
        return cached[1]
    calls = message.get("tool_calls")
    extra = count_tokens(json.dumps(calls, ensure_ascii=False)) if calls else 0
    tokens = MESSAGE_OVERHEAD_TOKENS + count_tokens(content) + extra
    message["_tokens"] = (content, tokens)
    return tokens


def pairing_violations(messages: list[dict[str, Any]]) -> int:
    """Tool calls separated from their results (a provider rejects the request):
    a call left unanswered before the next turn, or a result without its call."""
    problems = 0
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            if message.get("tool_call_id") not in open_calls:
                problems += 1
            open_calls.discard(message.get("tool_call_id"))
        else:
            problems += len(open_calls)
            open_calls = {c["id"] for c in message.get("tool_calls") or []}
    # Calls still open at the end are the ones being answered now: not a violation.
    return problems


def bad_start(messages: list[dict[str, Any]]) -> bool:
    """A history that starts with an assistant or tool message (Anthropic wants a user first)."""
    return bool(messages) and messages[0]["role"] in ("assistant", "tool")


def answerable(fact: Fact, texts: list[str]) -> bool:
    """The value and its label within ANSWERABLE_DISTANCE characters of each other in
    one of `texts` (a message or a summary), in either order and any case: a model
    asked for the label can find the value."""
    value, label = fact.value.lower(), fact.label.lower()
    for text in texts:
        low = text.lower()
        start = low.find(value)
        while start >= 0:
            lo = max(0, start - ANSWERABLE_DISTANCE - len(label))
            if label in low[lo : start + len(value) + ANSWERABLE_DISTANCE + len(label)]:
                return True
            start = low.find(value, start + 1)
    return False


def carried_tokens(summary: str) -> int:
    """Tokens of the carried-facts section of a summary, up to the next section
    (the artifact index follows it, within a budget of its own)."""
    match = _CARRIED_SECTION.search(summary or "")
    if not match:
        return 0
    section = summary[match.start() :]
    end = section.find("\n## ", 1)
    return count_tokens(section if end < 0 else section[:end])


@dataclass
class FactCheck:
    fact_id: str
    kind: str
    present: bool  # the value is in the context (verbatim message or summary)
    sentence: bool  # the whole planted sentence is
    verbatim: bool  # in a verbatim message, not only in a summary
    answerable: bool = False  # value and label close together in one message or summary
    spot: str = ""  # user, or where in a tool result: beginning, middle, end


@dataclass
class Replay:
    """One strategy replayed over one workload."""

    strategy: str
    workload: str
    context_tokens: list[int] = field(default_factory=list)  # per model call
    leading_parts: list[str] = field(default_factory=list)  # digest of system + summaries
    violations: int = 0  # tool calls separated from their results, over all calls
    calls_with_violation: int = 0
    calls_with_bad_start: int = 0
    facts: list[FactCheck] = field(default_factory=list)
    summary_shifts: int = 0  # times the window summary changed
    carried_tokens: list[int] = field(default_factory=list)  # per distinct summary seen
    summarizer: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    _last_summary: str | None = field(default=None, repr=False)

    def record_call(
        self,
        system_parts: list[str],
        messages: list[dict[str, Any]],
        *,
        message_token_counts: list[int] | None = None,
        leading: str | None = None,
    ) -> None:
        tokens = sum(count_tokens(p) for p in system_parts)
        for part in system_parts[1:]:
            if part and part != self._last_summary:
                self._last_summary = part
                self.carried_tokens.append(carried_tokens(part))
        if message_token_counts is None:
            tokens += sum(message_tokens(m) for m in messages)
        else:
            tokens += sum(message_token_counts)
        self.context_tokens.append(tokens)
        lead = leading if leading is not None else "\x1e".join(system_parts)
        self.leading_parts.append(hashlib.sha1(lead.encode()).hexdigest())
        bad = pairing_violations(messages)
        self.violations += bad
        self.calls_with_violation += bool(bad)
        self.calls_with_bad_start += bad_start(messages)

    def check_facts(
        self,
        facts: list[Fact],
        summaries: list[str],
        messages: list[dict[str, Any]],
    ) -> None:
        summary_text = "\n".join(s for s in summaries if s)
        contents = [m.get("content") or "" for m in messages]
        verbatim_text = "\n".join(contents)
        for fact in facts:
            in_verbatim = fact.value in verbatim_text
            self.facts.append(
                FactCheck(
                    fact.id,
                    fact.kind,
                    present=in_verbatim or fact.value in summary_text,
                    sentence=fact.sentence in verbatim_text or fact.sentence in summary_text,
                    verbatim=in_verbatim,
                    answerable=answerable(fact, [s for s in summaries if s] + contents),
                    spot=fact.spot,
                )
            )

    # --- figures ------------------------------------------------------------

    @property
    def model_calls(self) -> int:
        return len(self.context_tokens)

    @property
    def chat_input_tokens(self) -> int:
        return sum(self.context_tokens)

    @property
    def largest_context(self) -> int:
        return max(self.context_tokens, default=0)

    def summarizer_total(self, field_name: str, kind: str | None = None) -> int:
        return sum(
            values.get(field_name, 0)
            for name, values in self.summarizer.items()
            if kind is None or name == kind
        )

    @property
    def fact_retention(self) -> float:
        """Share of asked facts whose value is anywhere in the request ("present")."""
        return sum(f.present for f in self.facts) / len(self.facts) if self.facts else 1.0

    @property
    def answerable_share(self) -> float:
        """Share of asked facts whose value stands next to its label in one message."""
        return sum(f.answerable for f in self.facts) / len(self.facts) if self.facts else 1.0

    @property
    def max_carried_tokens(self) -> int:
        return max(self.carried_tokens, default=0)

    def unanswerable(self) -> dict[str, int]:
        """Unanswerable asked facts by kind and by spot, to see what is lost."""
        counts: dict[str, int] = {}
        for fact in self.facts:
            if not fact.answerable:
                for key in (f"kind:{fact.kind}", f"spot:{fact.spot}"):
                    counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    @property
    def sentence_retention(self) -> float:
        return sum(f.sentence for f in self.facts) / len(self.facts) if self.facts else 1.0

    @property
    def cache_stability(self) -> float:
        """Share of consecutive requests whose leading part is byte-identical."""
        parts = self.leading_parts
        if len(parts) < 2:
            return 1.0
        return sum(a == b for a, b in itertools.pairwise(parts)) / (len(parts) - 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "workload": self.workload,
            "model_calls": self.model_calls,
            "chat_input_tokens": self.chat_input_tokens,
            "largest_context": self.largest_context,
            "violations": self.violations,
            "calls_with_violation": self.calls_with_violation,
            "calls_with_bad_start": self.calls_with_bad_start,
            "facts_asked": len(self.facts),
            "fact_retention": round(self.fact_retention, 4),
            "facts_present": round(self.fact_retention, 4),
            "facts_answerable": round(self.answerable_share, 4),
            "unanswerable": self.unanswerable(),
            "max_carried_tokens": self.max_carried_tokens,
            "sentence_retention": round(self.sentence_retention, 4),
            "cache_stability": round(self.cache_stability, 4),
            "summary_shifts": self.summary_shifts,
            "summarizer": self.summarizer,
            "seconds": round(self.seconds, 2),
            **self.extra,
        }
