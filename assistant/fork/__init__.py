"""Fork and branch: a new conversation that continues from a parent's summary
(`fork_continuation`) or branches at one of its messages (`fork_from_message`);
the parent's summary is made off the chat path when asked to be.

May import: history, models, settings, summary, text, window.
See docs/architecture.rst.
"""

from assistant.fork.branching import (
    can_fork,
    fork_continuation,
    fork_from_message,
    generate_parent_summary,
)

__all__ = ["can_fork", "fork_continuation", "fork_from_message", "generate_parent_summary"]
