"""What the next request sends, decided in one place: `decide(state, config,
now) -> Plan`, a pure function (no query, no clock read) over a window loaded
once (assistant.window.loading). The plan's `steps` are typed, immutable values
in the order the pre-call flow runs them (assistant.precall.hook): note the
provider's usage, compact these results, adopt the pending summary, move the
window (shift here, or leave the shift to the worker, or ask it ahead), write
the ledger. The worker asks the plan whether a shift is in sight
(`Plan.shift_in_sight`) and where it would fall, and the dry run puts it into
words (assistant.staff.planning).

A plan is decided once, on the window at the call. A step that meets a window
an earlier step changed (a results batch, an adopted summary) is checked
there (`MoveWindow.on`): the call's facts (the size at the call, whether the
cache was cold) kept, where the split falls and whether the request needs the
shift taken from the window it meets; under the summary lease the shift is
checked as still due once more (`Shift.still_due`, assistant.summary.shift).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from assistant.settings.conf import CompactionConfig
from assistant.window.ledger import Ledger, step_cost
from assistant.window.limits import ceilinged
from assistant.window.loading import TOKEN_RATIO_DRIFT, WindowState, load_window
from assistant.window.payoff import outlook, step_pays, tail_tokens
from assistant.window.results import CompactionPlan, consumed_tool_rows, plan_compaction
from assistant.window.split import (
    choose_split,
    should_shift,
    verbatim_budget,
)

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
# ... or a shift is due once the window grew by what it gains in one worker latency.
SHIFT_WITHIN_LATENCY = "shift_within_worker_latency"
# A voluntary results batch is left to the early shift this call makes: that shift
# rewrites everything after the system part and compacts the results it keeps.
BATCH_IN_SHIFT = "results_batch_in_early_shift"


@dataclass(frozen=True)
class Results:
    """Consumed tool results to compact: `plan` (empty: none), and whether any
    batch goes (`free`: at the trigger, cold or eager) or only one that frees
    COMPACT_MIN_FREE_TOKENS and that the savings cover (`pays`)."""

    plan: CompactionPlan
    free: bool
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
class ApplyEmergency:
    """Apply the flagged emergency level first; the flow plans again on the
    window it leaves (a different window: nothing else of this plan holds)."""


@dataclass(frozen=True)
class NoteUsage:
    """What the provider's newest count teaches: its ratio to our estimate,
    to remember (`ratio`, when it moved by more than TOKEN_RATIO_DRIFT), or
    (count, estimate) of a count set aside as implausible, to warn of once
    (`implausible`)."""

    ratio: float | None
    implausible: tuple[int, int] | None


@dataclass(frozen=True)
class CompactResults:
    """Compact these consumed tool results (`Results`), using what the worker
    prepared."""

    results: Results


@dataclass(frozen=True)
class AdoptPending:
    """Adopt the summary kept as pending: the worker's pre-built one on a cold
    cache (`cold`), or the model's summary of an offline split in place of the
    offline one once a results batch before it rewrote the prefix anyway."""

    cold: bool


@dataclass(frozen=True)
class MoveWindow:
    """The window step: make `shift` here, or, with `worker_ahead`, leave a
    shift the request does not need to the worker (ask it, wait for it); with
    no shift, ask the worker ahead (`ask_worker`). Decided on the window at the
    call; after a step that changed the window it is checked on the window it
    meets (`on`), with the call's facts."""

    shift: Shift | None
    ask_worker: bool
    worker_ahead: bool
    eager: bool
    count: bool
    at_trigger: bool
    cold: bool  # the rewrite finds no cache: an early shift pays no rewrite premium

    def on(self, state: WindowState, config: CompactionConfig, *, adopted: bool) -> MoveWindow:
        """This step on `state`, the window an earlier step of the plan left;
        `adopted`: the pre-built summary was taken there (the shift at the
        trigger it stands for is made)."""
        at_trigger = self.at_trigger and not adopted
        shift = _shift(
            state,
            config,
            eager=self.eager,
            count=self.count,
            at_trigger=at_trigger,
            cold=self.cold,
            reasons=[],
        )
        trigger = config.CONTEXT_TOKEN_THRESHOLD
        ask = self.worker_ahead and (
            state.context_tokens() >= config.SOFT_WATERMARK * trigger
            or shift_within_latency(state, config)
        )
        return replace(self, shift=shift, ask_worker=ask)


