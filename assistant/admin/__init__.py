"""The Django admin: conversations with what the model sees, and the staff
actions that compact, fork, branch, delete and restore them.

Actions are thin: each calls one service and reports what it did, and every
one writes an admin history entry (`LogEntry`). Actions declare the
permission they need (`fork`, `compact`, or `delete`); Django hides the ones
a user lacks, and posting one anyway is refused with 403.
"""

from assistant.admin.conversations import ConversationAdmin
from assistant.admin.readonly import CompactionEventAdmin, MessageAdmin
from assistant.admin.summaries import SummaryVersionAdmin

__all__ = ["CompactionEventAdmin", "ConversationAdmin", "MessageAdmin", "SummaryVersionAdmin"]
