"""OpenHands' `LLMSummarizingCondenser`, ported from its source with its defaults.

Source: OpenHands/OpenHands @ 76483ad8f5f51b47b20f29acf2fa51c770a5aa67,
`openhands/memory/condenser/impl/llm_summarizing_condenser.py` (the condenser,
its prompt), `openhands/memory/condenser/condenser.py` (`RollingCondenser`),
and @ 48940bd676b1b20403e047262be3c786115cab42 `openhands/memory/view.py`
(`View.from_events`); the request is built as
`openhands/memory/conversation_memory.py` @ 2097b44a9002557ff91bed407b92cd5b885a6787
builds it. OpenHands is not installable here, so the logic is re-written:

- The history is OpenHands' event stream: a SystemMessageAction (event 0),
  one MessageAction per user message and per assistant message without tool
  calls, one action per tool call (the response's text rides on the first,
  as the agent's thought) and one observation per tool result, in the order
  OpenHands runs them (action, its observation, the next action).
- Before each model call the view is rebuilt from the events (forgotten ids
  dropped, the newest summary inserted at its offset). When the view holds
  more than `max_size` (100) events, the condenser forgets everything but the
  first `keep_first` (1) events and the newest `max_size // 2 - keep_first - 1`
  (48), and summarizes the forgotten ones with the previous summary, each
  event's text cut to `max_event_length` (10,000) characters the way its
  `truncate_content` cuts (half from the start, half from the end). The agent
  returns that CondensationAction instead of calling the model, so the model
  call that follows sees the condensed view.
- The request is what `ConversationMemory.process_events` makes of the view:
  the initial user message is put back after the system message when the
  view's second event is not it; the summary is a user message; an assistant
  message with tool calls goes out only once every one of its calls has its
  result in the view, followed by those results; unmatched calls and results
  are filtered out; a user message after a user message gets "\\n\\n" in front.
  So it keeps tool pairs whole, and the bench counts any it breaks.
- The event text handed to the summarizer imitates OpenHands' `str(event)`
  (`**CmdRunAction (source=agent)**` ...); the tools of these sessions are not
  OpenHands' own, so one generic form stands for all of them.

Not ported: RecallObservations (microagents; the sessions hold none), and the
agent's own `max_message_chars` cut of observations (a ConversationMemory
setting, not the condenser's; no other peer cuts results either).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bench.fake_summarizer import FakeSummarizer
from bench.sessions import OPENHANDS
from bench.strategies import Request, Strategy

PROMPT = """You are maintaining a context-aware state summary for an interactive agent.
You will be given a list of events corresponding to actions taken by the agent, and the most \
recent previous summary if one exists.
If the events being summarized contain ANY task-tracking, you MUST include a TASK_TRACKING \
section to maintain continuity.
When referencing tasks make sure to preserve exact task IDs and statuses.

Track:

USER_CONTEXT: (Preserve essential user requirements, goals, and clarifications in concise form)

TASK_TRACKING: {Active tasks, their IDs and statuses - PRESERVE TASK IDs}

COMPLETED: (Tasks completed so far, with brief results)
PENDING: (Tasks that still need to be done)
CURRENT_STATE: (Current variables, data structures, or relevant state)

For code-specific tasks, also include:
CODE_STATE: {File paths, function signatures, data structures}
TESTS: {Failing cases, error messages, outputs}
CHANGES: {Code edits, variable updates}
DEPS: {Dependencies, imports, external calls}
VERSION_CONTROL_STATUS: {Repository state, current branch, PR status, commit history}

PRIORITIZE:
1. Adapt tracking format to match the actual task type
2. Capture key user requirements and goals
3. Distinguish between completed and pending tasks
4. Keep all sections concise and relevant

SKIP: Tracking irrelevant details for the current task type

Example formats:

For code tasks:
USER_CONTEXT: Fix FITS card float representation issue
COMPLETED: Modified mod_float() in card.py, all tests passing
PENDING: Create PR, update documentation
CODE_STATE: mod_float() in card.py updated
TESTS: test_format() passed
CHANGES: str(val) replaces f"{val:.16G}"
DEPS: None modified
VERSION_CONTROL_STATUS: Branch: fix-float-precision, Latest commit: a1b2c3d