@dataclass(frozen=True)
class WriteLedger:
    """Write the ledger as the steps before it booked it (in the window they
    left): one write for the call."""


Step = ApplyEmergency | NoteUsage | CompactResults | AdoptPending | MoveWindow | WriteLedger


@dataclass(frozen=True)
class Plan:
    tokens: int  # the size at the call (WindowState.context_tokens)
    eager: bool
    cold: bool
    # PREBUILD_IN_TURN with a worker known to serve the conversation: a shift the
    # request does not need to fit is left to it (assistant.summary.worker).
    worker_ahead: bool
    at_trigger: bool
    suffix_first: bool
    results: Results | None  # compact consumed results first (None: not now)
    adopt_pending: bool  # take the worker's pre-built summary (a cold cache)
    shift: Shift | None
    ask_worker: bool  # with no shift, ask the worker for the next summary (PREBUILD_IN_TURN)
    shift_in_sight: bool  # a summary built now will be used (the worker pre-builds)
    reasons: tuple[str, ...]
    steps: tuple[Step, ...] = ()  # what the pre-call flow runs, in order


def plan_call(
    conversation_id: int,
    config: CompactionConfig,
    now: datetime,
    *,
    emergency_applied: bool = False,
    live: bool = False,
) -> tuple[WindowState, Plan]:
    """The pre-call flow's one look: the window loaded once and its plan.
    `live`: a deleted conversation is not found (Conversation.DoesNotExist)."""
    state = load_window(conversation_id, config, live=live)
    # The answering model's ceiling (window.limits.ceilinged), from the window as
    # loaded: loaded again, under the lower figures, only when the ceiling binds.
    bounded = ceilinged(config, *state.answered_by)
    if bounded is not config:
        config = bounded
        state = load_window(conversation_id, config, live=live)
    return state, decide(state, config, now, emergency_applied=emergency_applied)


def decide(
    state: WindowState, config: CompactionConfig, now: datetime, *, emergency_applied: bool = False
) -> Plan:
    """The plan for the next request, decided on `state` at `now`;
    `emergency_applied`: the flagged level was applied just before (the
    flag is not looked at again)."""
    eager = config.COMPACTION_TIMING == "eager"
    cold = not eager and state.cache_is_cold(config, now)
    tokens = state.context_tokens()
    trigger = config.CONTEXT_TOKEN_THRESHOLD
    suffix_first = config.SUMMARY_REQUEST == "cached_suffix" and tokens >= trigger and not eager
    reasons = [EAGER] if eager else []
    if cold:
        reasons.append(COLD_CACHE)
    results = None
    if cold or tokens >= config.COMPACT_WATERMARK * trigger:
        if suffix_first:
            reasons.append(SUFFIX_FIRST)
        else:
            reasons.append(WATERMARK)
            results = results_step(
                state, config, free=cold or eager or tokens >= trigger, cold=cold
            )
    count = eager or cold
    at_trigger = tokens >= trigger and not eager
    # A cold cache rewrites the prefix anyway: the worker's summary goes in, or
    # the model's summary of an offline split in place of the offline one.
    pending = state.meta.has_pending_summary or state.meta.offline_replacement is not None
    adopt = cold and pending
    if adopt:
        reasons.append(ADOPT_PENDING)
    worker_ahead = config.PREBUILD_IN_TURN and not eager and state.meta.worker_seen
    shift = _shift(
        state, config, eager=eager, count=count, at_trigger=at_trigger, cold=cold, reasons=reasons
    )
    if results is not None and in_early_shift(
        state, results, shift, now, worker_ahead=worker_ahead
    ):
        reasons.append(BATCH_IN_SHIFT)
        results = None
    ask = worker_ahead and tokens >= config.SOFT_WATERMARK * trigger
    if ask:
        reasons.append(SOFT_WATERMARK)
    elif worker_ahead and shift_within_latency(state, config):
        ask = True
        reasons.append(SHIFT_WITHIN_LATENCY)
    window = MoveWindow(shift, ask, worker_ahead, eager, count, at_trigger, cold)
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
        steps=_steps(state, results, window, adopt=adopt, emergency=not emergency_applied),
    )


