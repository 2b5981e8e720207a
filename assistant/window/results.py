"""Which consumed tool results to compact and which to stub, planned over
the window's rows with no query and no write: what the decision weighs
(assistant.window.decision) and what assistant.tool_results.compaction applies.

A result the policy keeps or a restore pinned is never planned; an older
copy of a call repeated MIN_CALLS_TO_DEDUP times is stubbed (when longer
than the stub); the rest at or over TOOL_RESULT_CHAR_THRESHOLD is compacted.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from assistant.models import Message, ref
from assistant.settings.conf import CompactionConfig
from assistant.text import KEEP_VERBATIM, estimate_tokens

STUB = "[Already retrieved earlier — omitted to reduce context]"


def stub_text(message_id: int) -> str:
    """The dedup stub of one result, naming the handle of its stored original."""
    return f"{STUB[:-1]} ({ref(message_id)})]"


def canonical_arguments(arguments: Any) -> str:
    """Arguments compared canonically: key order and whitespace do not matter."""
    return json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class CompactionPlan:
    """Which tool results to compact and which to stub, and an upper bound
    of the tokens that frees (prepared texts count at their real size)."""

    compact: list[Message] = field(default_factory=list)
    stub: list[Message] = field(default_factory=list)
    most_freed: int = 0

    def __bool__(self) -> bool:
        return bool(self.compact or self.stub)


def plan_compaction(
    rows: list[Message],
    config: CompactionConfig,
    *,
    keep_newest: int = 0,
    min_chars: int | None = None,
    kept: Collection[int] = (),
) -> CompactionPlan:
    """Plan over consumed tool results (`rows`, oldest first, content not
    needed): the newest `keep_newest` and those of `kept` (ids) stay
    verbatim, results the policy keeps or a restore pinned are left alone,
    older copies of identical calls are stubbed (when longer than the stub),
    and the rest at or over the size threshold are compacted."""
    threshold = config.TOOL_RESULT_CHAR_THRESHOLD if min_chars is None else min_chars
    eligible = [
        row
        for row in rows
        if config.policy_for(row.tool_name) != "keep" and KEEP_VERBATIM not in (row.metadata or {})
    ]
    protected = (
        {row.pk for row in eligible[len(eligible) - keep_newest :]} if keep_newest else set()
    ) | set(kept)
    plan = CompactionPlan()
    stub_ids = _older_duplicates(eligible, config) - protected
    ceiling = compacted_ceiling_tokens(config)
    for row in eligible:
        if row.pk in protected or row.compaction == Message.Compaction.DEDUPLICATED:
            continue
        if row.pk in stub_ids:
            stub_tokens = estimate_tokens(stub_text(row.pk))
            # Never for a result shorter than the stub (an empty one): it would grow.
            if row.token_estimate > stub_tokens + row.blocks_tokens:
                plan.stub.append(row)
                plan.most_freed += row.token_estimate - stub_tokens - row.blocks_tokens
        elif not row.compaction and row.original_token_estimate * config.CHARS_PER_TOKEN >= max(
            threshold, 1
        ):
            plan.compact.append(row)
            after = row.prepared_token_estimate or min(ceiling, row.token_estimate)
            plan.most_freed += max(row.token_estimate - after, 0)
    return plan


def compacted_ceiling_tokens(config: CompactionConfig) -> int:
    """The most a truncated result can take: head, marker and key details."""
    return estimate_tokens(
        "x" * (config.TRUNCATION_KEEP_CHARS + config.TRUNCATION_DETAILS_MAX_CHARS + 400)
    )


def consumed_boundary(answer_ids: Iterable[int]) -> int:
    """Tool results with an id below this one are consumed: the model has read
    them, since one of these assistant messages follows them (0: none yet)."""
    return max(answer_ids, default=0)


def consumed_tool_rows(rows: list[Message]) -> list[Message]:
    """The tool results of `rows` the model has read (`consumed_boundary`)."""
    boundary = consumed_boundary(row.pk for row in rows if row.role == Message.Role.ASSISTANT)
    return [
        row
        for row in rows
        if row.role == Message.Role.TOOL and row.pk < boundary and not row.pinned
    ]


def _older_duplicates(rows: list[Message], config: CompactionConfig) -> set[int]:
    """For each (tool, canonical arguments) called MIN_CALLS_TO_DEDUP times or
    more, every result but the newest."""
    groups: dict[tuple[str, str], list[Message]] = defaultdict(list)
    for row in rows:
        groups[(row.tool_name, canonical_arguments(row.tool_arguments))].append(row)
    return {
        row.pk
        for group in groups.values()
        if len(group) >= config.MIN_CALLS_TO_DEDUP
        for row in group[:-1]  # rows are in id order: the last is the newest
    }
