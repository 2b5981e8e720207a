"""What a chat's /status command shows: how full the context is, the
summaries it carries, and the latest compaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from assistant.models import CompactionEvent, Conversation
from assistant.window.limits import limits_for
from assistant.window.loading import saved_window


@dataclass(frozen=True)
class LastCompaction:
    kind: str
    label: str
    tokens_before: int
    tokens_after: int
    at: datetime


@dataclass(frozen=True)
class ContextStatus:
    tokens: int  # the next request's context (as the pre-call hook counts it)
    window: int  # the chat model's context window
    trigger: int  # CONTEXT_TOKEN_THRESHOLD
    model: str
    has_window_summary: bool
    has_parent_summary: bool
    summarized_through_message_id: int | None
    compactions: int
    last_compaction: LastCompaction | None

    @property
    def share_of_window(self) -> float:
        return self.tokens / self.window

    @property
    def summaries(self) -> int:
        return int(self.has_window_summary) + int(self.has_parent_summary)


def context_status(conversation: Conversation) -> ContextStatus:
    """Three queries: the window, the count of events and the latest one."""
    state = saved_window(conversation)
    limits = limits_for(*state.answered_by)
    events = CompactionEvent.objects.compactions().filter(conversation_id=conversation.pk)
    last = events.order_by("-created_at", "-id").first()
    return ContextStatus(
        tokens=state.context_tokens(),
        window=limits.window,
        trigger=limits.trigger,
        model=limits.model,
        has_window_summary=state.summary is not None,
        has_parent_summary=state.parent_summary is not None,
        summarized_through_message_id=state.through_id,
        compactions=events.count(),
        last_compaction=LastCompaction(
            last.kind,
            last.get_kind_display(),
            last.tokens_before,
            last.tokens_after,
            last.created_at,
        )
        if last
        else None,
    )
