"""Facts carried forward from summary to summary, as statements that say what each value is.

A summarizer may drop a fact at any update. After each summary, the fact statements of
the newly summarized messages (assistant.text.fact_statements) and those the previous summary
held are checked against the new text: any the summarizer did not keep verbatim is
appended under CARRIED_HEADING, newest first in priority, within CARRIED_FACTS_MAX_TOKENS.
A model asked "what was the webhook secret for the autumn newsletter?" can answer from
"The webhook secret for the autumn newsletter is marmalade-sky.", not from a bare value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from assistant.text import (
    MAX_STATEMENT_CHARS,
    OUR_MARKERS,
    Statement,
    estimate_tokens,
    message_facts,
    statements,
)

CARRIED_HEADING = "## Facts carried forward"
_CONTENT_WORD = re.compile(r"[a-z]{4,}")


def without_markers(text: str) -> str:
    """`text` without our compaction markers ("[Tool result compacted: … 18,017
    characters …]"): what the summarizer reads and writes is content only."""
    return OUR_MARKERS.sub("", text)


def summary_body(summary: str | None) -> str:
    """The summarizer's text, without the carried section."""
    text = (summary or "").split(f"\n{CARRIED_HEADING}", 1)[0]
    return "" if text.startswith(CARRIED_HEADING) else text.rstrip()


def carried_facts(summary: str | None) -> list[str]:
    """The statements under the carried section of `summary`."""
    if not summary or CARRIED_HEADING not in summary:
        return []
    tail = summary.split(CARRIED_HEADING, 1)[1].split("\n## ", 1)[0]  # up to the next section
    return [line.strip().removeprefix("- ").strip() for line in tail.splitlines() if line.strip()]


def with_carried_facts(
    body: str,
    messages: Sequence[dict[str, Any]],
    previous: str | None,
    max_tokens: int,
) -> str:
    """`body` (a new summary of `messages`, merged into `previous`) followed by the
    statements it did not keep verbatim, within `max_tokens`."""
    kept = _select(_ranked(messages, previous), body, max_tokens - _section_cost())
    if not kept:
        return body
    lines = "\n".join(f"- {statement}" for statement in reversed(kept))  # oldest first
    return f"{body}\n\n{CARRIED_HEADING}\n{lines}"


def with_facts_within(summary: str, max_tokens: int) -> str:
    """`summary` (no artifact index) with only the newest of its carried statements that
    fit `max_tokens` (how `with_carried_facts` would have cut them with less room)."""
    facts = carried_facts(summary)
    if not facts:
        return summary
    body = summary_body(summary)
    kept: list[str] = []
    used = _section_cost()
    for fact in reversed(facts):  # the text lists them oldest first
        cost = estimate_tokens(fact) + 1
        if used + cost > max_tokens:
            break
        kept.append(fact)
        used += cost
    if not kept:
        return body
    lines = "\n".join(f"- {fact}" for fact in reversed(kept))
    return f"{body}\n\n{CARRIED_HEADING}\n{lines}"


def _section_cost() -> int:
    """The carried section's heading and the blank line before it, in tokens."""
    return estimate_tokens(f"\n\n{CARRIED_HEADING}\n")


def _ranked(messages: Sequence[dict[str, Any]], previous: str | None) -> list[Statement]:
    """Candidates in the order they get room: those of the newest messages first (most
    specific first within a message), then those the previous summary held in its text,
    then those it carried."""
    ranked: list[Statement] = []
    for message in reversed(messages):
        found = message_facts(message.get("content") or "", message.get("role") or "user")
        ranked.extend(sorted(found, key=lambda s: (-s.score, -s.position)))
    ranked.extend(reversed(statements(summary_body(previous))))
    for carried in reversed(carried_facts(previous)):
        ranked.extend(statements(carried) or [Statement(carried, 0, 0, 0)])
    return ranked


def _select(ranked: list[Statement], body: str, max_tokens: int) -> list[str]:
    kept: list[str] = []
    seen: set[str] = set()
    used = 0
    body_lines = body.splitlines()
    for statement in ranked:
        text = statement.text
        if text in seen or len(text) > MAX_STATEMENT_CHARS or _stated_in(statement, body_lines):
            continue
        seen.add(text)
        cost = estimate_tokens(text) + 1
        if used + cost > max_tokens:
            break  # everything after is older: the oldest are the ones dropped
        kept.append(text)
        used += cost
    return kept


def _stated_in(statement: Statement, body_lines: list[str]) -> bool:
    """The summary already says it: the statement verbatim, or each value on a line that
    shares most of the words around it (a paraphrase keeps the label; another fact with
    the same value does not count)."""
    if any(statement.text in line for line in body_lines):
        return True
    if not statement.values:
        return False
    words = _label_words(statement.text, statement.values)
    for value in statement.values:
        if not any(
            value in line and len(words & _label_words(line, (value,))) * 2 >= len(words)
            for line in body_lines
        ):
            return False
    return True


def _label_words(text: str, values: Sequence[str]) -> set[str]:
    """The words of `text` besides `values` (an email's name is no label)."""
    text = text.lower()
    for value in values:
        text = text.replace(value.lower(), " ")
    return set(_CONTENT_WORD.findall(text))
