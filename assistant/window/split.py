"""Where the window splits: the messages a shift summarizes and those that
stay verbatim (at a turn boundary, within the verbatim budget), and when the
triggers say a shift is due. Pure: reads a WindowState, writes nothing."""

from __future__ import annotations

import math

from assistant.models import Message
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.text import MAX_TOKEN_RATIO
from assistant.window.loading import WindowState


def should_shift(
    state: WindowState, config: CompactionConfig, share: float = 1.0, *, count: bool = True
) -> bool:
    """True once the context reaches `share` of the token trigger, or of the
    message-count trigger when `count` is on. Compared as shares: a `share` taken
    from a size (`x / trigger`) holds for that size, where `share * trigger` may
    round above it."""
    return state.context_tokens() / config.CONTEXT_TOKEN_THRESHOLD >= share or (
        count and len(state.rows) / config.MAX_MESSAGES_BEFORE_SUMMARY >= share
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
    newest_step_only: bool = False,
    budget: int | None = None,
) -> int | None:
    """The index of the first message to keep verbatim, or None when the
    split cannot move. The kept part starts at a user message, or, when the
    last turn alone is over MAX_RECENT_TOKENS, at a step boundary inside that
    turn (its user message is then sent as the anchor), so no tool call is
    separated from its results. The newest step is always kept. At most
    `budget` tokens (default MAX_RECENT_TOKENS) stay verbatim, short of it."""
    config = config or compaction_config()  # staff previews pass none: the settings now
    cap = config.MAX_RECENT_TOKENS if budget is None else budget
    boundaries = split_boundaries(rows)
    if not boundaries:
        return None
    if newest_step_only:
        start = boundaries[-1]
        return start if start > 0 else None
    if keep_last is not None:
        wanted = max(len(rows) - keep_last, 0)
    else:
        fraction = config.RECENT_FRACTION if recent_fraction is None else recent_fraction
        keep = max(config.MIN_RECENT_MESSAGES, math.ceil(len(rows) * fraction))
        wanted = max(len(rows) - keep, 0)
    suffix = _suffix_tokens(rows)
    # Never keep more than the budget verbatim, short of the newest step.
    while wanted < boundaries[-1] and suffix[wanted] > cap:
        wanted += 1
    start = _snap(wanted, rows, boundaries, suffix, cap)
    return start if start > 0 else None


def verbatim_budget(
    state: WindowState, config: CompactionConfig, *, early: bool = False, recent: bool = False
) -> int:
    """How many tokens may stay verbatim after a shift beside what every request
    must send (the split keeps the newest step whatever the budget). Under
    VERBATIM_AFTER_SHIFT "newest_step", none: a token kept is written again at
    the shift and read at every call until the next one, which summarizes it
    anyway, while the summary, the artifact index and recall keep what it held
    (docs/compaction.rst, "What a shift keeps"). Under "recent", or `recent`
    (a shift whose caller asked for a recent window: staff, emergency): at most
    MAX_RECENT_TOKENS, and never so many that the request stays over the
    trigger (the summary is taken to be about as large as the one it
    replaces); an `early` shift, before the trigger, keeps about
    RECENT_FRACTION of the context's tokens, so that it frees what it costs."""
    if config.VERBATIM_AFTER_SHIFT == "newest_step" and not recent:
        return 0
    room = trigger_estimate(state, config) - state.fixed_tokens
    if state.anchor is not None:
        room -= state.anchor.token_estimate
    elif (request := _turn_request(state)) is not None:
        # A split inside the current turn will keep its user message verbatim,
        # outside the budget: when the turn is over the budget, count it now.
        turn = sum(row.token_estimate for row in state.rows if row.pk >= request.pk)
        if turn > min(config.MAX_RECENT_TOKENS, room):
            room -= request.token_estimate
    budget = min(config.MAX_RECENT_TOKENS, room)
    if early and config.RECENT_FRACTION > 0:  # 0: the split keeps MIN_RECENT_MESSAGES alone
        budget = min(budget, math.ceil(config.RECENT_FRACTION * state.estimated_tokens()))
    return max(budget, 0)


def _turn_request(state: WindowState) -> Message | None:
    """The user message of the window's last turn, None if there is none."""
    return next((row for row in reversed(state.rows) if row.role == Message.Role.USER), None)


def trigger_estimate(state: WindowState, config: CompactionConfig, *, drift: float = 0.0) -> int:
    """The token trigger in our estimates: the provider counts this
    conversation's text at `token_ratio` times them (at up to `drift` more
    when what is sized must fit whatever the ratio does until it is renewed).
    A fresh count above the stored ratio, too close to it to renew it, counts:
    sized at the stored ratio, a window the count puts over the trigger fits
    by the estimates, so the split would not move."""
    ratio = max(state.token_ratio, min(state.measured_token_ratio() or 0.0, MAX_TOKEN_RATIO))
    return math.floor(config.CONTEXT_TOKEN_THRESHOLD / (ratio * (1 + drift)))


def split_boundaries(rows: list[Message]) -> list[int]:
    """Where a split may fall: the start of every user turn, and inside the
    last turn the start of every step (an assistant message)."""
    users = [i for i, row in enumerate(rows) if row.role == Message.Role.USER]
    last_user = users[-1] if users else -1
    steps = [
        i for i, row in enumerate(rows) if i > last_user and row.role == Message.Role.ASSISTANT
    ]
    if not users and not steps:
        return []
    return [*users, *steps]


def split_parts(state: WindowState, start: int) -> tuple[list[Message], Message | None]:
    """What a split at `start` summarizes, and the anchor it keeps verbatim
    (the anchor is never summarized: that would only repeat it)."""
    anchor = anchor_for(state, start)
    newly_old = [row for row in state.rows[:start] if row is not anchor]
    if anchor is not None and newly_old and anchor.pk > newly_old[-1].pk:
        anchor = None  # it directly follows the cutoff: an ordinary turn start
        newly_old = state.rows[: start - 1]
    if state.anchor is not None and anchor is not state.anchor:
        # The split leaves the turn it fell inside: its user message, kept
        # verbatim until now, is summarized with the rest.
        newly_old = [state.anchor, *newly_old]
    return newly_old, anchor


def anchor_for(state: WindowState, start: int) -> Message | None:
    """The user message a split at `start` falls inside the turn of (None
    when the kept part starts with a user message)."""
    if state.rows[start].role == Message.Role.USER:
        return None
    for row in reversed(state.rows[:start]):
        if row.role == Message.Role.USER:
            return row
    return state.anchor


def _suffix_tokens(rows: list[Message]) -> list[int]:
    totals = [0] * (len(rows) + 1)
    for index in range(len(rows) - 1, -1, -1):
        totals[index] = totals[index + 1] + rows[index].token_estimate
    return totals


def _snap(
    wanted: int, rows: list[Message], boundaries: list[int], suffix: list[int], cap: int
) -> int:
    """Move the split onto a boundary: back to a user turn (keeping more)
    when that stays within the token cap, else forward to the next boundary
    (never past the newest step)."""
    before = [i for i in boundaries if i <= wanted]
    after = [i for i in boundaries if i >= wanted]
    if before and before[-1] == wanted:
        return wanted
    turn_start = [i for i in before if rows[i].role == Message.Role.USER]
    if turn_start and (suffix[turn_start[-1]] <= cap or not after):
        return turn_start[-1]
    if before and suffix[before[-1]] <= cap:
        return before[-1]
    return after[0] if after else before[-1]
