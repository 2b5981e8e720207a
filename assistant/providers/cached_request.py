"""The "cached_suffix" summary request: the conversation's own request, as its last
model call sent it (system, summaries, messages, tools, with the same cache
breakpoints), then the summary instruction. Everything before the instruction is what
the provider's prompt cache holds, so the summarizer's input is billed mostly at the
cache-read price (opencode's "suffix" mode; Anthropic's server compaction the same way).

The instruction joins the last turn when that turn is the user's (a tool result or a new
user message: Anthropic merges consecutive user turns anyway), else it is a user turn
of its own; the blocks before it stay byte-identical.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from assistant.providers import convert
from assistant.providers.gemini.interactions import GEMINI_INTERACTIONS
from assistant.providers.openai.wire import OPENAI


@dataclass(frozen=True)
class CachedRequest:
    """`system`, `summaries`, `messages`: what `Context.to_anthropic()` / `.to_gemini()`
    convert; `tools`: the neutral specs the chat sent ({name, description, parameters});
    `transcript` and `previous_summary`: the same information for a summarizer with no
    cache (the offline fallback), the newly old messages and the summary being updated."""

    system: str
    summaries: list[str]
    messages: list[dict[str, Any]]
    instruction: str
    transcript: str
    previous_summary: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)

    def body(self, provider: str) -> dict[str, Any]:
        """The request in the named provider's shape (raises InvalidRequest when the
        history would be refused)."""
        shapes = {
            "gemini": self.gemini,
            "gemini_interactions": self.gemini_interactions,
            "openai": self.openai,
        }
        return shapes.get(provider, self.anthropic)()

    def anthropic(self) -> dict[str, Any]:
        """The keyword arguments of `messages.create` but model and max_tokens."""
        request = convert.to_anthropic(self.system, self.summaries, self.messages)
        if self.tools:
            request["tools"] = convert.anthropic_tools(self.tools)
        messages = request["messages"]
        block = {"type": "text", "text": self.instruction}
        if messages and messages[-1]["role"] == "user":
            messages[-1] = {**messages[-1], "content": [*messages[-1]["content"], block]}
        else:
            messages.append({"role": "user", "content": [block]})
        return request

    def openai(self) -> dict[str, Any]:
        """{"messages", "tools"?, "tool_choice"?}: `chat.completions.create`'s, the
        instruction a user message of its own; with tools, tool_choice "none" (the tools
        keep the cached prefix, the answer is the summary)."""
        request = OPENAI.request(self.system, self.summaries, self.messages, self.tools)
        request["messages"] = [*request["messages"], {"role": "user", "content": self.instruction}]
        if self.tools:
            request["tool_choice"] = "none"
        return request

    def gemini(self) -> dict[str, Any]:
        """{"system_instruction", "contents", "tools"}: chat.model_request's shape."""
        request = convert.to_gemini(self.system, self.summaries, self.messages)
        contents = copy.copy(request["contents"])
        part = {"text": self.instruction}
        if contents and contents[-1]["role"] == "user":
            contents[-1] = {**contents[-1], "parts": [*contents[-1]["parts"], part]}
        else:
            contents.append({"role": "user", "parts": [part]})
        return {
            "system_instruction": request["system_instruction"],
            "contents": contents,
            "tools": convert.gemini_tools(self.tools) if self.tools else [],
        }

    def gemini_interactions(self) -> dict[str, Any]:
        """{"system_instruction"?, "input", "tools"?}: the chat wire's request
        (GEMINI_INTERACTIONS.request: the whole compacted context as input steps), the
        instruction a user_input step after it; store is the caller's (always False)."""
        request = GEMINI_INTERACTIONS.request(
            self.system, self.summaries, self.messages, self.tools
        )
        request.pop("store")
        step = {"type": "user_input", "content": [{"type": "text", "text": self.instruction}]}
        return {**request, "input": [*request["input"], step]}
