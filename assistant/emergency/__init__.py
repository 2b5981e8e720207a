"""Emergency and overflow: when a request cannot fit the model's window, or the
provider says it overflowed, the emergency levels shrink the context and the
call is retried once.

- levels: the levels, in order, and what each changes (`emergency_compact`);
- retry: the model call wrapped so an overflow error runs a level and retries
  (`call_with_overflow_recovery`, async too). Which errors are overflows is each
  provider's to say (assistant.providers).

May import: history, models, providers, settings, summary, text, tool_results, window.
See docs/architecture.rst.
"""

from assistant.emergency.levels import (
    ContextTooLarge,
    apply_emergency_level,
    compact_if_flagged,
    emergency_compact,
)
from assistant.emergency.retry import acall_with_overflow_recovery, call_with_overflow_recovery

__all__ = [
    "ContextTooLarge",
    "acall_with_overflow_recovery",
    "apply_emergency_level",
    "call_with_overflow_recovery",
    "compact_if_flagged",
    "emergency_compact",
]
