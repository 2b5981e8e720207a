"""The public service API (DESIGN section 5). Other code, the admin, tasks
and tests call these names; the work is done in the modules behind them."""

from assistant.compaction import compact_tool_results, restore_originals
from assistant.context import Context, IncompleteToolCall, build_context, context_tokens
from assistant.emergency import (
    ContextTooLarge,
    call_with_overflow_recovery,
    compact_if_flagged,
    emergency_compact,
)
from assistant.exchanges import process_exchange
from assistant.forking import fork_continuation, fork_from_message, generate_parent_summary
from assistant.history import add_message, finish_exchange
from assistant.llm.overflow import context_overflow
from assistant.summaries import (
    compaction_cutoff_id,
    ensure_context_summary,
    prebuild_window_summary,
    regenerate_window_summary,
    summarize_messages,
)

__all__ = [
    "Context",
    "ContextTooLarge",
    "IncompleteToolCall",
    "add_message",
    "build_context",
    "call_with_overflow_recovery",
    "compact_if_flagged",
    "compact_tool_results",
    "compaction_cutoff_id",
    "context_overflow",
    "context_tokens",
    "emergency_compact",
    "ensure_context_summary",
    "finish_exchange",
    "fork_continuation",
    "fork_from_message",
    "generate_parent_summary",
    "prebuild_window_summary",
    "process_exchange",
    "regenerate_window_summary",
    "restore_originals",
    "summarize_messages",
]
