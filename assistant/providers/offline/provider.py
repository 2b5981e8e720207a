"""A deterministic summarizer with no network: the demo's provider and the fallback."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from assistant.providers.base import Provider, SummaryResult, Usage
from assistant.providers.summary_prompt import HEADINGS, SECTIONS
from assistant.settings.conf import compaction_config
from assistant.text import message_facts, plain_text

OFFLINE_MODEL = "offline-summarizer"
_MESSAGE_START = re.compile(r"^\[(user|assistant|tool|system)\b([^\]\n]*)\] ?", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_DECISION = re.compile(r"\b(decided?|decision|chose|choose|will|agreed?|use|going with)\b", re.I)
_CONSTRAINT = re.compile(
    r"\b(must|never|don'?t|do not|only|always|without|at most|at least|no more than|avoid)\b",
    re.I,
)
_SECTION_RE = re.compile(r"^## (.+?)\s*$", re.M)
_ITEM_CHARS = 200
_MAX_ITEMS = {"Goal": 2, "Constraints": 6, "Progress": 10, "Key decisions": 8, "Next steps": 5}
# The five prose sections get at most this share of the cap; Critical context gets the rest.
_PROSE_SHARE = 0.45
_NEWEST_TURNS = 6


@dataclass(frozen=True)
class _Message:
    role: str
    text: str
    tool: str = ""


def parse_transcript(transcript: str) -> list[_Message]:
    """Back from render_transcript's `[role ...] text` lines to (role, text, tool name),
    the text without markup or our own compaction markers."""
    starts = list(_MESSAGE_START.finditer(transcript))
    if not starts:
        text = plain_text(transcript).strip()
        return [_Message("user", text)] if text else []
    messages = []
    for match, following in zip(starts, [*starts[1:], None], strict=True):
        end = following.start() if following else len(transcript)
        role, detail = match.group(1), match.group(2).strip()
        tool = detail.split("#", 1)[0] if role == "tool" else ""
        text = plain_text(transcript[match.end() : end]).strip()
        messages.append(_Message(role, text, tool))
    return messages


def _clip(text: str, limit: int = _ITEM_CHARS) -> str:
    """The text on one line, cut at a word boundary when longer than `limit`."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - 1)
    cut = cut if cut > limit // 2 else limit - 1
    return text[:cut].rstrip(",;:-") + "…"


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if len(s.strip()) > 3]


def _previous_sections(summary: str | None) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {name: [] for name in SECTIONS}
    if not summary:
        return sections
    headings = list(_SECTION_RE.finditer(summary))
    if not headings:
        # A summary in another shape (hand-written, an older version): keep
        # every line of it rather than lose it.
        sections["Progress"] = [line.strip() for line in summary.splitlines() if line.strip()]
        return sections
    for match, following in zip(headings, [*headings[1:], None], strict=True):
        name = next((n for n in SECTIONS if n.lower() == match.group(1).lower()), None)
        if name is None:
            continue  # a section of another writer (the carried facts): it keeps its own
        body = summary[match.end() : following.start() if following else len(summary)]
        items = [line.strip().removeprefix("- ").strip() for line in body.splitlines()]
        sections[name] = [i for i in items if i and i != "none"]
    return sections


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _tool_use(messages: list[_Message]) -> list[str]:
    """One short sentence: which tools ran, and how often."""
    counts = Counter(m.tool or "a tool" for m in messages if m.role == "tool")
    if not counts:
        return []
    parts = [
        f"{name} {'once' if n == 1 else 'twice' if n == 2 else f'{n} times'}"
        for name, n in counts.items()
    ]
    return [f"Called {', '.join(parts)}."]


