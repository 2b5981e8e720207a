"""What the next request sends, decided in one place: `decide(state, config,
now) -> Plan`, a pure function (no query, no clock read) over a window loaded
once (assistant.window.state). The pre-call hook executes the plan
(assistant.flows.precall), the worker asks it whether a shift is in sight
(`Plan.shift_in_sight`) and where it would fall, the lease recheck asks it
whether the shift is still due (assistant.strategies.shift), and the dry run puts it
into words (assistant.flows.planning).

A plan is decided on the window as it is. Its first step, compacting consumed
tool results, changes the window, so the hook decides again on the window
that step left (`decide(..., first=plan)`): the second plan keeps what the
first one saw (the size at the call, whether the cache was cold), as one
decision taken in two looks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from assistant.models import Message
from assistant.settings.conf import CompactionConfig
from assistant.window.ledger import Ledger, Outlook, step_cost
from assistant.window.results import CompactionPlan, consumed_tool_rows, plan_compaction
from assistant.window.split import (
    anticipated_keep,
    choose_split,
    should_shift,
    trigger_estimate,
    verbatim_budget,
)
from assistant.window.state import WindowState

# Why a plan does what it does: reason codes, for logs, tests and the dry run's words.
AT_TRIGGER = "at_trigger"  # the context reached the token trigger: the prefix breaks anyway
COUNT_TRIGGER = "count_trigger"  # the message-count trigger (eager timing or a cold cache)
COLD_CACHE = "cold_cache"  # the provider's cache expired: changing the context is free
EAGER = "eager"  # COMPACTION_TIMING "eager": no prompt cache to keep
WATERMARK = "past_compact_watermark"  # a results batch may go if it pays for itself
SUFFIX_FIRST = "cached_suffix_shift_first"  # the shift re-sends the cached request first
ADOPT_PENDING = "adopt_prebuilt_on_cold_cache"
EARLY_PAYS = "early_shift_pays"
SOFT_WATERMARK = "past_soft_watermark"  # the worker is asked for the next summary


@dataclass(frozen=True)
class Results:
    """Consumed tool results to compact: `plan` (empty: none), whether any
    batch goes (`free`: at the trigger, cold or eager) or only one that frees
    COMPACT_MIN_FREE_TOKENS and that the savings cover (`pays`), and whether
    the newest results go too (`everything`: a cold cache)."""

    plan: CompactionPlan
    free: bool
    everything: bool
    pays: bool

    @property
    def goes(self) -> bool:
        return bool(self.plan) and (self.free or self.pays)


@dataclass(frozen=True)
class Shift:
    """A window shift: `forced` (a trigger) or `early` (before it, because it
    pays), made under the lease unless the context got below `share` of the
    trigger meanwhile; `start`: where the split would fall now (None: it
    cannot move), keeping at most `budget` tokens verbatim."""

    kind: Literal["forced", "early"]
    share: float
    count: bool
    budget: int
    start: int | None
    # The request needs it to fit (a trigger still reached once compaction is
    # done): only such a shift waits on another process's summary.
    needed: bool = False

    def still_due(self, state: WindowState, config: CompactionConfig) -> bool:
        """On the window re-read under the summary lease: whether no other
        caller got the context below what this one saw (`share` of the
        token trigger, or of the message-count trigger with `count`)."""
        return should_shift(state, config, self.share, count=self.count)

    def due_after_adopting(self, state: WindowState, config: CompactionConfig) -> bool:
        """Once a pre-built summary was adopted in its place: a second shift,
        on the chat path, only while the context is still over a trigger."""
        return should_shift(state, config, max(self.share, 1.0), count=self.count)

    def split_in(self, state: WindowState, config: CompactionConfig) -> int | None:
        """Where this shift falls on `state` (the window re-read under the lease)."""
        return split_for(state, config, early=self.kind == "early")[1]


@dataclass(frozen=True)
class Plan:
    tokens: int  # the size at the call (WindowState.context_tokens)
    eager: bool
    cold: bool
    # PREBUILD_IN_TURN with a worker known to serve the conversation: a shift the
    # request does not need to fit is left to it (assistant.flows.prebuild).
    worker_ahead: bool
    at_trigger: bool
    suffix_first: bool
    results: Results | None  # compact consumed results first (None: not now)
    adopt_pending: bool  # take the worker's pre-built summary (a cold cache)
    shift: Shift | None
    ask_worker: bool  # with no shift, ask the worker for the next summary (PREBUILD_IN_TURN)
    shift_in_sight: bool  # a summary built now will be used (the worker pre-builds)
    reasons: tuple[str, ...]


def decide(
    state: WindowState,
    config: CompactionConfig,
    now: datetime,
    *,
    first: Plan | None = None,
    adopted: bool = False,
) -> Plan:
    """The plan for the next request. `first`: the plan whose results step
    was executed, deciding again on the window it left; `adopted`: the
    pre-built summary was taken meanwhile (the shift at the trigger it stands
    for is made)."""
    eager = config.COMPACTION_TIMING == "eager"
    cold = first.cold if first else not eager and state.cache_is_cold(config, now)
    tokens = first.tokens if first else state.context_tokens()
    trigger = config.CONTEXT_TOKEN_THRESHOLD
    suffix_first = config.SUMMARY_REQUEST == "cached_suffix" and tokens >= trigger and not eager
    reasons = [EAGER] if eager else []
    if cold:
        reasons.append(COLD_CACHE)
    results = None
    if first is None and (cold or tokens >= config.COMPACT_WATERMARK * trigger):
        if suffix_first:
            reasons.append(SUFFIX_FIRST)
        else:
            reasons.append(WATERMARK)
            results = results_step(
                state, config, free=cold or eager or tokens >= trigger, everything=cold
            )
    count = eager or cold
    at_trigger = tokens >= trigger and not eager and not adopted
    # A cold cache rewrites the prefix anyway: the worker's summary goes in, or
    # the model's summary of an offline split in place of the offline one.
    pending = state.meta.has_pending_summary or state.meta.offline_replacement is not None
    adopt = cold and not adopted and pending
    if adopt:
        reasons.append(ADOPT_PENDING)
    worker_ahead = config.PREBUILD_IN_TURN and not eager and state.meta.worker_seen
    shift = _shift(state, config, eager=eager, count=count, at_trigger=at_trigger, reasons=reasons)
    ask = worker_ahead and state.context_tokens() >= config.SOFT_WATERMARK * trigger
    if ask:
        reasons.append(SOFT_WATERMARK)
    return Plan(
        tokens=tokens,
        eager=eager,
        cold=cold,
        worker_ahead=worker_ahead,
        at_trigger=at_trigger,
        suffix_first=suffix_first,
        results=results,
        adopt_pending=adopt,
        shift=shift,
        ask_worker=ask,
        shift_in_sight=eager or shift_in_sight(state, config),
        reasons=tuple(reasons),
    )


def _shift(
    state: WindowState,
    config: CompactionConfig,
    *,
    eager: bool,
    count: bool,
    at_trigger: bool,
    reasons: list[str],
) -> Shift | None:
    """The window shift of the plan, if any (forced at a trigger, or early
    when it pays), its reason appended to `reasons`."""
    needed = should_shift(state, config, count=count)
    if at_trigger or needed:
        reasons.append(AT_TRIGGER if at_trigger else COUNT_TRIGGER)
        share = (
            min(1.0, state.context_tokens() / config.CONTEXT_TOKEN_THRESHOLD) if at_trigger else 1.0
        )
        return Shift("forced", share, count, *split_for(state, config), needed)
    if not eager and (early := early_shift(state, config)) is not None:
        reasons.append(EARLY_PAYS)
        return early
    return None


def results_step(
    state: WindowState, config: CompactionConfig, *, free: bool, everything: bool
) -> Results:
    """Compact the consumed tool results of the window (the current turn's
    too) but the newest KEEP_NEWEST_TOOL_RESULTS (all with `everything`).
    Unless `free`, only a batch that frees at least COMPACT_MIN_FREE_TOKENS
    and pays for itself (`step_pays`), so the cached prefix breaks rarely
    and never at a loss."""
    keep = 0 if everything else config.KEEP_NEWEST_TOOL_RESULTS
    plan = plan_compaction(consumed_tool_rows(state.rows), config, keep_newest=keep)
    pays = False
    if plan and not free:
        tail = tail_tokens(state, plan)
        prices = state.cache_prices
        cost = step_cost(tail, tail - min(plan.most_freed, tail), prices=prices)
        pays = plan.most_freed >= config.COMPACT_MIN_FREE_TOKENS and step_pays(
            state, config, plan.most_freed, cost
        )
    return Results(plan, free, everything, pays)


def tail_tokens(state: WindowState, plan: CompactionPlan) -> int:
    """The verbatim tokens from the first provider message the plan changes on
    (consecutive tool results travel in one message)."""
    changed = {row.pk for row in [*plan.compact, *plan.stub]}
    verbatim = state.verbatim
    first = next(index for index, row in enumerate(verbatim) if row.pk in changed)
    while first > 0 and verbatim[first - 1].role == verbatim[first].role == Message.Role.TOOL:
        first -= 1
    return sum(row.token_estimate for row in verbatim[first:])


def early_shift(state: WindowState, config: CompactionConfig) -> Shift | None:
    """Past COMPACT_WATERMARK, shift the window before the trigger when it
    frees at least COMPACT_MIN_FREE_TOKENS and pays for itself (`step_pays`)
    at its own cost: rewriting the context (the new summary leads it), the
    summarizer reading the summary it updates, and reading what it summarizes
    only as far as the conversation would not pay it anyway: every message is
    summarized once, whenever the shift comes, so a conversation that reaches
    the trigger (`Outlook.reached`) pays that input at the forced shift
    (docs/decision.rst, "The break-even rule"). None when it does not pay."""
    if state.context_tokens() < config.COMPACT_WATERMARK * config.CONTEXT_TOKEN_THRESHOLD:
        return None
    budget, start = split_for(state, config, early=True)
    if start is None:
        return None
    system = state.tokens(state.system)
    before = state.estimated_tokens() - system
    summarized = sum(row.token_estimate for row in state.rows[:start])
    old_summary = state.tokens(state.summary)
    after = before - summarized + (old_summary or config.SUMMARY_ESTIMATE_TOKENS)
    prices = state.cache_prices
    anyway = outlook(state, config, Ledger.of(state.metadata)).reached * summarized
    own_input = old_summary + summarized - anyway
    cost = step_cost(before, after, summarizer_input=round(own_input), prices=prices)
    pays = before - after >= config.COMPACT_MIN_FREE_TOKENS and step_pays(
        state, config, before - after, cost
    )
    return Shift("early", config.COMPACT_WATERMARK, False, budget, start) if pays else None


def split_for(
    state: WindowState, config: CompactionConfig, *, early: bool = False
) -> tuple[int, int | None]:
    """(the verbatim budget, where the split falls) of a shift on `state`:
    at a trigger, or `early`, before it (`verbatim_budget`)."""
    budget = verbatim_budget(state, config, early=early)
    return budget, choose_split(state.rows, config, budget=budget)


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


def shift_in_sight(state: WindowState, config: CompactionConfig) -> bool:
    """Whether a window shift is in sight, so a summary built now will be
    used: at the trigger (the pre-call hook shifts there whatever compaction
    frees), or past SOFT_WATERMARK of it even once the consumed tool results
    are compacted (which the pre-call hook does first). A summary built for a
    shift that never comes is paid for and thrown away."""
    tokens = state.context_tokens()
    if tokens >= config.CONTEXT_TOKEN_THRESHOLD:
        return True
    plan = plan_compaction(
        consumed_tool_rows(state.rows), config, keep_newest=config.KEEP_NEWEST_TOOL_RESULTS
    )
    return tokens - plan.most_freed >= config.SOFT_WATERMARK * config.CONTEXT_TOKEN_THRESHOLD


def step_pays(state: WindowState, config: CompactionConfig, freed: int, cost: float) -> bool:
    """Whether a voluntary step that frees `freed` tokens at `cost` (its
    rewrite and summarizer input, `step_cost`) pays for itself: what it is
    expected to save on its own (`Outlook.saves`) reaches its cost, and the
    conversation's savings so far cover it (the ledger), so that no
    conversation costs more than sending everything, even one that ends
    right after the step."""
    prices = state.cache_prices
    ledger = Ledger.of(state.metadata)
    return ledger.affords(state.rows, cost, prices) and (
        outlook(state, config, ledger).saves(freed, prices) >= cost
    )


def outlook(state: WindowState, config: CompactionConfig, ledger: Ledger) -> Outlook:
    """Where the window heads without a voluntary step, in our estimates: it
    grows by what a model call has added on average, and at the trigger a
    forced shift rewrites the verbatim budget and the summary, and the
    summarizer reads the rest."""
    calls = ledger.calls_now(state.rows)
    window_calls = sum(1 for row in state.rows if row.role == Message.Role.ASSISTANT)
    grown = state.estimated_tokens() - state.fixed_tokens
    kept = verbatim_budget(state, config)
    trigger = trigger_estimate(state, config)
    summary = state.tokens(state.summary) or config.SUMMARY_ESTIMATE_TOKENS
    summarized = max(trigger - state.fixed_tokens - kept, 0)
    return Outlook(
        tokens=state.estimated_tokens(),
        per_call=grown / max(window_calls, 1),
        trigger=trigger,
        shift_cost=state.cache_prices.write * (kept + summary) + summarized,
        kept=state.fixed_tokens + kept,
        calls=calls,
    )
