"""The two baselines, simulated in memory (they are not part of the product).

- `send_everything`: every model call receives the system prompt and the whole
  history, verbatim.
- `reference`: the reference strategy as docs/compaction.rst describes it,
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
from bench.payload import CostMeter
from bench.record import Replay
from bench.sessions import EVERYTHING
from bench.strategies import PayloadBuilder, Request, Strategy
from demo.workload import Workload

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
    meter, builder = CostMeter(), PayloadBuilder()
    history: list[dict[str, Any]] = []
    counts: list[int] = []
    from bench.record import message_tokens

    for turn in workload.turns:
        first = True
        for message in turn.messages:
            if message["role"] == "assistant":
                replay.record_call([workload.system_prompt], history, message_token_counts=counts)
                meter.record(builder.build(Request(workload.system_prompt, [], history)))
                if first and turn.asks:
                    asked = [workload.facts[f] for f in turn.asks]
                    replay.check_facts(asked, [], history)
                first = False
            history.append(message)
            counts.append(message_tokens(message))
    replay.seconds = time.perf_counter() - started
    replay.extra["cost"] = meter.as_dict()
    return replay


def _canonical(arguments: Any) -> str:
    if isinstance(arguments, str):
        arguments = json.loads(arguments or "{}")
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"))


def _render(messages: list[dict[str, Any]]) -> str:
    from assistant.providers.summary_prompt import render_transcript

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
        """Rewrites `history` in place, replacing (never mutating) the message
        dicts it compacts: a payload built before keeps what it sent."""
        from assistant.text.truncation import truncate_tool_result

        threshold = self.config["TOOL_RESULT_CHAR_THRESHOLD"]
        groups: dict[tuple[str, str], list[int]] = {}
        for index, message in enumerate(history):
            for call in message.get("tool_calls") or []:
                self.calls[call["id"]] = call
            if message["role"] != "tool":
                continue
            call = self.calls[message["tool_call_id"]]
            groups.setdefault((call["name"], _canonical(call["arguments"])), []).append(index)
        stubbed = set()
        for copies in groups.values():
            if len(copies) >= self.config["MIN_CALLS_TO_DEDUP"]:
                for index in copies[:-1]:
                    stubbed.add(index)
                    if history[index]["content"] != DEDUP_STUB:
                        history[index] = _rewritten(history[index], DEDUP_STUB)
        for index, message in enumerate(history):
            if (
                message["role"] == "tool"
                and not message.get("_compacted")
                and index not in stubbed
                and len(message["content"]) >= threshold
            ):
                history[index] = _rewritten(message, truncate_tool_result(message["content"]))


def _rewritten(message: dict[str, Any], content: str) -> dict[str, Any]:
    fresh = {k: v for k, v in message.items() if k != "_tokens"}
    return {**fresh, "content": content, "_compacted": True}


def _estimate(messages: list[dict[str, Any]], cfg: dict[str, Any]) -> int:
    chars = sum(
        len(m["content"]) + (len(json.dumps(m["tool_calls"])) if m.get("tool_calls") else 0)
        for m in messages
    )
    return math.ceil(chars / cfg["CHARS_PER_TOKEN"])


def _reference_hook(
    history: list[dict[str, Any]],
    split: int,
    summary: str | None,
    summarizer: FakeSummarizer,
    cfg: dict[str, Any],
) -> tuple[int, str | None]:
    """The reference's pre-call hook: the new (split, summary)."""
    n = len(history)
    context = _estimate(history[split:], cfg) + math.ceil(len(summary or "") / 4)
    if context <= cfg["CONTEXT_TOKEN_THRESHOLD"] and n <= cfg["MAX_MESSAGES_BEFORE_SUMMARY"]:
        return split, summary
    keep = max(cfg["MIN_RECENT_MESSAGES"], round(n * cfg["RECENT_FRACTION"]))
    wanted = max(0, n - keep)
    while wanted > 0 and history[wanted]["role"] == "tool":
        wanted -= 1  # never separate a tool call from its results
    if wanted <= split:
        return split, summary
    # The reference re-reads everything before the split, every time it moves.
    summary, _, _ = summarizer.summarize_text(_render(history[:wanted]), kind="window")
    return wanted, summary


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
    meter, builder = CostMeter(), PayloadBuilder()
    compact = _ToolCompaction(cfg)
    history: list[dict[str, Any]] = []
    split = 0
    summary: str | None = None

    for turn in workload.turns:
        first = True
        for message in turn.messages:
            if message["role"] == "assistant":
                if first or hook_every_call:
                    moved_from = split
                    split, summary = _reference_hook(history, split, summary, summarizer, cfg)
                    replay.summary_shifts += split != moved_from
                system = [workload.system_prompt] + ([summary] if summary else [])
                window = history[split:]
                replay.record_call(system, window)
                meter.record(
                    builder.build(
                        Request(workload.system_prompt, [summary] if summary else [], window)
                    )
                )
                if first and turn.asks:
                    asked = [workload.facts[f] for f in turn.asks]
                    replay.check_facts(asked, [summary or ""], window)
                first = False
            history.append(dict(message))
        compact(history)
    replay.summarizer = summarizer.totals()
    replay.seconds = time.perf_counter() - started
    replay.extra["cost"] = meter.as_dict()
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
    conversation.compaction_summary = summary
    conversation.compaction_through_message_id = through
    # The reference's save of the loaded row, the summary and its split alone.
    conversation.save(
        update_fields=[MetadataKeys.COMPACTION_SUMMARY, MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID]
    )
    return summary


class Everything(Strategy):
    """Sends the whole history, verbatim, at every model call."""

    name = EVERYTHING

    def __init__(self, system: str) -> None:
        self.system = system

    def request(self, history: list[dict[str, Any]]) -> Request:
        return Request(self.system, [], list(history))


class Reference(Strategy):
    """The reference strategy of `reference()`, as a strategy of the real-session
    replay: its hook before every model call, strategy 1 after each turn."""

    name = "reference"

    def __init__(
        self, system: str, summarizer: FakeSummarizer, config: dict[str, Any] | None = None
    ) -> None:
        self.system = system
        self.summarizer = summarizer
        self.cfg = {**DEFAULTS, **(config or {})}
        self.compact = _ToolCompaction(self.cfg)
        self.history: list[dict[str, Any]] = []  # copies: strategy 1 rewrites them
        self.split = 0
        self.summary: str | None = None

    def _sync(self, history: list[dict[str, Any]]) -> None:
        self.history.extend(dict(m) for m in history[len(self.history) :])

    def request(self, history: list[dict[str, Any]]) -> Request:
        self._sync(history)
        self.split, self.summary = _reference_hook(
            self.history, self.split, self.summary, self.summarizer, self.cfg
        )
        return Request(
            self.system, [self.summary] if self.summary else [], self.history[self.split :]
        )

    def end_turn(self, history: list[dict[str, Any]]) -> None:
        self._sync(history)
        self.compact(self.history)
