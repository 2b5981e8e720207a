"""The two baselines, simulated in memory (they are not part of the product).

- `send_everything`: every model call receives the system prompt and the whole
  history, verbatim.
- `reference`: the reference strategy as DESIGN section 6 describes it,
  without our improvements: tool-result compaction and dedup as in strategy 1;
  then, past the trigger (50,000 estimated tokens or 40 messages), keep the
  last 40% of the messages (at least 6, no token cap), snapped only so a tool
  call and its results stay together, and re-summarize the WHOLE old window
  from scratch whenever the split moves. Sizes are chars/4 estimates only,
  and no identifier is carried from one summary to the next.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from bench.fake_summarizer import FakeSummarizer
from bench.record import Replay
from bench.workload import Workload

DEFAULTS = {
    "TOOL_RESULT_CHAR_THRESHOLD": 1500,
    "CONTEXT_TOKEN_THRESHOLD": 50_000,
    "MAX_MESSAGES_BEFORE_SUMMARY": 40,
    "MIN_RECENT_MESSAGES": 6,
    "RECENT_FRACTION": 0.4,
    "MIN_CALLS_TO_DEDUP": 2,
    "CHARS_PER_TOKEN": 4,
}
DEDUP_STUB = "[Already retrieved earlier — omitted to reduce context]"


def send_everything(workload: Workload) -> Replay:
    started = time.perf_counter()
    replay = Replay("send everything", workload.name)
    history: list[dict[str, Any]] = []
    counts: list[int] = []
    from bench.record import message_tokens

    for turn in workload.turns:
        first = True
        for message in turn.messages:
            if message["role"] == "assistant":
                replay.record_call([workload.system_prompt], history, message_token_counts=counts)
                if first and turn.asks:
                    asked = [workload.facts[f] for f in turn.asks]
                    replay.check_facts(asked, [], history)
                first = False
            history.append(message)
            counts.append(message_tokens(message))
    replay.seconds = time.perf_counter() - started
    return replay


def _canonical(arguments: Any) -> str:
    if isinstance(arguments, str):
        arguments = json.loads(arguments or "{}")
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"))


def _render(messages: list[dict[str, Any]]) -> str:
    from assistant.llm.prompts import render_transcript

    return render_transcript(messages)


class _ToolCompaction:
    """Strategy 1 exactly as the product runs it with its default policy
    (prune): after each completed exchange, results of at least the
    threshold become the product's own truncation (`truncate_tool_result`),
    and older copies of identical calls become the stub. The reference gets
    the same strategy 1 as ours, so the comparison is about strategy 2."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.calls: dict[str, dict[str, Any]] = {}  # tool_call_id -> call

    def __call__(self, history: list[dict[str, Any]]) -> None:
        from assistant.compaction import truncate_tool_result

        threshold = self.config["TOOL_RESULT_CHAR_THRESHOLD"]
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for message in history:
            for call in message.get("tool_calls") or []:
                self.calls[call["id"]] = call
            if message["role"] != "tool":
                continue
            call = self.calls[message["tool_call_id"]]
            groups.setdefault((call["name"], _canonical(call["arguments"])), []).append(message)
        stubbed = set()
        for copies in groups.values():
            if len(copies) >= self.config["MIN_CALLS_TO_DEDUP"]:
                for message in copies[:-1]:
                    stubbed.add(id(message))
                    if message["content"] != DEDUP_STUB:
                        message["content"] = DEDUP_STUB
                        message["_compacted"] = True
        for message in history:
            if (
                message["role"] == "tool"
                and not message.get("_compacted")
                and id(message) not in stubbed
                and len(message["content"]) >= threshold
            ):
                message["content"] = truncate_tool_result(message["content"])
                message["_compacted"] = True


def reference(
    workload: Workload,
    summarizer: FakeSummarizer,
    *,
    config: dict[str, Any] | None = None,
    hook_every_call: bool = False,
    name: str = "reference",
) -> Replay:
    """Replay the reference strategy; `summarizer` is shared with nothing else."""
    cfg = {**DEFAULTS, **(config or {})}
    started = time.perf_counter()
    replay = Replay(name, workload.name)
    compact = _ToolCompaction(cfg)
    history: list[dict[str, Any]] = []
    split = 0
    summary: str | None = None

    def estimate(messages: list[dict[str, Any]]) -> int:
        chars = sum(
            len(m["content"]) + (len(json.dumps(m["tool_calls"])) if m.get("tool_calls") else 0)
            for m in messages
        )
        return math.ceil(chars / cfg["CHARS_PER_TOKEN"])

    def hook() -> None:
        nonlocal split, summary
        n = len(history)
        context = estimate(history[split:]) + math.ceil(len(summary or "") / 4)
        if context <= cfg["CONTEXT_TOKEN_THRESHOLD"] and n <= cfg["MAX_MESSAGES_BEFORE_SUMMARY"]:
            return
        keep = max(cfg["MIN_RECENT_MESSAGES"], round(n * cfg["RECENT_FRACTION"]))
        wanted = max(0, n - keep)
        while wanted > 0 and history[wanted]["role"] == "tool":
            wanted -= 1  # never separate a tool call from its results
        if wanted <= split:
            return
        # The reference re-reads everything before the split, every time it moves.
        summary, _, _ = summarizer.summarize_text(_render(history[:wanted]), kind="window")
        split = wanted
        replay.summary_shifts += 1

    for turn in workload.turns:
        first = True
        for message in turn.messages:
            if message["role"] == "assistant":
                if first or hook_every_call:
                    hook()
                system = [workload.system_prompt] + ([summary] if summary else [])
                window = history[split:]
                replay.record_call(system, window)
                if first and turn.asks:
                    asked = [workload.facts[f] for f in turn.asks]
                    replay.check_facts(asked, [summary or ""], window)
                first = False
            history.append(dict(message))
        compact(history)
    replay.summarizer = summarizer.totals()
    replay.seconds = time.perf_counter() - started
    return replay


def reference_ensure_summary(conversation_id: int, summarizer: FakeSummarizer) -> str | None:
    """The reference's pre-exchange hook against the database, for the
    concurrency measure: check the cached split on the loaded row, summarize
    the whole old window if it moved, save. No lease: check-then-act."""
    from assistant.models import Conversation, Message, MetadataKeys

    cfg = DEFAULTS
    conversation = Conversation.objects.get(pk=conversation_id)
    rows = list(Message.objects.filter(conversation_id=conversation_id).model_view())
    history = [
        {
            "role": row.role,
            "content": row.model_content,
            "tool_calls": row.tool_calls,
            "tool_call_id": row.tool_call_id,
            "tool_name": row.tool_name,
        }
        for row in rows
    ]
    n = len(history)
    chars = sum(len(m["content"]) for m in history)
    if chars / cfg["CHARS_PER_TOKEN"] <= cfg["CONTEXT_TOKEN_THRESHOLD"] and n <= 40:
        return conversation.compaction_summary
    keep = max(cfg["MIN_RECENT_MESSAGES"], round(n * cfg["RECENT_FRACTION"]))
    wanted = max(0, n - keep)
    while wanted > 0 and history[wanted]["role"] == "tool":
        wanted -= 1
    if wanted == 0:
        return conversation.compaction_summary
    through = rows[wanted - 1].pk
    if conversation.compaction_through_message_id == through:
        return conversation.compaction_summary
    summary, _, _ = summarizer.summarize_text(_render(history[:wanted]), kind="window")
    conversation.metadata[MetadataKeys.COMPACTION_SUMMARY] = summary
    conversation.metadata[MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID] = through
    conversation.save(update_fields=["metadata"])
    return summary
