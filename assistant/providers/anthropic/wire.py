"""Anthropic's Messages API, direct or on Amazon Bedrock and Google Vertex AI
(`AnthropicBedrock` / `AnthropicVertex` return the same `Message`): request shape
with cache breakpoints and thinking blocks, response reading, errors, model table."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from assistant.providers import convert
from assistant.providers.base import ChatResult, Usage
from assistant.providers.compaction_blocks import Record
from assistant.providers.wire import ModelInfo, StreamReader, Wire, loaded_sdk, normalized_model
from assistant.text import MediaRates

# What a stored thinking block keeps of the SDK's: assistant.text.blocks validates these keys.
_THINKING_KEYS = {"thinking": ("thinking", "signature"), "redacted_thinking": ("data",)}
# Bedrock: "anthropic.claude-sonnet-4-5-20250929-v1:0", with a region prefix ("us.") on
# inference profiles; Vertex: "claude-sonnet-4-5@20250929".
_BEDROCK_ID = re.compile(r"^(?:[a-z]{2,4}\.)?anthropic\.(?P<name>.+?)(?:-v\d+(?::\d+)?)?$")
_VERTEX_ID = re.compile(r"^(?P<name>claude[^@]*)@.+$")
ONE_MILLION = 1_000_000
# Vision docs: an image is scaled to fit 1568 px on its long edge and about 1.15
# megapixels, then costs width * height / 750 tokens; a PDF page costs its text plus an
# image of the page, 1,500 to 3,000 tokens: the upper end keeps the budget safe.
MAX_EDGE = 1568
MAX_PIXELS = 1_150_000
PIXELS_PER_TOKEN = 750
TOKENS_PER_PDF_PAGE = 3000


def anthropic_image_tokens(width: int, height: int) -> int:
    scale = min(1.0, MAX_EDGE / max(width, height))
    scale = min(scale, math.sqrt(MAX_PIXELS / (width * height)))
    pixels = (width * scale) * (height * scale)
    return max(1, math.ceil(pixels / PIXELS_PER_TOKEN))


def _claude(window: int, input_price: float, output: float, max_output: int) -> ModelInfo:
    # The 5-minute cache: reads at 0.1x of input, writes at 1.25x.
    return ModelInfo(
        window,
        input_price,
        output,
        round(input_price * 0.1, 6),
        round(input_price * 1.25, 6),
        max_output,
    )


# Longest prefix wins; USD per million tokens. An unlisted Claude has the family's
# window and no price (docs/providers.rst).
MODELS = {
    "claude-": ModelInfo(200_000, max_output=8_192),
    "claude-opus-4-6": _claude(200_000, 5.0, 25.0, 64_000),
    "claude-opus-4-5": _claude(200_000, 5.0, 25.0, 64_000),
    "claude-opus-4": _claude(200_000, 15.0, 75.0, 32_000),
    "claude-sonnet-4": _claude(200_000, 3.0, 15.0, 64_000),
    "claude-haiku-4-5": _claude(200_000, 1.0, 5.0, 64_000),
    "claude-3-5-haiku": _claude(200_000, 0.8, 4.0, 8_192),
    "claude-3-haiku": _claude(200_000, 0.25, 1.25, 4_096),
}


def is_anthropic_message(response: Any) -> bool:
    usage = getattr(response, "usage", None)
    return isinstance(getattr(response, "content", None), list) and hasattr(
        usage, "cache_read_input_tokens"
    )


# Server-side compaction (docs/provider-compaction.rst): the threshold edit under its
# beta, and the on-demand request under its own; the API refuses a lower trigger.
THRESHOLD_BETA = "compact-2026-01-12"
ON_DEMAND_BETA = "compact-2026-09-04"
MIN_TRIGGER = 50_000


def _verbatim(block: Any) -> dict[str, Any]:
    """A response block as the API sent it (fields it left out stay out)."""
    to_dict = getattr(block, "to_dict", None)
    return to_dict(mode="json") if to_dict else dict(block)


def anthropic_usage(usage: Any) -> tuple[Usage, Usage | None]:
    """The answer's usage and the compaction's. With `usage.iterations` the prompt is
    the last `message` iteration's (the context the answer was written from), and the
    `compaction` iterations, outside the top-level usage, are summed apart."""
    iterations = getattr(usage, "iterations", None) or []
    top = Usage.from_anthropic(usage)
    messages = [i for i in iterations if getattr(i, "type", None) == "message"]
    compactions = [Usage.from_anthropic(i) for i in iterations if i.type == "compaction"]
    if messages:
        last = Usage.from_anthropic(messages[-1])
        top = dataclasses.replace(last, output_tokens=top.output_tokens)
    if not compactions:
        return top, None
    return top, Usage(
        input_tokens=sum(c.input_tokens for c in compactions),
        output_tokens=sum(c.output_tokens for c in compactions),
        cache_read_tokens=sum(c.cache_read_tokens for c in compactions),
        cache_write_tokens=sum(c.cache_write_tokens for c in compactions),
    )


def anthropic_compaction(response: Any, usage: Usage | None) -> dict[str, Any] | None:
    """The answer's compaction block as stored (the newest, should there be two)."""
    blocks = [b for b in response.content or [] if b.type == "compaction"]
    if not blocks:
        return None
    block = blocks[-1]
    on_demand = getattr(response, "stop_reason", None) == "compaction"
    live = isinstance(block.content, str) and bool(block.content)
    return Record(ANTHROPIC.name, _verbatim(block), live, on_demand, usage).stored()


