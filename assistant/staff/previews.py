"""What a staff action would change, in words, before it runs: the
confirmation pages name it, and a run that changed nothing says why.

Read-only: every function loads one conversation's window (two queries) and
a few counts, and changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from django.db.models import Count, Q
from django.db.models.functions import Length

from assistant.models import Conversation, Message
from assistant.settings.conf import compaction_config
from assistant.tool_results import compactable_count, restorable
from assistant.window import (
    WindowState,
    choose_split,
    load_window,
    split_parts,
    verbatim_budget,
)


@dataclass(frozen=True)
class Outcome:
    """What a staff action did: whether it changed the conversation, in words."""

    conversation_id: int
    changed: bool
    message: str


@dataclass(frozen=True)
class Preview:
    conversation_id: int
    context_tokens: int
    # What the action will change, one sentence each; empty when nothing would.
    changes: list[str] = field(default_factory=list)
    # Why nothing would change, when nothing would.
    nothing_because: str = ""


@dataclass(frozen=True)
class RestorePreview(Preview):
    messages: int = 0
    tokens_now: int = 0
    tokens_restored: int = 0
    dropped: int = 0
    next_request_tokens: int = 0


def _split_sentence(state: WindowState, start: int | None) -> tuple[str, str]:
    summarized = split_parts(state, start)[0] if start is not None else []
    if not summarized:
        return "", (
            f"the split cannot move: the {len(state.rows)} message(s) after it are all "
            "in the last user turn or within the messages kept verbatim"
        )
    first, last = summarized[0].pk, summarized[-1].pk
    return (
        f"messages #{first} to #{last} ({len(summarized)}) go into the window summary; "
        f"{len(state.rows) - len(summarized)} stay verbatim",
        "",
    )


def regenerate_preview(conversation: Conversation) -> Preview:
    state = load_window(conversation.pk)
    start = choose_split(state.rows, state.config, budget=verbatim_budget(state, state.config))
    change, reason = _split_sentence(state, start)
    return Preview(conversation.pk, state.context_tokens(), [change] if change else [], reason)


def emergency_preview(conversation: Conversation, level: int) -> Preview:
    config = compaction_config()
    state = load_window(conversation.pk, config)
    if level == 1:
        start = choose_split(state.rows, config, recent_fraction=config.EMERGENCY_RECENT_FRACTION)
    else:
        start = choose_split(state.rows, config, newest_step_only=True)
    changes = []
    tools = compactable_count(conversation, include_current_turn=True, min_chars=0)
    if tools:
        changes.append(f"{tools} tool result(s) compacted, whatever their size")
    summary, reason = _split_sentence(state, start)
    if summary:
        changes.append(summary + " (kept only if the context shrinks)")
    because = "" if changes else f"no tool result left to compact, and {reason}"
    return Preview(conversation.pk, state.context_tokens(), changes, because)


def compact_preview(conversation: Conversation) -> Preview:
    """Why a run of the post-exchange tool-result compaction may change nothing."""
    config = compaction_config()
    counts = _tool_counts(conversation, config.TOOL_RESULT_CHAR_THRESHOLD)
    state_tokens = load_window(conversation.pk, config).context_tokens()
    if not counts["total"]:
        because = "it has no tool result"
    elif not counts["open"]:
        because = f"its {counts['total']} tool result(s) are already compacted"
    elif not counts["large"]:
        because = (
            f"none of its {counts['open']} verbatim tool result(s) reaches "
            f"{config.TOOL_RESULT_CHAR_THRESHOLD} characters (TOOL_RESULT_CHAR_THRESHOLD)"
        )
    else:
        because = (
            f"its {counts['large']} large tool result(s) belong to the turn in progress "
            "or to tools whose policy is keep"
        )
    return Preview(conversation.pk, state_tokens, [], because)


def _tool_counts(conversation: Conversation, threshold: int) -> dict[str, int]:
    return (
        Message.objects.filter(conversation=conversation, role=Message.Role.TOOL)
        .annotate(length=Length("content"))
        .aggregate(
            total=Count("id"),
            open=Count("id", filter=Q(compaction="")),
            large=Count("id", filter=Q(compaction="", length__gte=threshold)),
        )
    )


def restore_preview(conversation: Conversation) -> RestorePreview:
    """What `restore_originals` will do, counted as it counts: the same
    messages (`restorable`), and the next request as the window will size it
    then (restoring makes every provider count stale, so our estimates scaled
    by the provider's last known ratio; only the messages after the window
    summary's split grow it: the summary still stands for the rest)."""
    state = load_window(conversation.pk)
    rows = list(
        restorable(conversation.pk).values_list("id", "token_estimate", "original_token_estimate")
    )
    sent = {row.pk for row in state.verbatim}
    now = sum(row[1] for row in rows)
    restored = sum(row[2] for row in rows)
    growth = sum(row[2] - row[1] for row in rows if row[0] in sent)
    dropped = (
        Message.objects.filter(conversation=conversation, original_dropped_at__isnull=False)
        .exclude(compaction="")
        .count()
    )
    after = math.ceil((state.estimated_tokens() + growth) * state.token_ratio)
    changes, because = [], ""
    if rows:
        changes.append(
            f"{len(rows):,} compacted message(s) shown verbatim again "
            f"({now:,} → {restored:,} tokens) and kept verbatim"
        )
    elif dropped:
        because = f"the originals of its {dropped:,} compacted message(s) were dropped by retention"
    else:
        because = "none of its messages is compacted"
    return RestorePreview(
        conversation.pk,
        state.context_tokens(),
        changes,
        because,
        messages=len(rows),
        tokens_now=now,
        tokens_restored=restored,
        dropped=dropped,
        next_request_tokens=after if rows else state.context_tokens(),
    )
