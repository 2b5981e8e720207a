"""The end of an exchange: stamp it and enqueue the post-exchange work
(assistant.post_exchange.pipeline) once the surrounding transaction commits."""

from __future__ import annotations

from django.utils import timezone

from assistant.history import POST_EXCHANGE_TASK, deleted_error, enqueue_on_commit, live
from assistant.models import Conversation
from assistant.window import require_saved


def finish_exchange(conversation: Conversation) -> None:
    """Mark an exchange complete and enqueue the post-exchange work once the
    surrounding transaction commits (nothing is enqueued on rollback). A
    deleted or purged conversation is refused (`conversation_deleted`): no
    stamp, no task."""
    require_saved(conversation)
    if not live(conversation.pk).update(last_exchange_at=timezone.now()):
        raise deleted_error(conversation.pk)
    enqueue_on_commit(POST_EXCHANGE_TASK, conversation.pk)
