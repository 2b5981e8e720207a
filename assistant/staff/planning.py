"""What a compaction run would do, without doing it: `compact_conversation
--dry-run`. Built from the decisions the real run takes (the tool-result
plan of compact_tool_results; then, on the window as that compaction would
leave it, the pre-call hook's plan, `assistant.window.decide`, put into words, with a
failed summary's back-off), so the dry run and the real run cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from assistant.models import Conversation, Message, MetadataKeys, ref
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.summary import failure_blocks
from assistant.text import estimate_tokens, truncate_tool_result
from assistant.tool_results import plan_tool_results
from assistant.window import CompactionPlan, Plan, WindowState, decide, load_window, stub_text


@dataclass(frozen=True)
class RunPlan:
    level: int
    context_tokens: int  # now
    to_compact: int  # tool results truncated or summarized
    to_summarize_by_llm: int  # of those, under the "summarize" policy
    to_stub: int  # older copies of repeated calls
    window: str  # what happens to the window summary, in words
    projected_tokens: int | None = None  # after the tool results (None: unknown)

    def describe(self, conversation_id: int) -> str:
        projected = (
            f" (about {self.projected_tokens} after compacting tool results)"
            if self.projected_tokens is not None and self.projected_tokens != self.context_tokens
            else ""
        )
        llm = f", {self.to_summarize_by_llm} of them by the LLM" if self.to_summarize_by_llm else ""
        return (
            f"Dry run, conversation {conversation_id} (level {self.level}): context "
            f"{self.context_tokens} tokens{projected}; {self.to_compact} tool result(s) "
            f"would be compacted{llm}, {self.to_stub} repeated result(s) stubbed; "
            f"window summary: {self.window}. Nothing was changed."
        )


def plan_run(conversation: Conversation, level: int = 0) -> RunPlan:
    config = compaction_config()
    state = load_window(conversation.pk, config)
    tokens = state.context_tokens()
    if level:
        # Emergency levels compact every tool result, current turn included.
        tools = plan_tool_results(conversation, include_current_turn=True, min_chars=0)
        what = (
            "regenerated keeping the turn's user message and the newest step"
            if level == 2
            else f"regenerated keeping {config.EMERGENCY_RECENT_FRACTION:.0%} of the window"
        )
        return _plan(level, tokens, tools, config, f"{what}, if that makes the context smaller")
    tools = plan_tool_results(conversation)
    if state.columns.get(MetadataKeys.NEEDS_EMERGENCY_COMPACTION):
        return _plan(level, tokens, tools, config, "emergency level 1 first (flagged)")
    projected = _apply_in_memory(state, tools, config)
    window = _window_decision(state, decide(state, config, timezone.now()))
    summarized = window if isinstance(window, int) else 0
    words = (
        f"due: {summarized} message(s) would be summarized (kept if the summary is shorter)"
        if summarized
        else str(window)  # words: an int is a count of messages, never 0
    )
    return _plan(level, tokens, tools, config, words, projected=projected)


def _window_decision(state: WindowState, plan: Plan) -> str | int:
    """The window step of the pre-call hook's plan, in words (an int: how
    many messages it would summarize)."""
    pending = state.meta.has_pending_summary
    if plan.shift is not None and plan.shift.kind == "forced":
        if pending:
            return "due: the pre-built summary would be adopted"
        if failure_blocks(state):
            return "due, but waiting after a failed summary (nothing would change)"
        return plan.shift.start or "due, but the split cannot move (nothing would change)"
    if plan.adopt_pending:
        return "not due; the pre-built summary would be adopted (the prompt cache is cold)"
    if plan.shift is not None:
        return "not due, but an early shift pays and would be made"
    return "not due"


def _plan(
    level: int,
    tokens: int,
    tools: CompactionPlan,
    config: CompactionConfig,
    window: str,
    *,
    projected: int | None = None,
) -> RunPlan:
    by_llm = sum(1 for row in tools.compact if config.policy_for(row.tool_name) == "summarize")
    return RunPlan(level, tokens, len(tools.compact), by_llm, len(tools.stub), window, projected)


def _apply_in_memory(
    state: WindowState, tools: CompactionPlan, config: CompactionConfig
) -> int | None:
    """Give the window's rows the token estimates the real compaction would
    store (stubs, prepared texts and truncations are known in advance; a
    result is never replaced by something longer); like the real run, a
    compaction makes earlier provider counts stale. None when an LLM summary
    of unknown size is part of it: the current estimate stands in for it."""
    if not tools:
        return state.context_tokens()
    estimates = {row.pk: estimate_tokens(stub_text(row.pk)) for row in tools.stub}
    unknown = False
    to_truncate = []
    for row in tools.compact:
        if row.prepared_compaction and row.prepared_token_estimate is not None:
            estimates[row.pk] = row.prepared_token_estimate
        elif config.policy_for(row.tool_name) == "summarize":
            unknown = True
        else:
            to_truncate.append(row.pk)
    for pk, content in Message.objects.filter(pk__in=to_truncate).values_list("id", "content"):
        estimates[pk] = estimate_tokens(truncate_tool_result(content, config, handle_ref=ref(pk)))
    for row in state.rows:
        if row.pk in estimates and estimates[row.pk] < row.token_estimate:
            row.token_estimate = estimates[row.pk]
    if state.rows:
        epoch = {MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: state.rows[-1].pk}
        state.columns = {**state.columns, **epoch}
    return None if unknown else state.context_tokens()
