"""The pre-call flow, `ensure_context_summary`, run before every model call,
inside an agent turn too. It loads the window once and asks the decision for
its plan (assistant.window.decision), then runs the plan's steps in order,
each by one call into the module that owns it: apply the flagged emergency
level (then plan again on the window it left), note the provider's usage,
compact these results, adopt the pending summary (assistant.precall.steps),
leave the shift to the worker or ask it ahead (assistant.summary.worker),
shift here (assistant.precall.steps), write the ledger. It alone keeps
every request under the trigger plus the newest step, with no worker. Its
companions are the post-exchange flow (assistant.post_exchange.pipeline), run
by a worker after each exchange, and the overflow flow
(assistant.emergency.retry), which wraps the model call itself
(docs/architecture.rst).

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

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from django.utils import timezone

from assistant.emergency import compact_if_flagged
from assistant.history import deleted_error, one_rewrite, remember, saved_id, write_state
from assistant.models import Conversation, MetadataKeys
from assistant.ops import telemetry
from assistant.precall.steps import Shifted, adopt, compact_results, shift_here
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.summary import adoption, adopts, ask_after_shift, leave_to_worker
from assistant.text import estimate_tokens
from assistant.tool_results import planned_texts
from assistant.window import (
    AdoptPending,
    ApplyEmergency,
    CompactionPlan,
    CompactResults,
    Context,
    MoveWindow,
    NoteUsage,
    Plan,
    Shift,
    WindowState,
    WriteLedger,
    context_from_state,
    load_window,
    plan_call,
    results_step,
    store_size,
)

logger = logging.getLogger(__name__)


# Given the window and the shift the hook would make: True when the provider made it.
OnDemand = Callable[[WindowState, Shift], bool]


def ensure_context_summary(
    conversation: Conversation, *, on_demand: OnDemand | None = None
) -> str | None:
    """The pre-call hook: bring the context within budget and return the
    window summary the next request carries. Two queries when nothing is due.
    A deleted or purged conversation is refused first (`conversation_deleted`),
    by the query that loads the window.
    `on_demand` (chat_step under PROVIDER_COMPACTION "auto"): asked first to make a
    window shift as the provider's compaction; ours makes it when it returns False."""
    run = _hook(conversation, on_demand)
    return run.shifted.summary if run.shifted else run.state.summary


def prepare_context(conversation: Conversation, *, on_demand: OnDemand | None = None) -> Context:
    """The pre-call hook, then the context of the next request from the window the
    hook left: `ensure_context_summary` and `build_context` with the window loaded
    once for both (two queries when nothing is due)."""
    return context_from_state(_hook(conversation, on_demand).state)


def _hook(conversation: Conversation, on_demand: OnDemand | None) -> _Run:
    saved_id(conversation)
    with telemetry.pre_call_hook(conversation.pk):
        run = _run_plan(conversation, compaction_config(), on_demand)
        store_size(run.state)  # the admin list's figure: the size this call left
        return run


@dataclass
class _Run:
    """The flow's place in its plan: the window the last step left, whether a
    step changed it (`changed`; `adopted`: by adopting the pre-built summary,
    the split moved), the shift made here, and the ledger as loaded."""

    state: WindowState
    loaded_ledger: Any
    changed: bool = False
    adopted: bool = False
    shifted: Shifted | None = None
    on_demand: OnDemand | None = None  # the provider's compaction, for the window step


def _run_plan(
    conversation: Conversation, config: CompactionConfig, on_demand: OnDemand | None = None
) -> _Run:
    """Plan once on the window loaded once, then run the plan's steps in order."""
    try:
        state, plan = plan_call(conversation.pk, config, timezone.now(), live=True)
    except Conversation.DoesNotExist:
        raise deleted_error(conversation.pk) from None
    if plan.steps and isinstance(plan.steps[0], ApplyEmergency):
        compact_if_flagged(conversation)
        state, plan = plan_call(conversation.pk, config, timezone.now(), emergency_applied=True)
    run = _Run(state, state.columns.get(MetadataKeys.CACHE_LEDGER), on_demand=on_demand)
    # One rewrite: a shift's event reads the request before the steps and after them all.
    with one_rewrite(conversation.pk, plan.tokens, lambda: run.state.context_tokens()):
        _run_steps(run, plan)
    return run


def _run_steps(run: _Run, plan: Plan) -> None:
    for step in plan.steps:
        match step:
            case NoteUsage():
                note_usage(run.state, step)
            case CompactResults(results=results):
                after = compact_results(run.state, results)
                run.changed, run.state = after is not None, after or run.state
            case AdoptPending():
                adopted = adopt(run.state, step, _window_step(plan), changed=run.changed)
                if adopted is not None:
                    run.state, run.adopted, run.changed = adopted.state, adopted.moved, True
            case MoveWindow():
                _move_window(run, step)
            case WriteLedger():
                _write_ledger(run)


def _window_step(plan: Plan) -> MoveWindow:
    """The plan's window step (one follows every adoption)."""
    return next(step for step in plan.steps if isinstance(step, MoveWindow))


def _move_window(run: _Run, step: MoveWindow) -> None:
    """The window step: with a worker ahead, leave it a shift the request does
    not need (or ask it ahead); else, or when the worker cannot take it, shift
    here."""
    window: MoveWindow | None = step
    changed = run.changed
    if _provider_shift(run, step):
        return
    if step.worker_ahead:
        window = leave_to_worker(run.state, step, changed=changed, adopted=run.adopted)
        changed = False  # checked on the window there
    if window is None:
        return
    shifted = shift_here(run.state, window, changed=changed, adopted=run.adopted)
    if shifted is not None:
        ask_after_shift(run.state, shifted.state, step.worker_ahead)
        run.shifted, run.state = shifted, shifted.state