def anthropic_result(response: Any, model: str = "") -> ChatResult:
    """Text (its text blocks joined), tool_use blocks as {id, name, arguments}, thinking
    and redacted_thinking blocks verbatim, the usage with its cache fields, and a
    compaction block verbatim with its own usage."""
    content = response.content or []
    usage, compaction_usage = anthropic_usage(response.usage)
    if compaction_usage is None and getattr(response, "stop_reason", None) == "compaction":
        compaction_usage = usage  # an on-demand answer is the compaction alone
    return ChatResult(
        text="".join(b.text for b in content if b.type == "text"),
        usage=usage,
        compaction=anthropic_compaction(response, compaction_usage),
        model=getattr(response, "model", None) or model,
        stop_reason=getattr(response, "stop_reason", None),
        tool_calls=[
            {"id": b.id, "name": b.name, "arguments": dict(b.input or {})}
            for b in content
            if b.type == "tool_use"
        ],
        blocks=[
            {"type": b.type, **{key: getattr(b, key) for key in _THINKING_KEYS[b.type]}}
            for b in content
            if b.type in _THINKING_KEYS
        ],
        provider=ANTHROPIC.name,
        cache_diagnosis=anthropic_cache_diagnosis(response),
    )


def anthropic_cache_diagnosis(response: Any) -> dict[str, Any] | None:
    """The response's `diagnostics.cache_miss_reason` as a dict (`type`: model_changed,
    system_changed, tools_changed, messages_changed, previous_message_not_found or
    unavailable; most with `cache_missed_input_tokens`), where the request carried
    `diagnostics={"previous_message_id": ...}` (anthropic SDK 2.12's `Diagnostics`)."""
    reason = getattr(getattr(response, "diagnostics", None), "cache_miss_reason", None)
    if reason is None:
        return None
    dumped = reason.model_dump() if hasattr(reason, "model_dump") else reason
    return dict(dumped) if isinstance(dumped, dict) else None


# `messages.stream(...)`'s managers (entered by the step) and the streams they open.
_STREAMS = (
    "MessageStreamManager",
    "AsyncMessageStreamManager",
    "MessageStream",
    "AsyncMessageStream",
    # `client.beta.messages.stream(...)`: the provider's compaction (compaction_delta).
    "BetaMessageStreamManager",
    "BetaAsyncMessageStreamManager",
    "BetaMessageStream",
    "BetaAsyncMessageStream",
)


class AnthropicStream(StreamReader):
    """`messages.stream(...)`: its "text" events, and the message the SDK assembled
    (usage from message_start, output tokens from message_delta) on message_stop."""

    message: Any = None

    def text(self, event: Any) -> str:
        kind = getattr(event, "type", None)
        if kind == "message_stop":
            self.message = event.message
        return event.text if kind == "text" else ""

    def final(self) -> Any:
        return self.message


class AnthropicWire(Wire):
    name = "anthropic"
    models = MODELS
    media = MediaRates(anthropic_image_tokens, TOKENS_PER_PDF_PAGE)

    def table_name(self, model: str) -> str:
        name = normalized_model(model)
        platform = _BEDROCK_ID.match(name) or _VERTEX_ID.match(name)
        return platform.group("name") if platform else name

    def model_info(self, model: str) -> ModelInfo | None:
        info = super().model_info(model)
        if info is not None and "[1m]" in normalized_model(model):
            return dataclasses.replace(info, window=ONE_MILLION)
        return info

    def telemetry_name(self, model: str = "") -> str:
        name = normalized_model(model)
        if _BEDROCK_ID.match(name):
            return "aws.bedrock"
        if _VERTEX_ID.match(name):
            return "gcp.vertex_ai"
        return "anthropic"

    def request(
        self,
        system: str,
        summaries: list[str],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        check: bool = True,
    ) -> dict[str, Any]:
        """{"system": [text blocks], "messages": [...], "tools"?}: `messages.create`'s."""
        request = convert.to_anthropic(system, summaries, messages, check=check)
        if tools:
            request["tools"] = self.tool_definitions(tools)
        return request

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return convert.anthropic_tools(tools)

    def threshold_compaction(self, trigger: int) -> dict[str, Any]:
        """`beta.messages.create`'s compact_20260112 edit at `trigger` input tokens."""
        edit = {
            "type": "compact_20260112",
            "trigger": {"type": "input_tokens", "value": max(trigger, MIN_TRIGGER)},
        }
        return {"betas": [THRESHOLD_BETA], "context_management": {"edits": [edit]}}

    def on_demand_compaction(self, request: dict[str, Any]) -> dict[str, Any]:
        """`request` as a compaction request: the answer is the compaction block alone."""
        asked = {k: v for k, v in request.items() if k not in ("betas", "context_management")}
        return {**asked, "betas": [ON_DEMAND_BETA], "compaction": {"type": "summarize"}}

    def recognizes(self, response: Any) -> bool:
        return is_anthropic_message(response)

    def result(self, response: Any) -> ChatResult:
        return anthropic_result(response)

    def stream_reader(self, returned: Any) -> StreamReader | None:
        streaming = loaded_sdk("anthropic.lib.streaming")
        kinds = tuple(getattr(streaming, name) for name in _STREAMS) if streaming else ()
        return AnthropicStream(returned) if kinds and isinstance(returned, kinds) else None

    def overflow(self, error: BaseException) -> bool | None:
        sdk = loaded_sdk("anthropic")
        if sdk is None:
            return None
        # A 413 is the request body's size, a 429 never the window, a dropped
        # connection no answer at all.
        if isinstance(error, sdk.ContentTooLargeError | sdk.RateLimitError):
            return False
        if isinstance(error, sdk.APIConnectionError):
            return False
        return None


ANTHROPIC = AnthropicWire()
