"""The pre-call flow, `ensure_context_summary`, run before every model call,
inside an agent turn too: the flagged emergency level, compaction of consumed
tool results when it pays, and the window shift, each step as the decision
(assistant.window.decision) returns it. It alone keeps every request under the
trigger plus the newest step, with no worker. Its companions are the
post-exchange flow (assistant.flows.post_exchange), run by a worker after each
exchange, and the overflow flow (assistant.flows.overflow), which wraps the
model call itself (docs/architecture.rst).

When compaction pays (docs/compaction.rst): under prompt caching a request re-reads its
unchanged leading messages at a tenth of the price and pays a premium from
the first changed message on. So what the worker prepared is applied only
when the context nears the token trigger (COMPACT_WATERMARK) or when the
provider's cache has gone cold anyway (CACHE_TTL_SECONDS since the previous
request), and then all at once; the message-count trigger waits for a cold
cache too. COMPACTION_TIMING = "eager" applies everything right away, for
providers without prompt caching.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from django.utils import timezone

from assistant.flows.prebuild import ask_worker_ahead, awaiting_worker, defer_to_worker
from assistant.models import Conversation, MetadataKeys
from assistant.ops import telemetry
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.store.deletion import deleted_error
from assistant.store.state import write_state
from assistant.strategies.emergency import (
    compact_if_flagged,
)
from assistant.strategies.shift import adopt_pending_summary, shift_window
from assistant.strategies.tool_results import apply_plan, compact_old_blocks
from assistant.window import (
    TOKEN_RATIO_DRIFT,
    Plan,
    Results,
    WindowState,
    consumed_tool_rows,
    decide,
    load_window,
    plan_compaction,
    require_saved,
    results_step,
    store_size,
    tail_tokens,
)
from assistant.window.ledger import Ledger, step_cost

logger = logging.getLogger(__name__)

T = TypeVar("T")


def ensure_context_summary(conversation: Conversation) -> str | None:
    """The pre-call hook: bring the context within budget and return the
    window summary the next request carries. Two queries when nothing is due.
    A deleted or purged conversation is refused first (`conversation_deleted`),
    by the query that loads the window."""
    require_saved(conversation)
    config = compaction_config()
    try:
        state = load_window(conversation.pk, config, live=True)
    except Conversation.DoesNotExist:
        raise deleted_error(conversation.pk) from None
    with telemetry.pre_call_hook(conversation.pk):
        summary, state = _ensure_context_summary(conversation, state, config)
        store_size(state)  # the admin list's figure: the size this call left
        return summary


def _ensure_context_summary(
    conversation: Conversation, state: WindowState, config: CompactionConfig
) -> tuple[str | None, WindowState]:
    """Decide on the window loaded once (assistant.window.decision), execute the
    plan: each step that changes the window is followed by a decision on the
    window it left. Returns the summary and the window as the call left it."""
    if state.meta.needs_emergency:
        compact_if_flagged(conversation)
        state = load_window(conversation.pk, config)
    remember_token_ratio(state)
    warn_implausible_usage(state)
    now = timezone.now()
    plan = decide(state, config, now)
    # Below the trigger, no voluntary batch while the worker builds the shift that
    # would rewrite it.
    batch = None
    if plan.results is not None and (
        plan.results.free or not (plan.worker_ahead and awaiting_worker(state))
    ):
        batch = compact_consumed_results(state, plan.results)
        state = batch or state
    plan = decide(state, config, now, first=plan)
    # A results batch rewrote the prefix from its first result on: the model's summary
    # of an offline split replaces the offline one in the same rewrite.
    replace = batch is not None and state.meta.offline_replacement is not None
    if (plan.adopt_pending or replace) and adopt_pending_summary(conversation.pk, config):
        split = state.through_id
        state = _compact_kept(state, _after_shift(state, cold=plan.cold), plan)
        plan = decide(state, config, now, first=plan, adopted=state.through_id != split)
    shift = plan.shift
    if shift is not None and shift.kind == "forced":
        if not shift.needed and plan.worker_ahead and defer_to_worker(state, config):
            # Compaction got the request under the trigger: the shift the trigger
            # calls for need not hold the chat up; the worker makes it.
            return state.summary, state
        # Under the lease the shift goes on unless another caller got the context
        # below what this one saw. Only a shift the request needs waits on another
        # process's summary.
        summary = shift_window(conversation.pk, config, shift)
        return summary, _compact_kept(state, _after_shift(state, cold=plan.cold), plan)
    # Past the trigger with a cached-suffix request, a pre-built summary was adopted
    # instead (its kept results compacted with it): it stood for the shift at the
    # trigger, and the plan decided after it holds only an early one.
    if shift is not None:  # an early shift, which pays
        if plan.worker_ahead and defer_to_worker(state, config):
            return state.summary, state
        summary = shift_window(conversation.pk, config, shift)
        return summary, _compact_kept(state, _after_shift(state, cold=plan.cold), plan)
    if plan.ask_worker:
        ask_worker_ahead(state)
    return state.summary, state


def _compact_kept(before: WindowState, after: WindowState, plan: Plan) -> WindowState:
    """After a shift (`before` -> `after`) the next request writes everything
    after the system part anyway: the consumed results the shift kept verbatim
    are compacted in the same step (any batch goes, as at the trigger), instead
    of breaking the freshly written prefix again a few calls later."""
    if after.through_id == before.through_id:
        return after
    short = short_of_the_shift(before, after, plan)
    if short is not None:
        after = compact_consumed_results(after, short, rewritten=True) or after
    results = results_step(after, after.config, free=True, everything=plan.cold)
    return compact_consumed_results(after, results, rewritten=True) or after


def short_of_the_shift(before: WindowState, after: WindowState, plan: Plan) -> Results | None:
    """A pre-built summary adopted for the planned shift, built on a split the
    chat has since moved past (the worker took a summarizer latency, the chat
    went on): the consumed tool results between its split and the planned one
    would have been summarized by the shift made now, so they are compacted
    in the same rewrite (their originals stay, recalled by handle). None when
    the shift reached the planned split."""
    shift = plan.shift
    if shift is None or shift.start is None or shift.start >= len(before.rows):
        return None
    first_kept = before.rows[shift.start].pk
    rows = [row for row in consumed_tool_rows(after.rows) if row.pk < first_kept]
    if not rows:
        return None
    compaction = plan_compaction(rows, after.config, keep_newest=0)
    return Results(compaction, free=True, everything=True, pays=False)


def remember_token_ratio(state: WindowState) -> None:
    """Store the provider's count over our estimate of the same request when
    it moved by more than a tenth, so that sizes estimated after the next
    compaction (when every count is stale) are scaled like the provider's."""
    measured = state.measured_token_ratio()
    stored = state.meta.stored_token_ratio or 1.0
    if measured is None or abs(measured - stored) <= TOKEN_RATIO_DRIFT * stored:
        return
    write_state(
        Conversation.objects.filter(pk=state.conversation_id),
        {MetadataKeys.TOKEN_RATIO: round(measured, 3)},
    )


