"""What staff run by hand: the admin's actions and their worker runs, each a call
into the package that owns the change, with a preview in words before it runs.

- operations: the actions by name (`run_staff_action`, `check_action`);
- previews: what an action would change, before it runs;
- planning: what a compaction run would do (`plan_run`, the dry run);
- cut: summarize before or after a message (`summarize_before`, `summarize_after`,
  with their previews);
- undo: take back the last compaction (`undo_compaction`, with its preview).

May import: emergency, fork, history, models, ops, providers, settings, summary, text,
tool_results, window.
See docs/architecture.rst.
"""

from assistant.staff.cut import (
    CutPreview,
    summarize_after,
    summarize_after_preview,
    summarize_before,
    summarize_before_preview,
)
from assistant.staff.operations import (
    CALLS_THE_MODEL,
    COMPACT_TOOL_RESULTS,
    EMERGENCY_1,
    EMERGENCY_2,
    FORK_CONTINUATION,
    FORK_FROM_MESSAGE,
    LABELS,
    REGENERATE_SUMMARY,
    RESTORE_ORIGINALS,
    SUMMARIZE_AFTER,
    SUMMARIZE_BEFORE,
    UNDO_COMPACTION,
    Outcome,
    can_continue,
    check_action,
    run_staff_action,
)
from assistant.staff.planning import RunPlan, plan_run
from assistant.staff.previews import Preview, emergency_preview, regenerate_preview, restore_preview
from assistant.staff.undo import (
    UNDO_MARGIN,
    UndoPreview,
    undo_compaction,
    undo_compaction_preview,
    undo_words,
)

__all__ = [
    "CALLS_THE_MODEL",
    "COMPACT_TOOL_RESULTS",
    "EMERGENCY_1",
    "EMERGENCY_2",
    "FORK_CONTINUATION",
    "FORK_FROM_MESSAGE",
    "LABELS",
    "REGENERATE_SUMMARY",
    "RESTORE_ORIGINALS",
    "SUMMARIZE_AFTER",
    "SUMMARIZE_BEFORE",
    "UNDO_COMPACTION",
    "UNDO_MARGIN",
    "CutPreview",
    "Outcome",
    "Preview",
    "RunPlan",
    "UndoPreview",
    "can_continue",
    "check_action",
    "emergency_preview",
    "plan_run",
    "regenerate_preview",
    "restore_preview",
    "run_staff_action",
    "summarize_after",
    "summarize_after_preview",
    "summarize_before",
    "summarize_before_preview",
    "undo_compaction",
    "undo_compaction_preview",
    "undo_words",
]
