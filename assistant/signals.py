"""Django signals a host connects to, to tell its users what happened to
their context (a client notice like "Compacted (157k -> 9.1k)"). Both are
sent once the transaction that recorded the compaction commits (at once
outside a transaction; never when it rolls back), by
`assistant.history.events.record_compaction`, the one place compaction events are
recorded. Receivers get keyword arguments only, with `sender=Conversation`.
"""

from __future__ import annotations

from django.dispatch import Signal

# context_compacted(sender, conversation_id, event_id, kind, tokens_before,
#   tokens_after, window, share_of_window, acting_user_id): any compaction
#   (kind is a CompactionEvent.Kind value); share_of_window is tokens_after
#   over the context window of the conversation's model (that of its newest
#   answer; 0.06 for 6%). What tokens_before and tokens_after measure:
#   assistant.history.figures.measures (docs/admin.rst, "Token figures").
context_compacted = Signal()

# emergency_compaction(sender, conversation_id, event_id, level, tokens_before,
#   tokens_after, acting_user_id): an emergency level ran (1 or 2), sent
#   after context_compacted for the same event.
emergency_compaction = Signal()
