"""Whether a voluntary step pays: where the window heads without it (`outlook`),
what it saves against what it costs (`step_pays`, the break-even rule of
docs/compaction.rst), and the tail a results batch makes the next request
write again (`tail_tokens`). Pure: reads a WindowState, writes nothing."""

from __future__ import annotations

from assistant.models import Message
from assistant.settings.conf import CompactionConfig
from assistant.window.ledger import Ledger, Outlook
from assistant.window.loading import WindowState
from assistant.window.results import CompactionPlan
from assistant.window.split import trigger_estimate, verbatim_budget


def tail_tokens(state: WindowState, plan: CompactionPlan) -> int:
    """The verbatim tokens from the first provider message the plan changes on
    (consecutive tool results travel in one message)."""
    changed = {row.pk for row in [*plan.compact, *plan.stub]}
    verbatim = state.verbatim
    first = next(index for index, row in enumerate(verbatim) if row.pk in changed)
    while first > 0 and verbatim[first - 1].role == verbatim[first].role == Message.Role.TOOL:
        first -= 1
    return sum(row.token_estimate for row in verbatim[first:])


def step_pays(
    state: WindowState,
    config: CompactionConfig,
    freed: int,
    cost: float,
    *,
    prefix_life: float | None = None,
) -> bool:
    """Whether a voluntary step that frees `freed` tokens at `cost` (its
    rewrite and summarizer input, `step_cost`) pays for itself: what it is
    expected to save on its own (`Outlook.saves`, within `prefix_life` when
    the next rewrite undoes its gain) reaches its cost, and the
    conversation's savings so far cover it (the ledger), so that no
    conversation costs more than sending everything, even one that ends
    right after the step."""
    prices = state.cache_prices
    ledger = Ledger.of(state.columns)
    return ledger.affords(state.rows, cost, prices) and (
        outlook(state, config, ledger).saves(freed, prices, prefix_life=prefix_life) >= cost
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
