"""TODO docstring."""

from assistant.staff.operations import (
    CALLS_THE_MODEL,
    COMPACT_TOOL_RESULTS,
    EMERGENCY_1,
    EMERGENCY_2,
    FORK_CONTINUATION,
    LABELS,
    REGENERATE_SUMMARY,
    RESTORE_ORIGINALS,
    Outcome,
    can_continue,
    check_action,
    run_staff_action,
)
from assistant.staff.planning import RunPlan, plan_run
from assistant.staff.previews import Preview, emergency_preview, regenerate_preview, restore_preview

__all__ = [
    "CALLS_THE_MODEL",
    "COMPACT_TOOL_RESULTS",
    "EMERGENCY_1",
    "EMERGENCY_2",
    "FORK_CONTINUATION",
    "LABELS",
    "REGENERATE_SUMMARY",
    "RESTORE_ORIGINALS",
    "Outcome",
    "Preview",
    "RunPlan",
    "can_continue",
    "check_action",
    "emergency_preview",
    "plan_run",
    "regenerate_preview",
    "restore_preview",
    "run_staff_action",
]