def _provider_shift(run: _Run, step: MoveWindow) -> bool:
    """The shift the window step would make, made as the provider's on-demand
    compaction (PROVIDER_COMPACTION "auto"); False when there is none to make, or
    the provider did not compact (ours makes it)."""
    if run.on_demand is None:
        return False
    due = step.on(run.state, run.state.config, adopted=run.adopted) if run.changed else step
    if due.shift is None or not run.on_demand(run.state, due.shift):
        return False
    state = load_window(run.state.conversation_id, run.state.config)
    run.state, run.shifted = state, Shifted(state.summary, state)
    return True


@dataclass(frozen=True)
class NextRequest:
    """What the next request carries (`context`), as the pre-call hook will leave it,
    and the steps it will make first that change more than its summary (`first`, in
    words: the tool results it compacts, a shift it makes with the summarizer)."""

    context: Context
    tokens: int  # its size (WindowState.context_tokens)
    first: list[str]


def next_request(conversation: Conversation) -> NextRequest:
    """The next request by the hook's own plan at this moment (`plan_call`), without
    running it (no write, no summarizer call): the context inspector's view. Its
    steps are made in memory, in the hook's order: the consumed tool results it
    compacts (the worker's prepared texts, else their truncation), the pending summary
    it adopts (a cold cache, a results batch that rewrote the prefix, or a shift at the
    trigger the worker pre-built), bounded as the adoption bounds it (`adoption`), and
    the kept results compacted with it. Showing the stored window instead showed what
    the previous request carried, not the next. Only what the summarizer would write
    first (a shift made here, a result under a "summarize" policy) is said in `first`,
    not shown."""
    state, plan = plan_call(conversation.pk, compaction_config(), timezone.now())
    config = state.config
    first = []
    if plan.steps and isinstance(plan.steps[0], ApplyEmergency):
        first.append("emergency level 1 (flagged after an overflow)")
    changed = False
    if plan.results is not None and plan.results.goes and plan.results.plan:
        results = plan.results.plan
        first.append(
            f"{len(results.compact) + len(results.stub)} consumed tool result(s) compacted"
        )
        state, changed = _compacted_in_memory(state, results, config, first)
    forced = plan.shift is not None and plan.shift.kind == "forced"
    replaces = changed and state.meta.offline_replacement is not None
    found = adoption(state) if plan.adopt_pending or forced or replaces else None
    if adopts(state, found) and found is not None:
        adopted = found.window(state)
        if adopted.through_id != state.through_id:  # as `_compact_kept` after a shift
            kept = results_step(adopted, config, free=True, cold=plan.cold)
            if kept.plan:
                adopted = _compacted_in_memory(adopted, kept.plan, config, first)[0]
        state = adopted
    elif plan.shift is not None and plan.shift.start is not None:
        first.append("a window shift (a new summary)")
    return NextRequest(context_from_state(state, allow_pending=True), state.context_tokens(), first)


def _compacted_in_memory(
    state: WindowState, results: CompactionPlan, config: CompactionConfig, first: list[str]
) -> tuple[WindowState, bool]:
    """`state` with these results compacted as the hook's results step writes them,
    in memory, and whether any was; the results the summarizer summarizes first are
    named in `first` and left verbatim."""
    texts, summarized = planned_texts(results.compact, results.stub, config)
    if summarized:
        first.append(f"{summarized} tool result(s) summarized first (shown verbatim here)")
    if not texts:
        return state, False
    rows = []
    for row in state.rows:
        if row.pk in texts:
            row = copy.copy(row)
            text, row.compaction = texts[row.pk]
            row.compacted_content = row.model_content = text  # as `model_view` reads it
            row.token_estimate = estimate_tokens(text) + row.blocks_tokens
        rows.append(row)
    # As the results step marks it: the provider's counts so far are stale.
    columns = {**state.columns, MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: state.rows[-1].pk}
    return replace(state, rows=rows, columns=columns), True


def note_usage(state: WindowState, usage: NoteUsage) -> None:
    """Store the provider's count over our estimate (`NoteUsage.ratio`); or log,
    once per conversation (a state flag, so across processes), a provider
    count that the window set aside as implausible: the host's usage wiring is
    wrong, and compaction goes on by our estimates. Ids and counts only."""
    values: dict[str, Any] = {}
    if usage.ratio is not None:
        values[MetadataKeys.TOKEN_RATIO] = usage.ratio
    if usage.implausible is not None:
        count, estimate = usage.implausible
        logger.warning(
            "implausible_usage conversation=%s prompt_tokens=%s estimate=%s: the provider's "
            "count is far below the request sent, so the estimate is used; record the whole "
            "prompt (input plus cache_read_tokens and cache_write_tokens)",
            state.conversation_id,
            count,
            estimate,
        )
        values[MetadataKeys.IMPLAUSIBLE_USAGE_WARNED] = True
    write_state(Conversation.objects.filter(pk=state.conversation_id), values)
    if usage.implausible is not None:
        remember(state.columns, {MetadataKeys.IMPLAUSIBLE_USAGE_WARNED: True})


def _write_ledger(run: _Run) -> None:
    """Write the ledger as the steps booked it in the window they left: one
    write for the call, none when no step booked anything."""
    value = run.state.columns.get(MetadataKeys.CACHE_LEDGER)
    if value != run.loaded_ledger:
        write_state(
            Conversation.objects.filter(pk=run.state.conversation_id),
            {MetadataKeys.CACHE_LEDGER: value},
        )
