"""Fork and branch: a new conversation that continues from a parent's summary
(`fork_continuation`) or branches at one of its messages (`fork_from_message`);
the parent's summary is made off the chat path when asked to be; sessions
(`new_session`, `resume_session`, `list_sessions`) and the tree they and the forks
make (`conversation_tree`, `set_active_branch`).

May import: history, models, settings, summary, text, window.
See docs/architecture.rst.
"""

from assistant.fork.branching import (
    can_fork,
    fork_continuation,
    fork_from_message,
    generate_parent_summary,
)
from assistant.fork.sessions import (
    Resumed,
    SessionInfo,
    TreeNode,
    conversation_tree,
    list_sessions,
    new_session,
    resume_session,
    set_active_branch,
)

__all__ = [
    "Resumed",
    "SessionInfo",
    "TreeNode",
    "can_fork",
    "conversation_tree",
    "fork_continuation",
    "fork_from_message",
    "generate_parent_summary",
    "list_sessions",
    "new_session",
    "resume_session",
    "set_active_branch",
]
