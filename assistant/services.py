"""The public service API (DESIGN section 5). Other code, the admin, tasks
and tests call these names; the work is done in the modules behind them."""

from assistant.emergency import (
    ContextTooLarge,
    call_with_overflow_recovery,
    compact_if_flagged,
    emergency_compact,
)
from assistant.exchanges import process_exchange
from assistant.forking import fork_continuation, fork_from_message, generate_parent_summary
from assistant.history import add_message, finish_exchange

__all__ = [
    "ContextTooLarge",
    "add_message",
    "call_with_overflow_recovery",
    "compact_if_flagged",
    "emergency_compact",
    "finish_exchange",
    "fork_continuation",
    "fork_from_message",
    "generate_parent_summary",
    "process_exchange",
]
