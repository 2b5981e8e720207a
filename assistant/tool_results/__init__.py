"""TODO docstring."""

from assistant.tool_results.compaction import (
    apply_plan_window,
    compact_old_blocks,
    compact_tool_results,
    compactable_count,
    plan_tool_results,
    prepare_tool_results,
    restorable,
    restore_originals,
)

__all__ = [
    "apply_plan_window",
    "compact_old_blocks",
    "compact_tool_results",
    "compactable_count",
    "plan_tool_results",
    "prepare_tool_results",
    "restorable",
    "restore_originals",
]
