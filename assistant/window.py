"""The verbatim window: the messages after the cached split, how large the
context is, when it must shift, and where a new split may fall.

Everything here works on one conversation row and the messages after its
cutoff, so it costs the same two queries however long the conversation is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from assistant.conf import CompactionConfig, compaction_config
from assistant.models import Conversation, Message, MetadataKeys
from assistant.tokens import estimate_tokens


@dataclass
class WindowState:
    conversation_id: int
    system_prompt: str
    metadata: dict[str, Any]
    # The messages after the cutoff, oldest first, as the model sees them.
    rows: list[Message] = field(default_factory=list)

    @property
    def summary(self) -> str | None:
        return self.metadata.get(MetadataKeys.COMPACTION_SUMMARY) or None

    @property
    def through_id(self) -> int | None:
        value = self.metadata.get(MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID)
        return int(value) if value is not None else None

    @property
    def parent_summary(self) -> str | None:
        return self.metadata.get(MetadataKeys.PARENT_CONVERSATION_SUMMARY) or None

    @property
    def fixed_tokens(self) -> int:
        """System prompt and summaries: the leading part of every request."""
        return (
            estimate_tokens(self.system_prompt)
            + estimate_tokens(self.parent_summary or "")
            + estimate_tokens(self.summary or "")
        )

    @property
    def context_epoch_id(self) -> int:
        """Provider counts reported at or before this message id describe a
        context that compaction has changed since: they are stale."""
        return int(self.metadata.get(MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID) or 0)

    def context_tokens(self) -> int:
        """The provider's latest count of the prompt plus estimates of what was
        added after it; the heuristic alone when no fresh count exists."""
        for index in range(len(self.rows) - 1, -1, -1):
            row = self.rows[index]
            if row.prompt_tokens is not None and row.pk > self.context_epoch_id:
                # That prompt produced this message: count it and what follows.
                return row.prompt_tokens + sum(r.token_estimate for r in self.rows[index:])
        return self.fixed_tokens + sum(row.token_estimate for row in self.rows)


def load_window(conversation_id: int, through_id: int | None = None) -> WindowState:
    """Read the conversation's metadata and its window fresh from the
    database (never from a possibly stale in-memory object): two queries."""
    values = Conversation.objects.values("system_prompt", "metadata").get(pk=conversation_id)
    state = WindowState(conversation_id, values["system_prompt"], values["metadata"] or {})
    cutoff = state.through_id if through_id is None else through_id
    rows = Message.objects.filter(conversation_id=conversation_id)
    if cutoff is not None:
        rows = rows.filter(id__gt=cutoff)
    state.rows = list(rows.model_view())
    return state


def should_shift(state: WindowState, config: CompactionConfig, share: float = 1.0) -> bool:
    """True once the context reaches `share` of a trigger (tokens or count)."""
    return (
        state.context_tokens() >= share * config.CONTEXT_TOKEN_THRESHOLD
        or len(state.rows) >= share * config.MAX_MESSAGES_BEFORE_SUMMARY
    )


def anticipated_keep(state: WindowState, config: CompactionConfig) -> int:
    """How many messages to keep when pre-building before the trigger, so
    that by the time the trigger fires (and the pre-built summary is
    adopted) about RECENT_FRACTION of the window is verbatim, as a shift at
    the trigger would leave it."""
    rows = len(state.rows)
    progress = max(
        rows / config.MAX_MESSAGES_BEFORE_SUMMARY,
        state.context_tokens() / config.CONTEXT_TOKEN_THRESHOLD,
    )
    projected = max(rows, math.ceil(rows / progress)) if progress > 0 else rows
    keep_at_trigger = max(config.MIN_RECENT_MESSAGES, math.ceil(projected * config.RECENT_FRACTION))
    return max(keep_at_trigger - (projected - rows), 0)


def choose_split(
    rows: list[Message],
    config: CompactionConfig | None = None,
    *,
    recent_fraction: float | None = None,
    keep_last: int | None = None,
) -> int | None:
    """The index of the first message to keep verbatim, or None when the
    split cannot move. The kept part always starts at a user message, so no
    assistant tool call is separated from its results and the history the
    model sees starts with a user turn; the last user turn is always kept."""
    config = config or compaction_config()
    user_indexes = [i for i, row in enumerate(rows) if row.role == Message.Role.USER]
    if not user_indexes:
        return None
    last_user = user_indexes[-1]
    if keep_last is not None:
        wanted = max(len(rows) - keep_last, 0)
    else:
        fraction = config.RECENT_FRACTION if recent_fraction is None else recent_fraction
        keep = max(config.MIN_RECENT_MESSAGES, math.ceil(len(rows) * fraction))
        wanted = max(len(rows) - keep, 0)
    # Never keep more than MAX_RECENT_TOKENS verbatim, short of the last user turn.
    suffix = _suffix_tokens(rows)
    while wanted < last_user and suffix[wanted] > config.MAX_RECENT_TOKENS:
        wanted += 1
    start = _snap_to_user_turn(wanted, user_indexes, suffix, config.MAX_RECENT_TOKENS)
    return start if start > 0 else None


def _suffix_tokens(rows: list[Message]) -> list[int]:
    totals = [0] * (len(rows) + 1)
    for index in range(len(rows) - 1, -1, -1):
        totals[index] = totals[index + 1] + rows[index].token_estimate
    return totals


def _snap_to_user_turn(wanted: int, user_indexes: list[int], suffix: list[int], cap: int) -> int:
    """Move the split onto the start of a user turn: back (keeping more) when
    that stays within the token cap, else forward (never past the last turn)."""
    before = [i for i in user_indexes if i <= wanted]
    after = [i for i in user_indexes if i >= wanted]
    if before and (before[-1] == wanted or suffix[before[-1]] <= cap or not after):
        return before[-1]
    return after[0]
