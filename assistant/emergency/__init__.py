"""TODO docstring."""

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