def _steps(
    state: WindowState, results: Results | None, window: MoveWindow, *, adopt: bool, emergency: bool
) -> tuple[Step, ...]:
    """The plan's steps, in the order the pre-call flow runs them."""
    if emergency and state.meta.needs_emergency:
        return (ApplyEmergency(),)
    steps: list[Step] = []
    usage = note_usage(state)
    if usage is not None:
        steps.append(usage)
    # Below the trigger, no voluntary batch while the worker builds the shift that
    # would rewrite it.
    if results is not None and (
        results.free or not (window.worker_ahead and awaiting_worker(state))
    ):
        steps.append(CompactResults(results))
    # A results batch rewrites the prefix from its first result on: the model's
    # summary of an offline split, if one is pending by then, replaces the
    # offline one in the same rewrite.
    batch = bool(steps) and isinstance(steps[-1], CompactResults)
    if adopt or batch:
        steps.append(AdoptPending(cold=adopt))
    if batch or adopt or window.shift is not None or window.ask_worker:
        steps.append(window)
    if batch or adopt or window.shift is not None:
        steps.append(WriteLedger())
    return tuple(steps)


def note_usage(state: WindowState) -> NoteUsage | None:
    """The provider's count over our estimate of the same request, when it
    moved by more than TOKEN_RATIO_DRIFT, so that sizes estimated after the
    next compaction (when every count is stale) are scaled like the
    provider's; a count the window set aside as implausible, not yet warned
    of (the host's usage wiring is wrong)."""
    measured = state.measured_token_ratio()
    stored = state.meta.stored_token_ratio or 1.0
    drifted = measured is not None and abs(measured - stored) > TOKEN_RATIO_DRIFT * stored
    ratio = round(measured, 3) if measured is not None and drifted else None
    implausible = None if state.meta.implausible_usage_warned else state.implausible_count()
    if ratio is None and implausible is None:
        return None
    return NoteUsage(ratio, implausible)


def awaiting_worker(state: WindowState) -> bool:
    """The worker was asked for the summary of the current split and has
    not answered yet: a voluntary compaction now would be rewritten by the
    shift that summary brings, so it waits too."""
    request = state.meta.prebuild_request
    return (
        state.meta.worker_seen
        and "base" in request  # a dropped request keeps only the worker's latency
        and request["base"] == state.through_id
        and not request.get("answered")
    )


def _shift(
    state: WindowState,
    config: CompactionConfig,
    *,
    eager: bool,
    count: bool,
    at_trigger: bool,
    cold: bool,
    reasons: list[str],
) -> Shift | None:
    """The window shift of the plan, if any (forced at a trigger, or early
    when it pays, on a `cold` cache at no rewrite premium), its reason appended
    to `reasons`."""
    needed = should_shift(state, config, count=count)
    if at_trigger or needed:
        reasons.append(AT_TRIGGER if at_trigger else COUNT_TRIGGER)
        share = (
            min(1.0, state.context_tokens() / config.CONTEXT_TOKEN_THRESHOLD) if at_trigger else 1.0
        )
        return Shift("forced", share, count, *split_for(state, config), needed)
    if not eager and (early := early_shift(state, config, cold=cold)) is not None:
        reasons.append(EARLY_PAYS)
        return early
    return None


def in_early_shift(
    state: WindowState,
    results: Results,
    shift: Shift | None,
    now: datetime,
    *,
    worker_ahead: bool,
) -> bool:
    """Whether a voluntary results batch (`Results.pays`, not `free`) is left to
    the early shift this call makes, which pays on the window at the call: the
    shift writes everything after the system part again and compacts the
    consumed results it keeps in that same rewrite, so the batch costs nothing
    there, where taken first it rewrites the tail and leaves the shift judged on
    a window it freed (docs/compaction.rst, "Timing under prompt caching"): the
    shift then waits a few calls, and the prefix is written twice. A shift this
    call does not make (left to the worker, `worker_ahead`, or waiting after a
    failed summary of this split) leaves the batch judged as ever."""
    if shift is None or shift.kind != "early" or worker_ahead:
        return False
    backing_off = state.meta.summary_backing_off(now.timestamp())
    return results.goes and not results.free and not backing_off


