"""The window: what the next request carries, how large it is, and what is done
about it, decided in one place.

- loading: the window loaded from the database once (`WindowState`,
  `load_window`), its one size (`context_tokens`, `context_size`);
- decision: `decide(state, config, now) -> Plan`, whose ordered steps the
  pre-call hook runs, which the worker and the lease recheck ask, and the dry
  run puts into words; payoff and ledger: whether a voluntary step pays under
  prompt caching, and what the steps so far saved;
- split, projection: the triggers, where a split may fall, and the splits of
  a summary the worker builds ahead;
- results: which consumed tool results to compact or stub (`plan_compaction`),
  applied by assistant.tool_results;
- context: the request itself, in a fixed, cache-friendly order;
- lifetime: each request's cache lifetime, and the cache read it expects;
- limits: the figures the size is compared with, for the answering model;
- status: what a chat's /status command shows.
decision, payoff, ledger, split, projection and results read the loaded value
and make no query; loading, context (the turn's start, when the split falls
inside it), limits (the newest answer's model) and status read rows.

May import: metadata_keys, models, providers, settings, text.
See docs/architecture.rst.
"""

from assistant.window.context import (
    Context,
    IncompleteToolCall,
    as_neutral,
    build_context,
    context_before,
    context_from_state,
    context_tokens,
)
from assistant.window.decision import (
    ADOPT_PENDING,
    AT_TRIGGER,
    BATCH_IN_SHIFT,
    COLD_CACHE,
    COUNT_TRIGGER,
    EAGER,
    EARLY_PAYS,
    SHIFT_WITHIN_LATENCY,
    SOFT_WATERMARK,
    SUFFIX_FIRST,
    WATERMARK,
    AdoptPending,
    ApplyEmergency,
    CompactResults,
    MoveWindow,
    NoteUsage,
    Plan,
    Results,
    Shift,
    WriteLedger,
    decide,
    early_shift,
    plan_call,
    results_step,
    shift_in_sight,
    shift_within_latency,
    split_for,
)
from assistant.window.ledger import Ledger, step_cost
from assistant.window.lifetime import (
    LIFETIME_KEY,
    LOADED,
    LOADED_USAGE,
    call_gaps,
    choose_lifetime,
    expected_cache_read,
    lifetime_cost,
    lifetime_in_use,
    prompt_cache_key,
    request_lifetime,
    with_lifetime,
)
from assistant.window.limits import (
    MODEL_KEY,
    ceilinged,
    chat_model,
    context_ceiling,
    conversation_config,
    current_limits,
    limits_for,
    request_shape,
    smallest_ceiling,
)
from assistant.window.loading import (
    TOKEN_RATIO_DRIFT,
    SizeBasis,
    WindowState,
    add_to_size,
    context_size,
    load_window,
    measure_size,
    measure_unsized,
    refresh_size,
    refreshed_window,
    require_saved,
    saved_window,
    store_size,
)
from assistant.window.payoff import tail_tokens
from assistant.window.projection import adopted_split, worker_split
from assistant.window.results import (
    STUB,
    CompactionPlan,
    canonical_arguments,
    compacted_ceiling_tokens,
    consumed_boundary,
    consumed_tool_rows,
    plan_compaction,
    stub_text,
)
from assistant.window.split import (
    anticipated_keep,
    choose_split,
    should_shift,
    split_boundaries,
    split_parts,
    trigger_estimate,
    verbatim_budget,
)
from assistant.window.status import ContextStatus, context_status

__all__ = [
    "ADOPT_PENDING",
    "AT_TRIGGER",
    "BATCH_IN_SHIFT",
    "COLD_CACHE",
    "COUNT_TRIGGER",
    "EAGER",
    "EARLY_PAYS",
    "LIFETIME_KEY",
    "LOADED",
    "LOADED_USAGE",
    "MODEL_KEY",
    "SHIFT_WITHIN_LATENCY",
    "SOFT_WATERMARK",
    "STUB",
    "SUFFIX_FIRST",
    "TOKEN_RATIO_DRIFT",
    "WATERMARK",
    "AdoptPending",
    "ApplyEmergency",
    "CompactResults",
    "CompactionPlan",
    "Context",
    "ContextStatus",
    "IncompleteToolCall",
    "Ledger",
    "MoveWindow",
    "NoteUsage",
    "Plan",
    "Results",
    "Shift",
    "SizeBasis",
    "WindowState",
    "WriteLedger",
    "add_to_size",
    "adopted_split",
    "anticipated_keep",
    "as_neutral",
    "build_context",
    "call_gaps",
    "canonical_arguments",
    "ceilinged",
    "chat_model",
    "choose_lifetime",
    "choose_split",
    "compacted_ceiling_tokens",
    "consumed_boundary",
    "consumed_tool_rows",
    "context_before",
    "context_ceiling",
    "context_from_state",
    "context_size",
    "context_status",
    "context_tokens",
    "conversation_config",
    "current_limits",
    "decide",
    "early_shift",
    "expected_cache_read",
    "lifetime_cost",
    "lifetime_in_use",
    "limits_for",
    "load_window",
    "measure_size",
    "measure_unsized",
    "plan_call",
    "plan_compaction",
    "prompt_cache_key",
    "refresh_size",
    "refreshed_window",
    "request_lifetime",
    "request_shape",
    "require_saved",
    "results_step",
    "saved_window",
    "shift_in_sight",
    "shift_within_latency",
    "should_shift",
    "smallest_ceiling",
    "split_boundaries",
    "split_for",
    "split_parts",
    "step_cost",
    "store_size",
    "stub_text",
    "tail_tokens",
    "trigger_estimate",
    "verbatim_budget",
    "with_lifetime",
    "worker_split",
]
