"""The peers, run from their own library code (requirements/bench.txt):

- LangChain's `SummarizationMiddleware` (langchain 1.x), its `before_model`
  hook run before each model call on the agent's message state, as
  `create_agent` runs it: trigger ("tokens", 50,000), keep ("messages", 20),
  trim_tokens_to_summarize 4,000. Before its summary call it trims the
  messages to summarize to their last 4,000 tokens starting on a human
  message (`trim_messages(strategy="last", start_on="human")`); in a long tool
  loop those 4,000 tokens hold no human message, the trim comes back empty,
  and the middleware writes its placeholder "Previous conversation was too
  long to summarize." without calling the model. That is why its summarizer
  input was 0 on the 14 older sessions; its calls, when it makes them, go
  through FakeChatModel and are counted with the bench's token rule, and
  `placeholders` counts the summaries it wrote without one.
- langmem's `summarize_messages` with a running summary (max_tokens 50,000,
  max_tokens_before_summary 40,000, max_summary_tokens 2,000), called on the
  whole history before each model call as its docs show.
- Anthropic's `clear_tool_uses_20250919` (trigger 100,000 input tokens, keep
  the 3 newest tool uses) in its library form, LangChain's
  `ContextEditingMiddleware(edits=[ClearToolUsesEdit()])`, counting tokens
  with the bench's rule as the server counts real tokens. The edit is
  applied to each request, never to the stored history, as the API does.

Every summary comes from the bench's FakeSummarizer, wrapped as a LangChain
chat model. Each library keeps its own token estimates for its own triggers;
the bench measures the requests they produce with its one rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    SummarizationMiddleware,
)
from langchain.agents.middleware.types import ModelRequest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    get_buffer_string,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langmem.short_term import RunningSummary, summarize_messages

from bench.fake_summarizer import FakeSummarizer
from bench.payload import neutral_tokens
from bench.sessions import CLEAR_DOCS, CLEAR_LIBRARY, LANGCHAIN, LANGMEM
from bench.strategies import Request, Strategy

LANGCHAIN_PLACEHOLDER = "Previous conversation was too long to summarize."
LANGMEM_PREVIOUS = "This is summary of the conversation so far: "
LANGMEM_EXTEND = "\n\nExtend this summary by taking into account the new messages above:"


class FakeChatModel(BaseChatModel):
    """The bench's FakeSummarizer behind LangChain's chat-model interface.
    The whole prompt is its input; a previous summary the prompt carries
    (langmem's update prompt) is passed as one, so the fake keeps most of it
    as it does for our engine."""

    summarizer: Any

    @property
    def _llm_type(self) -> str:
        return "bench-fake-summarizer"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        previous = None
        last = messages[-1].content if messages else ""
        if isinstance(last, str) and last.startswith(LANGMEM_PREVIOUS):
            previous = last.removeprefix(LANGMEM_PREVIOUS).removesuffix(LANGMEM_EXTEND)
            messages = [*messages[:-1], HumanMessage(content=LANGMEM_EXTEND.strip())]
        text, _, _ = self.summarizer.summarize_text(
            get_buffer_string(messages), previous_summary=previous, instructions=" "
        )
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def to_langchain(message: dict[str, Any], index: int) -> BaseMessage:
    """A neutral message as LangChain's, with a stable id (langmem needs one)."""
    mid = f"m{index}"
    role, content = message["role"], message.get("content") or ""
    if role == "user":
        return HumanMessage(content=content, id=mid)
    if role == "assistant":
        calls = [
            {
                "id": c["id"],
                "name": c["name"],
                "args": c.get("arguments") or {},
                "type": "tool_call",
            }
            for c in message.get("tool_calls") or []
        ]
        return AIMessage(content=content, tool_calls=calls, id=mid)
    return ToolMessage(
        content=content, tool_call_id=message["tool_call_id"], name=message.get("tool_name"), id=mid
    )


def to_neutral(message: BaseMessage) -> dict[str, Any]:
    content = message.content if isinstance(message.content, str) else message.text
    if isinstance(message, AIMessage):
        neutral: dict[str, Any] = {"role": "assistant", "content": content}
        if message.tool_calls:
            neutral["tool_calls"] = [
                {"id": c["id"], "name": c["name"], "arguments": c["args"]}
                for c in message.tool_calls
            ]
        return neutral
    if isinstance(message, ToolMessage):
        return {
            "role": "tool",
            "content": content,
            "tool_call_id": message.tool_call_id,
            "tool_name": message.name or "",
        }
    return {"role": "user", "content": content}


class _Incremental(Strategy):
    """Keeps the history as LangChain messages, converting each message once."""

    def __init__(self, system: str) -> None:
        self.system = system
        self.converted: list[BaseMessage] = []

    def _sync(self, history: list[dict[str, Any]]) -> list[BaseMessage]:
        new = [
            to_langchain(m, i)
            for i, m in enumerate(history[len(self.converted) :], start=len(self.converted))
        ]
        self.converted.extend(new)
        return new


class LangChainSummarization(_Incremental):
    name = LANGCHAIN

    def __init__(self, system: str, summarizer: FakeSummarizer) -> None:
        super().__init__(system)
        self.middleware = SummarizationMiddleware(
            FakeChatModel(summarizer=summarizer),
            trigger=("tokens", 50_000),
            keep=("messages", 20),
            trim_tokens_to_summarize=4000,
        )
        self.state: list[BaseMessage] = []  # the agent's message state, as the graph keeps it
        self.summaries = 0
        self.placeholders = 0

    def request(self, history: list[dict[str, Any]]) -> Request:
        self.state.extend(self._sync(history))
        update = self.middleware.before_model({"messages": self.state}, None)
        if update:
            self.state = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
            self.summaries += 1
            self.placeholders += LANGCHAIN_PLACEHOLDER in self.state[0].text
        return Request(self.system, [], [to_neutral(m) for m in self.state])


class LangMem(_Incremental):
    name = LANGMEM

    def __init__(self, system: str, summarizer: FakeSummarizer) -> None:
        super().__init__(system)
        self.model = FakeChatModel(summarizer=summarizer)
        self.running: RunningSummary | None = None

    def request(self, history: list[dict[str, Any]]) -> Request:
        self._sync(history)
        result = summarize_messages(
            self.converted,
            running_summary=self.running,
            model=self.model,
            max_tokens=50_000,
            max_tokens_before_summary=40_000,
            max_summary_tokens=2000,
        )
        self.running = result.running_summary or self.running
        summaries = [m.content for m in result.messages if isinstance(m, SystemMessage)]
        rest = [to_neutral(m) for m in result.messages if not isinstance(m, SystemMessage)]
        return Request(self.system, summaries, rest)


def bench_token_counter(messages: list[BaseMessage]) -> int:
    return sum(_lc_tokens(m) for m in messages)


def _lc_tokens(message: BaseMessage) -> int:
    return neutral_tokens(to_neutral(message))


@dataclass
class _Captured:
    messages: list[BaseMessage]


class ClearToolUses(_Incremental):
    name = CLEAR_LIBRARY

    def __init__(self, system: str, model: BaseChatModel) -> None:
        super().__init__(system)
        self.model = model
        self.middleware = ContextEditingMiddleware(
            edits=[ClearToolUsesEdit(trigger=100_000, keep=3)],
            token_counter=bench_token_counter,
        )
        self._edited: dict[int, dict[str, Any]] = {}  # history index -> its edited form

    def request(self, history: list[dict[str, Any]]) -> Request:
        self._sync(history)
        seen: list[_Captured] = []

        def handler(request: ModelRequest) -> AIMessage:
            seen.append(_Captured(request.messages))
            return AIMessage(content="")

        self.middleware.wrap_model_call(
            ModelRequest(
                model=self.model,
                messages=list(self.converted),
                system_message=SystemMessage(content=self.system),
            ),
            handler,
        )
        return Request(self.system, [], self._neutral(seen[0].messages, history))

    def _neutral(self, sent: list[BaseMessage], history: list[dict[str, Any]]) -> list[dict]:
        """The edited messages as neutral ones: an unedited message is its
        history dict, an edited one the same dict from call to call, so the
        payload builder converts only what changed (the payload is the same)."""
        out = []
        for index, (message, original) in enumerate(zip(sent, self.converted, strict=True)):
            if message.content == original.content and getattr(
                message, "tool_calls", None
            ) == getattr(original, "tool_calls", None):
                out.append(history[index])
                continue
            neutral = to_neutral(message)
            if self._edited.get(index) != neutral:
                self._edited[index] = neutral
            out.append(self._edited[index])
        return out


class ClearToolUsesFromDocs(Strategy):
    """Anthropic's clear_tool_uses_20250919 written from its documentation, to
    check the library form against: when the request's input tokens pass the
    trigger, every tool result but those of the `keep` newest tool uses is
    replaced by the placeholder; the stored history is untouched."""

    name = CLEAR_DOCS

    def __init__(self, system: str, trigger: int = 100_000, keep: int = 3) -> None:
        self.system, self.trigger, self.keep = system, trigger, keep
        self._cleared: dict[int, dict[str, Any]] = {}  # one cleared dict per result, reused

    def request(self, history: list[dict[str, Any]]) -> Request:
        size = sum(neutral_tokens(m) for m in history)
        if size <= self.trigger:
            return Request(self.system, [], list(history))
        results = [i for i, m in enumerate(history) if m["role"] == "tool"]
        cleared = set(results[: -self.keep]) if self.keep < len(results) else set()
        return Request(
            self.system,
            [],
            [self._clear(i, m) if i in cleared else m for i, m in enumerate(history)],
        )

    def _clear(self, index: int, message: dict[str, Any]) -> dict[str, Any]:
        if index not in self._cleared:
            self._cleared[index] = {**message, "content": "[cleared]"}
        return self._cleared[index]