def warn_implausible_usage(state: WindowState) -> None:
    """Log, once per conversation (a state flag, so across processes), a
    provider count that the window set aside as implausible: the host's
    usage wiring is wrong, and compaction goes on by our estimates. Ids and
    counts only."""
    implausible = state.implausible_count()
    if implausible is None or state.meta.implausible_usage_warned:
        return
    count, estimate = implausible
    logger.warning(
        "implausible_usage conversation=%s prompt_tokens=%s estimate=%s: the provider's count "
        "is far below the request sent, so the estimate is used; record the whole prompt "
        "(input plus cache_read_tokens and cache_write_tokens)",
        state.conversation_id,
        count,
        estimate,
    )
    write_state(
        Conversation.objects.filter(pk=state.conversation_id),
        {MetadataKeys.IMPLAUSIBLE_USAGE_WARNED: True},
    )
    state.columns[MetadataKeys.IMPLAUSIBLE_USAGE_WARNED] = True


def compact_consumed_results(
    state: WindowState, results: Results, *, rewritten: bool = False
) -> WindowState | None:
    """Execute a results step of the plan (assistant.window.decision.results_step),
    using what the worker prepared. Returns the new window, None if unchanged.
    `rewritten`: the next request writes the whole tail anyway (a shift was
    just made), so the step saves writes instead of breaking a cached prefix."""
    conversation_id = state.conversation_id
    if not results.plan:
        # Old images, documents and thinking change the context only when it may change
        # freely, or along with a batch of tool results (below).
        if results.free and compact_old_blocks(conversation_id):
            return load_window(conversation_id, state.config)
        return None
    if not results.goes:
        return None
    tail = tail_tokens(state, results.plan)
    ledger = Ledger.of(state.columns)
    if not apply_plan(conversation_id, results.plan, state.config):
        return None
    compact_old_blocks(conversation_id)
    after = load_window(conversation_id, state.config)
    freed = state.estimated_tokens() - after.estimated_tokens()
    cost = step_cost(tail, tail - freed, cold=rewritten, prices=state.cache_prices)
    _write_ledger(after, state, ledger, freed=freed, cost=cost)
    return after


def _after_shift(before: WindowState, *, cold: bool) -> WindowState:
    """Book a window shift in the ledger: everything after the system part
    changed (the summary leads), so the whole context is written again, and
    the summarizer read the newly summarized messages and the old summary."""
    after = load_window(before.conversation_id, before.config)
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
    _write_ledger(after, before, Ledger.of(after.columns), freed=old - new, cost=cost)
    return after


def _write_ledger(
    after: WindowState, before: WindowState, ledger: Ledger, *, freed: int, cost: float
) -> None:
    """Book a step (`before` -> `after`) in the database and in `after`, so the
    caller goes on with the window as it now is, without reading it again."""
    newest = before.rows[-1].pk if before.rows else 0
    value = ledger.after_step(
        before.rows, freed=freed, cost=cost, newest_id=newest, prices=before.cache_prices
    )
    write_state(
        Conversation.objects.filter(pk=before.conversation_id), {MetadataKeys.CACHE_LEDGER: value}
    )
    after.columns[MetadataKeys.CACHE_LEDGER] = value
