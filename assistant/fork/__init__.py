"""TODO docstring."""

from assistant.fork.branching import (
    can_fork,
    fork_continuation,
    fork_from_message,
    generate_parent_summary,
)

__all__ = ["can_fork", "fork_continuation", "fork_from_message", "generate_parent_summary"]