def _prose_sections(
    messages: list[_Message], previous: dict[str, list[str]]
) -> dict[str, list[str]]:
    users = [m for m in messages if m.role == "user" and m.text]
    assistants = [m for m in messages if m.role == "assistant" and m.text]
    goal = previous["Goal"] or [
        _clip(" ".join(_sentences(m.text)[:2]) or m.text) for m in users[:1]
    ]
    constraints = previous["Constraints"] + [
        _clip(s) for m in users for s in _sentences(m.text) if _CONSTRAINT.search(s)
    ]
    progress = (
        previous["Progress"]
        + [_clip(_sentences(m.text)[0] if _sentences(m.text) else m.text) for m in assistants]
        + _tool_use(messages)
    )
    decisions = previous["Key decisions"] + [
        _clip(s) for m in users + assistants for s in _sentences(m.text) if _DECISION.search(s)
    ]
    questions = [
        _clip(s)
        for m in messages[-_NEWEST_TURNS:]
        if m.role in ("user", "assistant")
        for s in _sentences(m.text)
        if s.endswith("?")
    ]
    sections = {
        "Goal": goal,
        "Constraints": constraints,
        "Progress": progress,
        "Key decisions": decisions,
        "Next steps": questions or previous["Next steps"],
    }
    # keep the first items of Goal and Constraints, the newest of the rest
    return {
        name: (
            items[: _MAX_ITEMS[name]]
            if name in ("Goal", "Constraints")
            else items[-_MAX_ITEMS[name] :]
        )
        for name, items in ((n, _dedupe(i)) for n, i in sections.items())
    }


def _render(sections: dict[str, list[str]]) -> str:
    parts = []
    for name, heading in zip(SECTIONS, HEADINGS, strict=True):
        items = sections.get(name) or ["none"]
        parts.append(heading + "\n" + "\n".join(f"- {item}" for item in items))
    return "\n\n".join(parts)


def _ranked_statements(facts: list[tuple[_Message, list[str]]], carried: list[str]) -> list[str]:
    """Fact statements in the order they are given room when the cap bites: the user's
    first, then those carried forward from the previous summary, then the rest newest
    first."""
    from_user: list[str] = []
    from_others: list[str] = []
    for message, statements in reversed(facts):
        (from_user if message.role == "user" else from_others).extend(statements)
    return _dedupe([*from_user, *carried, *from_others])


def offline_summary(
    transcript: str, previous_summary: str | None = None, max_chars: int = 6000
) -> str:
    """A summary a person can read: short sentences per section, whole words, and a
    Critical context made of statements that say what each value is."""
    messages = parse_transcript(transcript)
    previous = _previous_sections(previous_summary)
    prose = _prose_sections(messages, previous)
    prose_budget = int(max_chars * _PROSE_SHARE)
    # Over budget: drop the oldest items of the longest section until it fits.
    while len(_render(prose)) > prose_budget and any(len(v) > 1 for v in prose.values()):
        longest = max(prose, key=lambda n: len(prose[n]))
        prose[longest] = (
            prose[longest][1:] if longest not in ("Goal", "Constraints") else prose[longest][:-1]
        )

    # Within the budget, keep the highest-ranked statements, then list them in the order
    # they appeared (carried-forward ones first) so the section reads naturally.
    facts = [(m, [_clip(s.text) for s in message_facts(m.text, m.role)]) for m in messages]
    ranked = _ranked_statements(facts, previous["Critical context"])
    budget = max_chars - (len(_render({**prose, "Critical context": []})) - len("- none"))
    kept: set[str] = set()
    for item in ranked:
        cost = len(item) + 3  # "- " and newline
        if cost <= budget:
            kept.add(item)
            budget -= cost
    order = _dedupe([*previous["Critical context"], *(s for _, found in facts for s in found)])
    text = _render({**prose, "Critical context": [i for i in order if i in kept]})
    if len(text) > max_chars:  # a cap smaller than the headings: end on a whole line
        text = text[: text.rfind("\n", 0, max_chars)].rstrip()
    return text


class OfflineProvider(Provider):
    name = "offline"
    model = OFFLINE_MODEL
    chat_model = OFFLINE_MODEL
    max_input_tokens = 1_000_000

    def _usage(self, prompt: str, output: str) -> Usage:
        per_token = compaction_config().CHARS_PER_TOKEN
        return Usage(
            input_tokens=math.ceil(len(prompt) / per_token),
            output_tokens=math.ceil(len(output) / per_token),
        )

    def summarize(
        self,
        transcript: str,
        *,
        previous_summary: str | None = None,
        instructions: str | None = None,
    ) -> SummaryResult:
        max_chars = compaction_config().OFFLINE_SUMMARY_MAX_CHARS
        text = offline_summary(transcript, previous_summary, max_chars)
        usage = self._usage(transcript + (previous_summary or ""), text)
        return SummaryResult(text=text, usage=usage, model=self.model, provider=self.name)
