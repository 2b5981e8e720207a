"""Tool results after an exchange: consumed results compacted (truncated, or
summarized under a budget), repeated tool calls stubbed, originals restored on
request. Originals are never changed: the compacted form is stored beside them.

- compaction: strategy 1, run by the post-exchange pipeline and the pre-call
  plan's results batch (`compact_tool_results`, `restore_originals`);
- compacted: the compacted form of one result.

May import: history, models, providers, settings, summary, text, window.
See docs/architecture.rst.
"""

from assistant.tool_results.compacted import planned_texts, truncate_to_fit
from assistant.tool_results.compaction import (
    apply_plan_window,
    compact_old_blocks,
    compact_tool_results,
    compactable_count,
    plan_tool_results,
    prepare_tool_results,
    put_back_originals,
    restorable,
    restore_originals,
)

__all__ = [
    "apply_plan_window",
    "compact_old_blocks",
    "compact_tool_results",
    "compactable_count",
    "plan_tool_results",
    "planned_texts",
    "prepare_tool_results",
    "put_back_originals",
    "restorable",
    "restore_originals",
    "truncate_to_fit",
]
