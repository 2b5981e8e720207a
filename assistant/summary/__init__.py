"""TODO docstring."""

from assistant.summary.backoff import failure_blocks
from assistant.summary.generate import summarize_messages
from assistant.summary.guidance import guided_by
from assistant.summary.pending import adoption, adopts
from assistant.summary.prebuild import prebuild_window_summary
from assistant.summary.shift import (
    adopt_pending_summary,
    compaction_cutoff_id,
    regenerate_window_summary,
    shift_window,
)
from assistant.summary.versions import (
    compaction_diff,
    correct_summary,
    current_version,
    revert_summary,
    review_summary,
)
from assistant.summary.worker import (
    ask_after_shift,
    leave_to_worker,
    note_worker,
    serve_prebuild_request,
)

__all__ = [
    "adopt_pending_summary",
    "adoption",
    "adopts",
    "ask_after_shift",
    "compaction_cutoff_id",
    "compaction_diff",
    "correct_summary",
    "current_version",
    "failure_blocks",
    "guided_by",
    "leave_to_worker",
    "note_worker",
    "prebuild_window_summary",
    "regenerate_window_summary",
    "revert_summary",
    "review_summary",
    "serve_prebuild_request",
    "shift_window",
    "summarize_messages",
]