def results_step(
    state: WindowState, config: CompactionConfig, *, free: bool, cold: bool = False
) -> Results:
    """Compact the consumed tool results of the window (the current turn's
    too) but the newest KEEP_NEWEST_TOOL_RESULTS; on a `cold` cache all the
    worker prepared after the finished exchanges, at once, and of the results
    it has not reached (the turn going on) all but the newest
    KEEP_NEWEST_TOOL_RESULTS (free to rewrite, those are still the ones the
    model reads next).
    Unless `free`, only a batch that frees at least COMPACT_MIN_FREE_TOKENS
    and pays for itself (`step_pays`) before the prefix is next rewritten
    (`Ledger.prefix_life`: every shift compacts or summarizes the consumed
    results anyway), so the cached prefix breaks rarely and never at a loss."""
    rows = consumed_tool_rows(state.rows)
    keep = config.KEEP_NEWEST_TOOL_RESULTS
    if cold:
        unprepared = [row.pk for row in rows if not row.prepared_compaction]
        kept = unprepared[len(unprepared) - keep :] if keep else ()
        plan = plan_compaction(rows, config, kept=kept)
    else:
        plan = plan_compaction(rows, config, keep_newest=keep)
    pays = False
    if plan and not free:
        tail = tail_tokens(state, plan)
        prices = state.cache_prices
        cost = step_cost(tail, tail - min(plan.most_freed, tail), prices=prices)
        life = Ledger.of(state.columns).prefix_life(state.rows)
        pays = plan.most_freed >= config.COMPACT_MIN_FREE_TOKENS and step_pays(
            state, config, plan.most_freed, cost, prefix_life=life
        )
    return Results(plan, free, pays)


def early_shift(
    state: WindowState, config: CompactionConfig, *, ahead: int = 0, cold: bool = False
) -> Shift | None:
    """Past COMPACT_WATERMARK, shift the window before the trigger when it
    frees at least COMPACT_MIN_FREE_TOKENS and pays for itself (`step_pays`)
    at its own cost: rewriting the context (the new summary leads it), the
    summarizer reading the summary it updates, and reading what it summarizes
    only as far as the conversation would not pay it anyway: every message is
    summarized once, whenever the shift comes, so a conversation that reaches
    the trigger (`Outlook.reached`) pays that input at the forced shift
    (docs/compaction.rst, "Timing under prompt caching"). None when it does not pay.
    `ahead`: judged on the window grown by that many tokens, all of them
    summarized by the shift (a pre-build keeps the same verbatim budget).
    `cold`: the provider's cache has expired, so the request writes its whole
    context anyway and the shift's rewrite costs nothing more (`step_cost`'s
    `cold`): what it frees is written less on this very request."""
    if state.context_tokens() + ahead < config.COMPACT_WATERMARK * config.CONTEXT_TOKEN_THRESHOLD:
        return None
    budget, start = split_for(state, config, early=True)
    if start is None:
        return None
    system = state.tokens(state.system)
    before = state.estimated_tokens() - system + ahead
    summarized = sum(row.token_estimate for row in state.rows[:start]) + ahead
    old_summary = state.tokens(state.summary)
    after = before - summarized + (old_summary or config.SUMMARY_ESTIMATE_TOKENS)
    prices = state.cache_prices
    anyway = outlook(state, config, Ledger.of(state.columns)).reached * summarized
    own_input = old_summary + summarized - anyway
    cost = step_cost(before, after, cold=cold, summarizer_input=round(own_input), prices=prices)
    pays = before - after >= config.COMPACT_MIN_FREE_TOKENS and step_pays(
        state, config, before - after, cost
    )
    return Shift("early", config.COMPACT_WATERMARK, False, budget, start) if pays else None


def shift_within_latency(state: WindowState, config: CompactionConfig) -> bool:
    """Whether a shift is due (at the trigger, or early because it pays) once
    the window has grown by what it gains in one worker latency (the last
    request's ask-to-answer time, `WindowState.growth_within`): asked for now,
    the worker's summary is ready when the chat gets there, instead of one
    latency later while the window goes on growing (docs/compaction.rst)."""
    latency = float(state.meta.prebuild_request.get("took") or 0)
    ahead = state.growth_within(latency)
    if ahead <= 0:
        return False
    if state.context_tokens() + ahead >= config.CONTEXT_TOKEN_THRESHOLD:
        return True
    return early_shift(state, config, ahead=ahead) is not None


def split_for(
    state: WindowState, config: CompactionConfig, *, early: bool = False
) -> tuple[int, int | None]:
    """(the verbatim budget, where the split falls) of a shift on `state`:
    at a trigger, or `early`, before it (`verbatim_budget`)."""
    budget = verbatim_budget(state, config, early=early)
    return budget, choose_split(state.rows, config, budget=budget)


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
