"""Anthropic's Messages API, direct or on Amazon Bedrock and Google Vertex AI
(`AnthropicBedrock` / `AnthropicVertex` return the same `Message`): request shape
with cache breakpoints and thinking blocks, response reading, errors, model table."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from assistant.llm import convert
from assistant.llm.base import ChatResult, Usage
from assistant.llm.wire import ModelInfo, StreamReader, Wire, loaded_sdk, normalized_model
from assistant.text.blocks import MediaRates

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


def _claude(window: int, input_price: float, output: float) -> ModelInfo:
    # The 5-minute cache: reads at 0.1x of input, writes at 1.25x.
    return ModelInfo(
        window, input_price, output, round(input_price * 0.1, 6), round(input_price * 1.25, 6)
    )


# Longest prefix wins; USD per million tokens. An unlisted Claude has the family's
# window and no price (docs/providers.rst).
MODELS = {
    "claude-": ModelInfo(200_000),
    "claude-opus-4-6": _claude(200_000, 5.0, 25.0),
    "claude-opus-4-5": _claude(200_000, 5.0, 25.0),
    "claude-opus-4": _claude(200_000, 15.0, 75.0),
    "claude-sonnet-4": _claude(200_000, 3.0, 15.0),
    "claude-haiku-4-5": _claude(200_000, 1.0, 5.0),
    "claude-3-5-haiku": _claude(200_000, 0.8, 4.0),
    "claude-3-haiku": _claude(200_000, 0.25, 1.25),
}


def is_anthropic_message(response: Any) -> bool:
    usage = getattr(response, "usage", None)
    return isinstance(getattr(response, "content", None), list) and hasattr(
        usage, "cache_read_input_tokens"
    )


def anthropic_result(response: Any, model: str = "") -> ChatResult:
    """Text (its text blocks joined), tool_use blocks as {id, name, arguments}, thinking
    and redacted_thinking blocks verbatim, and the usage with its cache fields."""
    content = response.content or []
    return ChatResult(
        text="".join(b.text for b in content if b.type == "text"),
        usage=Usage.from_anthropic(response.usage),
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
    )


# `messages.stream(...)`'s managers (entered by the step) and the streams they open.
_STREAMS = (
    "MessageStreamManager",
    "AsyncMessageStreamManager",
    "MessageStream",
    "AsyncMessageStream",
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

    def request(self, system, summaries, messages, tools=None, *, check=True):
        """{"system": [text blocks], "messages": [...], "tools"?}: `messages.create`'s."""
        request = convert.to_anthropic(system, summaries, messages, check=check)
        if tools:
            request["tools"] = self.tool_definitions(tools)
        return request

    def tool_definitions(self, tools):
        return convert.anthropic_tools(tools)

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
