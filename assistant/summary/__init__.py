"""The window summary: how it is made, pre-built and adopted.

- shift: moving the split, summarizing the newly old messages or adopting a
  pre-built summary (`shift_window`, `regenerate_window_summary`);
- generate: summarizing messages, in chunks, through the conversation's own
  cached request where the provider reads a prompt cache;
- prebuild, worker, pending: the next summary built ahead on the worker, kept
  as pending and adopted at the next shift;
- leases: one summary generation per conversation at a time, with heartbeat;
- backoff: a failed summary's retries; guidance: what every summary is told
  (the user's language, the host's instructions);
- compact_tool: the model's own `compact` call, answered with a shift;
- facts: fact statements carried forward from summary to summary;
- versions: every summary kept, corrected or reverted by staff;
- segment: the messages after a chosen one summarized in place (`summarize_after`).
The prompt every summarizer sends is beside the clients that send it
(assistant.providers.summary_prompt).

May import: history, metadata_keys, models, ops, providers, recall, settings, text,
window.
See docs/architecture.rst.
"""

from assistant.summary.backoff import failure_blocks
from assistant.summary.compact_tool import run_compact
from assistant.summary.generate import summarize_messages
from assistant.summary.guidance import guided_by
from assistant.summary.pending import adoption, adopts
from assistant.summary.prebuild import prebuild_window_summary
from assistant.summary.segment import segment_after, summarize_segment
from assistant.summary.shift import (
    adopt_pending_summary,
    compaction_cutoff_id,
    cut_start,
    regenerate_window_summary,
    shift_window,
)
from assistant.summary.versions import (
    compaction_diff,
    correct_summary,
    current_version,
    record_version,
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
    "cut_start",
    "failure_blocks",
    "guided_by",
    "leave_to_worker",
    "note_worker",
    "prebuild_window_summary",
    "record_version",
    "regenerate_window_summary",
    "revert_summary",
    "review_summary",
    "run_compact",
    "segment_after",
    "serve_prebuild_request",
    "shift_window",
    "summarize_messages",
    "summarize_segment",
]
