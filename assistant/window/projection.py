"""The splits of a summary the worker builds ahead, projected over one
worker latency (the last ask-to-answer time, `WindowState.growth_within`):
where the worker splits so that the shift adopting its summary keeps what a
shift made then would (`worker_split`), and where that shift falls once the
summary is adopted, the chat having gone on meanwhile (`adopted_split`).
When the hook asks for it is the decision's (`shift_within_latency`)."""

from __future__ import annotations

import math

from assistant.settings.conf import CompactionConfig
from assistant.window.decision import Shift
from assistant.window.loading import WindowState
from assistant.window.split import anticipated_keep, choose_split, should_shift, verbatim_budget


def worker_split(state: WindowState, config: CompactionConfig, *, requested: bool) -> int | None:
    """Where the summary the worker pre-builds now splits the window (None:
    no summary to build). Asked by the pre-call hook inside a turn
    (`requested`): the split it is heading for, early below the token
    trigger, projected one worker latency ahead (the last request's
    ask-to-answer time): it keeps verbatim what the shift would keep less
    what the window gains until the summary is adopted, so the adopted shift
    frees what a shift made then would. After an
    exchange: past SOFT_WATERMARK of a trigger, the split a shift at the
    trigger will take, projected (`anticipated_keep`); the count trigger
    counts only with eager timing, since with cache-aware timing it waits
    for a cold cache, which may never come, and a summary built for it
    would be paid for and thrown away."""
    if requested:
        early = state.context_tokens() < config.CONTEXT_TOKEN_THRESHOLD
        budget = verbatim_budget(state, config, early=early)
        # Adopted one worker latency from now: what the window gains meanwhile
        # stays verbatim beside what this split keeps, so it keeps that much less.
        latency = float(state.meta.prebuild_request.get("took") or 0)
        budget = max(budget - state.growth_within(latency), 0)
        return choose_split(state.rows, config, budget=budget)
    eager = config.COMPACTION_TIMING == "eager"
    if not should_shift(state, config, share=config.SOFT_WATERMARK, count=eager):
        return None
    keep = anticipated_keep(state, config)
    return choose_split(state.rows, config, keep_last=keep, budget=verbatim_budget(state, config))


def adopted_split(state: WindowState, config: CompactionConfig, shift: Shift) -> int | None:
    """Where the shift a pre-built summary stands for falls on `state` (the
    window before it is adopted): the planned split, or, for an early shift,
    the one planned on the window as it was one worker latency ago, when the
    summary was asked for (this window less what it gained since, of which
    an early shift keeps RECENT_FRACTION verbatim, `verbatim_budget`). The
    chat went on meanwhile; planned on the larger window, the shift would keep
    verbatim what it grew by, and every call after it would read that."""
    if shift.kind != "early" or shift.start is None:
        return shift.start
    latency = float(state.meta.prebuild_request.get("took") or 0)
    then = max(state.estimated_tokens() - state.growth_within(latency), 0)
    budget = min(shift.budget, math.ceil(config.RECENT_FRACTION * then))
    start = choose_split(state.rows, config, budget=budget)
    return shift.start if start is None else max(start, shift.start)
