"""The pre-call plan's steps that change the window (assistant.window.decision):
compact these consumed results, adopt the pending summary, shift here. Each
takes the window the step before it left, returns the window it leaves,
and books what it cost in that window's ledger (the flow writes the ledger
once, as the plan's last step: docs/architecture.rst).

A step that meets a window an earlier step changed checks itself there
(`MoveWindow.on`); a shift compacts the consumed results it kept verbatim in
the same rewrite, instead of breaking the freshly written prefix again a few
calls later.
"""

from __future__ import annotations

from typing import NamedTuple

from assistant.models import MetadataKeys
from assistant.summary import adopt_pending_summary, shift_window
from assistant.tool_results import apply_plan_window, compact_old_blocks
from assistant.window import (
    AdoptPending,
    Ledger,
    MoveWindow,
    Results,
    WindowState,
    adopted_split,
    consumed_tool_rows,
    load_window,
    plan_compaction,
    results_step,
    step_cost,
    tail_tokens,
)


class Shifted(NamedTuple):
    """A shift made here: the summary the next request carries, the window
    it left (its kept results compacted, the shift booked)."""

    summary: str | None
    state: WindowState


class Adopted(NamedTuple):
    """A pending summary adopted: the window it left, and whether the split
    moved (False: the model's summary replaced an offline one in place)."""

    state: WindowState
    moved: bool


def compact_results(
    state: WindowState, results: Results, *, rewritten: bool = False
) -> WindowState | None:
    """Execute a results step (assistant.window.decision.results_step), using
    what the worker prepared. Returns the new window, None if unchanged.
    `rewritten`: the next request writes the whole tail anyway (a shift was
    just made), so the step saves writes instead of breaking a cached prefix."""
    conversation_id = state.conversation_id
    if not results.plan:
        # Old images, documents and thinking change the context only when it may change
        # freely, or along with a batch of tool results (below).
        if results.free and compact_old_blocks(conversation_id):
            return _reload(state)
        return None
    if not results.goes:
        return None
    tail = tail_tokens(state, results.plan)
    applied = apply_plan_window(conversation_id, results.plan, state.config)
    if applied is None:
        return None
    after = _reload(state) if compact_old_blocks(conversation_id) else _ledger_kept(applied, state)
    freed = state.estimated_tokens() - after.estimated_tokens()
    cost = step_cost(tail, tail - freed, cold=rewritten, prices=state.cache_prices)
    _book(after, state, freed=freed, cost=cost)
    return after


def adopt(
    state: WindowState, step: AdoptPending, window: MoveWindow, *, changed: bool
) -> Adopted | None:
    """Adopt the summary kept as pending (`AdoptPending`): on a cold cache, or
    once a results batch rewrote the prefix (`changed`) when the model's
    summary of an offline split waits to replace the offline one. None when
    it is not due, or none fits. `window`: the plan's window step, checked on
    `state` when a step changed it, for the results the adopted split keeps."""
    config = state.config
    replaces = changed and state.meta.offline_replacement is not None
    if not (step.cold or replaces) or not adopt_pending_summary(state.conversation_id, config):
        return None
    if changed:
        window = window.on(state, config, adopted=False)
    split = state.through_id
    after = _compact_kept(state, _book_shift(state, cold=window.cold), window)
    return Adopted(after, after.through_id != split)


def shift_here(
    state: WindowState, window: MoveWindow, *, changed: bool = False, adopted: bool = False
) -> Shifted | None:
    """Make the window step's shift here (None: none is due). `changed`: an
    earlier step changed the window (`adopted`: by adopting the pre-built
    summary), so the step is checked on `state` first."""
    config = state.config
    if changed:
        window = window.on(state, config, adopted=adopted)
    if window.shift is None:
        return None
    summary = shift_window(state.conversation_id, config, window.shift)
    return Shifted(summary, _compact_kept(state, _book_shift(state, cold=window.cold), window))


def _compact_kept(before: WindowState, after: WindowState, window: MoveWindow) -> WindowState:
    """After a shift (`before` -> `after`) the next request writes everything
    after the system part anyway: the consumed results the shift kept verbatim
    are compacted in the same step (any batch goes, as at the trigger)."""
    if after.through_id == before.through_id:
        return after
    short = short_of_the_shift(before, after, window)
    if short is not None:
        after = compact_results(after, short, rewritten=True) or after
    results = results_step(after, after.config, free=True, cold=window.cold)
    return compact_results(after, results, rewritten=True) or after


def short_of_the_shift(
    before: WindowState, after: WindowState, window: MoveWindow
) -> Results | None:
    """A pre-built summary adopted for the planned shift, built on a split the
    chat has since moved past (the worker took a summarizer latency, the chat
    went on): the consumed tool results between its split and the planned one
    would have been summarized by the shift made now, so they are compacted
    in the same rewrite (their originals stay, recalled by handle). None when
    the shift reached the planned split. The planned split of an early shift
    is the one planned when the summary was asked for (`adopted_split`)."""
    shift = window.shift
    if shift is None or shift.start is None or shift.start >= len(before.rows):
        return None
    first_kept = before.rows[shift.start].pk
    if not any(row.pk < first_kept for row in consumed_tool_rows(after.rows)):
        return None
    start = adopted_split(before, before.config, shift) or shift.start
    first_kept = before.rows[min(start, len(before.rows) - 1)].pk
    rows = [row for row in consumed_tool_rows(after.rows) if row.pk < first_kept]
    compaction = plan_compaction(rows, after.config, keep_newest=0)
    return Results(compaction, free=True, pays=False)


def _book_shift(before: WindowState, *, cold: bool) -> WindowState:
    """The window a shift left, the shift booked in its ledger: everything
    after the system part changed (the summary leads), so the whole context
    is written again, and the summarizer read the newly summarized messages
    and the old summary."""
    after = _reload(before)
    if after.through_id == before.through_id:
        return after
    system = before.tokens(before.system)
    old, new = before.estimated_tokens() - system, after.estimated_tokens() - system
    through = after.through_id or 0  # set: the shift moved it
    summarized = sum(row.token_estimate for row in before.rows if row.pk <= through)
    cost = step_cost(
        old,
        new,
        cold=cold,
        summarizer_input=summarized + before.tokens(before.summary),
        prices=before.cache_prices,
    )
    _book(after, before, freed=old - new, cost=cost)
    return after


def _reload(state: WindowState) -> WindowState:
    """The window as a step left it in the database, with the ledger as this
    call has booked it so far (the flow writes it once, at the end)."""
    return _ledger_kept(load_window(state.conversation_id, state.config), state)


def _ledger_kept(after: WindowState, state: WindowState) -> WindowState:
    """`after` (the window loaded after a step) with `state`'s ledger."""
    after.columns[MetadataKeys.CACHE_LEDGER] = state.columns[MetadataKeys.CACHE_LEDGER]
    return after


def _book(after: WindowState, before: WindowState, *, freed: int, cost: float) -> None:
    """Book a step (`before` -> `after`) in `after`'s ledger."""
    newest = before.rows[-1].pk if before.rows else 0
    after.columns[MetadataKeys.CACHE_LEDGER] = Ledger.of(before.columns).after_step(
        before.rows, freed=freed, cost=cost, newest_id=newest, prices=before.cache_prices
    )