For other tasks:
USER_CONTEXT: Write 20 haikus based on coin flip results
COMPLETED: 15 haikus written for results [T,H,T,H,T,H,T,T,H,T,H,T,H,T,H]
PENDING: 5 more haikus needed
CURRENT_STATE: Last flip: Heads, Haiku count: 15/20"""
NO_SUMMARY = "No events summarized"


@dataclass
class Event:
    id: int
    kind: str  # system, user, agent, action, observation, condensation, summary
    index: int = -1  # of the history message it comes from
    call: int = 0  # the tool call's position in its assistant message
    forgotten: range = range(0)  # a condensation's forgotten ids
    summary: str = ""
    offset: int = 0


def truncate_content(content: str, max_chars: int) -> str:
    """OpenHands' `truncate_content`: the middle of a too long text cut out."""
    if len(content) <= max_chars:
        return content
    half = max_chars // 2
    return content[:half] + "\n[... Observation truncated due to length ...]\n" + content[-half:]


@dataclass
class _Rendered:
    """Request messages kept from one call to the next, so an unchanged
    message is the same object (the bench's payload builder reuses them)."""

    prefixed: dict[int, dict[str, Any]] = field(default_factory=dict)
    filtered: dict[tuple[int, tuple[str, ...]], dict[str, Any]] = field(default_factory=dict)
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)


