"""The chat side of a provider: everything that differs between the wires a chat
backend speaks, behind one interface (docs/providers.rst).

A `Wire` owns its request shape (messages, system, tools, cache breakpoints,
thinking or reasoning items), the reading of its SDK's response (text, tool calls,
thinking, usage as reported, model id), its overflow errors, its telemetry name,
and its models' context windows and prices. Wire modules import no SDK: responses
are read by their attributes and errors are matched once their SDK is loaded
(`sys.modules`), so the pure decision and the admin read the tables for free.
"""

from __future__ import annotations

import abc
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from assistant.providers.base import ChatResult
from assistant.text import MediaRates


@dataclass(frozen=True)
class ModelInfo:
    """A model's context window, and its prices in USD per million tokens (None: the
    window is known, the price is not); `max_output`: the most tokens one answer may
    take (its output cap, 0: not listed), which a request leaves room for."""

    window: int
    input: float | None = None
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    max_output: int = 0

    def prices(self) -> dict[str, float] | None:
        if self.input is None:
            return None
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
        }


def normalized_model(model: str | None) -> str:
    return (model or "").lower().removeprefix("models/")


def longest_prefix(name: str, table: dict[str, Any]) -> str | None:
    """The entry of `table` for `name`: its own, else its longest listed prefix (a dated
    release takes its family's entry)."""
    if name in table:
        return name
    return max((key for key in table if name.startswith(key)), key=len, default=None)


class StreamReader(abc.ABC):
    """One streamed answer of a wire, read event by event (docs/chat-loop.rst): the text
    each event adds, and at the end the whole answer with its usage."""

    def __init__(self, source: Any) -> None:
        self.source = source  # what call_model returned: the SDK's stream or its manager

    @abc.abstractmethod
    def text(self, event: Any) -> str:
        """The text this event adds ("" for none); keeps what the final answer needs."""

    @abc.abstractmethod
    def final(self) -> Any:
        """The whole answer, as the wire's `result` reads it (or a ChatResult); None when
        the stream ended before its last event."""


def loaded_sdk(name: str) -> ModuleType | None:
    """An SDK's module once something imported it: its errors can exist only then."""
    return sys.modules.get(name)


class Wire(abc.ABC):
    """One provider's request and response shapes, errors, names and model table."""

    name: str  # the provider= name hosts pass, and Message.provider
    models: dict[str, ModelInfo]  # by model name or prefix
    media: MediaRates  # what its images and document pages cost

    def model_info(self, model: str) -> ModelInfo | None:
        """The table's entry for `model` (exact, else its longest listed prefix)."""
        key = longest_prefix(self.table_name(model), self.models)
        return self.models[key] if key is not None else None

    def table_name(self, model: str) -> str:
        """The name `model` is listed under (a platform's id reduced to the vendor's)."""
        return normalized_model(model)

    def telemetry_name(self, model: str = "") -> str:
        """gen_ai.provider.name of a call to `model`."""
        return self.name

    @abc.abstractmethod
    def request(
        self,
        system: str,
        summaries: list[str],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        check: bool = True,
    ) -> dict[str, Any]:
        """The keyword arguments of the SDK's call for these neutral messages (see
        assistant.providers.convert), but the model and the output cap."""

    @abc.abstractmethod
    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Neutral tool specs {name, description, parameters} in this wire's shape."""

    @abc.abstractmethod
    def recognizes(self, response: Any) -> bool:
        """Whether `response` is this SDK's answer."""

    @abc.abstractmethod
    def result(self, response: Any) -> ChatResult:
        """The SDK's answer read into a ChatResult (usage normalized, model as reported)."""

    def with_timeout(self, request: dict[str, Any], seconds: float) -> dict[str, Any]:
        """`request` bounded to `seconds`: the SDK call's own `timeout` keyword (the
        anthropic and openai SDKs', in seconds)."""
        return {**request, "timeout": seconds}

    def threshold_compaction(self, trigger: int) -> dict[str, Any] | None:
        """The keyword arguments that turn on the provider's own compaction at `trigger`
        prompt tokens (docs/provider-compaction.rst); None: it has none."""
        return None

    def on_demand_compaction(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """`request` as the provider's on-demand compaction request, made through the
        host's call_model; None: it has none that call_model can make."""
        return None

    # The registry's provider (assistant.providers.registry) whose client calls the
    # compaction endpoint.
    endpoint_provider: str | None = None

    def compaction_endpoint(self, request: dict[str, Any], model: str) -> dict[str, Any] | None:
        """`request` as the keyword arguments of the provider's own compaction endpoint,
        which call_model cannot reach: the app calls it with its own client of that
        provider (docs/provider-compaction.rst); None: it has none."""
        return None

    def compacted(self, returned: Any) -> dict[str, Any] | None:
        """What the compaction endpoint returned, as stored (Record.stored()); None when
        it holds no compaction."""
        return None

    def stream_reader(self, returned: Any) -> StreamReader | None:
        """A reader of `returned` when it is this SDK's stream; None when it is not."""
        return None

    def overflow(self, error: BaseException) -> bool | None:
        """True or False when this SDK's error says for sure whether the prompt overflowed
        the window; None to leave it to the wording (assistant.providers.overflow)."""
        return None