class OpenHandsCondenser(Strategy):
    name = OPENHANDS

    def __init__(
        self,
        system: str,
        summarizer: FakeSummarizer,
        max_size: int = 100,
        keep_first: int = 1,
        max_event_length: int = 10_000,
    ) -> None:
        if keep_first >= max_size // 2:
            raise ValueError("keep_first must be less than half of max_size")
        self.system, self.summarizer = system, summarizer
        self.max_size, self.keep_first = max_size, keep_first
        self.max_event_length = max_event_length
        self.events: list[Event] = [Event(0, "system")]
        self.history: list[dict[str, Any]] = []
        self.condensations = 0
        self._emitted: dict[int, set[int]] = {}  # step index -> its calls with an action
        self._rendered = _Rendered()

    # --- the event stream ------------------------------------------------------

    def _add(self, kind: str, **values: Any) -> Event:
        event = Event(len(self.events), kind, **values)
        self.events.append(event)
        return event

    def _sync(self, history: list[dict[str, Any]]) -> None:
        for index in range(len(self.history), len(history)):
            message = history[index]
            role, calls = message["role"], message.get("tool_calls") or []
            if role == "user":
                self._add("user", index=index)
            elif role == "assistant" and calls:
                self._add("action", index=index, call=0)
            elif role == "assistant":
                self._add("agent", index=index)
            else:  # a tool result: its observation, then the step's next action
                step = self._step_of(index, history)
                position = self._call_position(history[step], message["tool_call_id"])
                self._add("observation", index=index, call=position)
                emitted = self._emitted.setdefault(step, {0})
                following = [n for n in range(len(history[step]["tool_calls"])) if n not in emitted]
                if following:
                    emitted.add(following[0])
                    self._add("action", index=step, call=following[0])
        self.history = history

    @staticmethod
    def _step_of(index: int, history: list[dict[str, Any]]) -> int:
        step = index - 1
        while history[step]["role"] == "tool":
            step -= 1
        return step

    @staticmethod
    def _call_position(step: dict[str, Any], call_id: str) -> int:
        ids = [c["id"] for c in step["tool_calls"]]
        return ids.index(call_id) if call_id in ids else 0

    def view(self) -> list[Event]:
        """`View.from_events`: forgotten events dropped, the newest summary inserted."""
        forgotten: set[int] = set()
        newest: Event | None = None
        for event in self.events:
            if event.kind == "condensation":
                forgotten.update(event.forgotten)
                forgotten.add(event.id)
                newest = event
        kept = [e for e in self.events if e.id not in forgotten]
        if newest is not None:
            kept.insert(newest.offset, Event(-1, "summary", summary=newest.summary))
        return kept

    # --- the condenser ---------------------------------------------------------

    def _text(self, event: Event) -> str:
        """An imitation of OpenHands' `str(event)`."""
        message = self.history[event.index]
        if event.kind == "user":
            return f"**MessageAction** (source=EventSource.USER)\nCONTENT: {message['content']}"
        if event.kind == "agent":
            return f"**MessageAction** (source=EventSource.AGENT)\nCONTENT: {message['content']}"
        if event.kind == "action":
            call = message["tool_calls"][event.call]
            thought = message.get("content") if event.call == 0 else ""
            arguments = call.get("arguments") or {}
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            text = f"**{call['name']}Action (source=EventSource.AGENT)**\n"
            if thought:
                text += f"THOUGHT: {thought}\n"
            return text + f"ARGUMENTS:\n{arguments}"
        name = message.get("tool_name") or "Tool"
        return f"**{name}Observation (source=EventSource.AGENT)**\n{message['content']}"

    def _condense(self, view: list[Event]) -> None:
        """`get_condensation`, and the CondensationAction added to the events."""
        head = view[: self.keep_first]
        events_from_tail = self.max_size // 2 - len(head) - 1
        at = view[self.keep_first]
        previous = at.summary if at.kind == "summary" else NO_SUMMARY
        forgotten = [e for e in view[self.keep_first : -events_from_tail] if e.kind != "summary"]
        cut = self.max_event_length
        transcript = "".join(
            f"<EVENT id={e.id}>\n{truncate_content(self._text(e), cut)}\n</EVENT>\n"
            for e in forgotten
        )
        instructions = (
            PROMPT + "\n\n<PREVIOUS SUMMARY>\n\n</PREVIOUS SUMMARY>\n\n\n"
            "Now summarize the events using the rules above."
        )
        summary, _, _ = self.summarizer.summarize_text(
            transcript,
            previous_summary=truncate_content(previous, self.max_event_length),
            instructions=instructions,
        )
        self._add(
            "condensation",
            forgotten=range(min(e.id for e in forgotten), max(e.id for e in forgotten) + 1),
            summary=summary,
            offset=self.keep_first,
        )
        self.condensations += 1

    # --- the request -----------------------------------------------------------

    def request(self, history: list[dict[str, Any]]) -> Request:
        self._sync(history)
        view = self.view()
        if len(view) > self.max_size:  # should_condense
            self._condense(view)
            view = self.view()
        return Request(self.system, [], self._messages(view))

    def _messages(self, view: list[Event]) -> list[dict[str, Any]]:
        """`ConversationMemory.process_events` on the view."""
        if len(view) == 1 or view[1].kind != "user":
            first_user = next(i for i, m in enumerate(self.history) if m["role"] == "user")
            view = [view[0], Event(-1, "user", index=first_user), *view[1:]]
        out: list[dict[str, Any]] = []
        pending: dict[int, dict[str, Any]] = {}  # step index -> its assistant message
        results: dict[str, dict[str, Any]] = {}  # tool call id -> its result
        for event in view[1:]:
            if event.kind in ("user", "agent"):
                out.append(self.history[event.index])
            elif event.kind == "summary":
                out.append(self._summary_message(event.summary))
            elif event.kind == "action":
                pending[event.index] = self.history[event.index]
            elif event.kind == "observation":
                message = self.history[event.index]
                results[message["tool_call_id"]] = message
            for step, message in list(pending.items()):
                ids = [c["id"] for c in message["tool_calls"]]
                if all(i in results for i in ids):
                    out.append(message)
                    out.extend(results.pop(i) for i in ids)
                    del pending[step]
        return self._formatted(self._matched(out))

    def _summary_message(self, summary: str) -> dict[str, Any]:
        cached = self._rendered.summary.get(summary)
        if cached is None:
            cached = self._rendered.summary[summary] = {"role": "user", "content": summary}
        return cached

    def _matched(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`_filter_unmatched_tool_calls`."""
        call_ids = {
            c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
        }
        result_ids = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
        out = []
        for message in messages:
            if message["role"] == "tool":
                if message["tool_call_id"] in call_ids:
                    out.append(message)
            elif message["role"] == "assistant" and message.get("tool_calls"):
                matched = tuple(c["id"] for c in message["tool_calls"] if c["id"] in result_ids)
                if len(matched) == len(message["tool_calls"]):
                    out.append(message)
                elif matched:
                    key = (id(message), matched)
                    if key not in self._rendered.filtered:
                        calls = [c for c in message["tool_calls"] if c["id"] in matched]
                        self._rendered.filtered[key] = {**message, "tool_calls": calls}
                    out.append(self._rendered.filtered[key])
            else:
                out.append(message)
        return out

    def _formatted(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`_apply_user_message_formatting`: "\\n\\n" before a user message that follows one."""
        out = []
        previous = None
        for message in messages:
            if message["role"] == "user" and previous == "user" and message["content"]:
                key = id(message)
                if key not in self._rendered.prefixed:
                    prefixed = {**message, "content": "\n\n" + message["content"]}
                    self._rendered.prefixed[key] = prefixed
                message = self._rendered.prefixed[key]
            out.append(message)
            previous = message["role"]
        return out
