"""OpenAI's Chat Completions, the wire every OpenAI-compatible server speaks (vLLM,
Ollama, OpenRouter, LiteLLM's proxy: the `openai` SDK with their `base_url`):
request shape, response reading, overflow errors, model table.

Prompt caching is automatic (no breakpoints to send). Thinking blocks are
Anthropic's and reasoning items the Responses API's: neither is sent here.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.core.exceptions import ValidationError

from assistant.providers import convert
from assistant.providers.base import ChatResult, Usage
from assistant.providers.embeddings import EmbeddingModel
from assistant.providers.wire import ModelInfo, StreamReader, Wire, loaded_sdk
from assistant.text import MEDIA_TYPES, MediaRates, describe

OVERFLOW_CODE = "context_length_exceeded"
# Vision docs (detail "high", the default for large images): scaled to fit 2048 x 2048,
# then its short side to 768 px; 85 tokens plus 170 per 512 px tile. A PDF page is sent
# as its text and an image of the page: counted as Anthropic counts one, the safe end.
FIT_EDGE = 2048
SHORT_EDGE = 768
TILE_EDGE = 512
BASE_TOKENS = 85
TOKENS_PER_TILE = 170
TOKENS_PER_PDF_PAGE = 3000


def openai_image_tokens(width: int, height: int) -> int:
    fit = min(1.0, FIT_EDGE / max(width, height))
    fitted_w, fitted_h = width * fit, height * fit
    short = min(1.0, SHORT_EDGE / min(fitted_w, fitted_h))
    w, h = fitted_w * short, fitted_h * short
    return BASE_TOKENS + TOKENS_PER_TILE * math.ceil(w / TILE_EDGE) * math.ceil(h / TILE_EDGE)


def _gpt(
    window: int, input_price: float, output: float, cached: float, max_output: int
) -> ModelInfo:
    # Before the GPT-5.6 family a cache write costs the input price (no premium); from
    # it, 1.25x (a host lists those models' prices in ASSISTANT_MODEL_PRICES).
    return ModelInfo(window, input_price, output, cached, input_price, max_output)


# Longest prefix wins; USD per million tokens, cached input at each family's discount.
MODELS = {
    "gpt-3.5-turbo": ModelInfo(16_385, max_output=4_096),
    "gpt-4-turbo": ModelInfo(128_000, max_output=4_096),
    "gpt-4o": _gpt(128_000, 2.5, 10.0, 1.25, 16_384),
    "gpt-4o-mini": _gpt(128_000, 0.15, 0.6, 0.075, 16_384),
    "gpt-4.1": _gpt(1_047_576, 2.0, 8.0, 0.5, 32_768),
    "gpt-4.1-mini": _gpt(1_047_576, 0.4, 1.6, 0.1, 32_768),
    "gpt-4.1-nano": _gpt(1_047_576, 0.1, 0.4, 0.025, 32_768),
    "gpt-5": _gpt(400_000, 1.25, 10.0, 0.125, 128_000),
    "gpt-5-mini": _gpt(400_000, 0.25, 2.0, 0.025, 128_000),
    "gpt-5-nano": _gpt(400_000, 0.05, 0.4, 0.005, 128_000),
    "o3": _gpt(200_000, 2.0, 8.0, 0.5, 100_000),
    "o4-mini": _gpt(200_000, 1.1, 4.4, 0.275, 100_000),
}

# The embedding models (`embeddings.create`): 8,192 tokens per text, 2,048 texts and
# 300,000 tokens per request; the text-embedding-3 models shorten their vectors to any
# `dimensions` below their own. USD per million input tokens.
EMBEDDING_MODELS = {
    "text-embedding-3-small": EmbeddingModel(
        1536, 8_192, 2_048, 0.02, min_dimensions=1, max_dimensions=1536, max_request_tokens=300_000
    ),
    "text-embedding-3-large": EmbeddingModel(
        3072, 8_192, 2_048, 0.13, min_dimensions=1, max_dimensions=3072, max_request_tokens=300_000
    ),
    "text-embedding-ada-002": EmbeddingModel(1536, 8_192, 2_048, 0.10, max_request_tokens=300_000),
}
DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"


def usage_from_openai(usage: Any) -> Usage:
    """Chat's prompt_tokens / Responses' input_tokens include the cached part (and, from
    GPT-5.6, the part written to the cache): split them out."""
    if usage is None:
        return Usage()
    prompt = getattr(usage, "prompt_tokens", None)
    if prompt is None:
        prompt = getattr(usage, "input_tokens", 0)
    details = getattr(usage, "prompt_tokens_details", None) or getattr(
        usage, "input_tokens_details", None
    )
    cached = int(getattr(details, "cached_tokens", 0) or 0)
    written = int(getattr(details, "cache_write_tokens", 0) or 0)
    output = getattr(usage, "completion_tokens", None)
    if output is None:
        output = getattr(usage, "output_tokens", 0)
    prompt = int(prompt or 0)
    cached = min(cached, prompt)
    written = min(written, prompt - cached)
    return Usage(
        input_tokens=prompt - cached - written,
        output_tokens=int(output or 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


def parsed_arguments(arguments: str | None) -> dict[str, Any]:
    """A call's JSON arguments as a dict; what is not a JSON object is kept as text."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def overflow_code(error: BaseException) -> bool | None:
    """Both OpenAI APIs name an overflow by its code, whatever the wording; any other
    OpenAI error is left to the wording (an OpenAI-compatible server may send none)."""
    sdk = loaded_sdk("openai")
    if sdk is None or not isinstance(error, sdk.APIError):
        return None
    code = getattr(error, "code", None)
    if code == OVERFLOW_CODE:
        return True
    if isinstance(error, sdk.RateLimitError | sdk.APIConnectionError):
        return False
    return None


def function_spec(tool: dict[str, Any]) -> dict[str, Any]:
    """A neutral tool spec as OpenAI's function: name, description, parameters."""
    return {
        "name": tool["name"],
        "description": tool.get("description", ""),
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
    }


def _data_url(source: dict[str, Any]) -> str:
    if source["type"] == "url":
        return source["url"]
    return f"data:{source['media_type']};base64,{source['data']}"


def _parts(content: str, blocks: list[dict[str, Any]] | None) -> str | list[dict[str, Any]]:
    """A user message's content: its text alone, or content parts with its images
    (image_url) and documents (a PDF as a file part, a text document as text)."""
    media = [block for block in blocks or [] if block["type"] in MEDIA_TYPES]
    if not media:
        return content
    parts: list[dict[str, Any]] = []
    for block in media:
        source = block["source"]
        if block["type"] == "image":
            parts.append({"type": "image_url", "image_url": {"url": _data_url(source)}})
        elif source["type"] == "text":
            parts.append({"type": "text", "text": source["data"]})
        elif source["type"] == "base64":
            name = block.get("title") or "document.pdf"
            parts.append(
                {"type": "file", "file": {"filename": name, "file_data": _data_url(source)}}
            )
        else:
            parts.append({"type": "text", "text": f"[{describe(block)}]"})
    if content.strip():
        parts.append({"type": "text", "text": content})
    return parts


def _tool_text(content: str, blocks: list[dict[str, Any]] | None) -> str:
    # A tool message takes text only: its images and documents are named.
    names = [f"[{describe(b)}]" for b in blocks or [] if b["type"] in MEDIA_TYPES]
    return "\n".join([content, *names]) if names else content


def chat_messages(
    system: str, summaries: list[str], messages: list[dict[str, Any]], *, check: bool = True
) -> list[dict[str, Any]]:
    """The neutral messages as Chat Completions messages: one system message (the system
    prompt and the summaries), then each message, a stored answer with nothing to send
    left out."""
    instruction = "\n\n".join(part for part in [system, *summaries] if part)
    converted: list[dict[str, Any]] = (
        [{"role": "system", "content": instruction}] if instruction else []
    )
    for message in convert.with_unique_call_ids(messages):
        role, content = message["role"], message.get("content") or ""
        if role == "tool":
            text = _tool_text(content, message.get("blocks"))
            converted.append(
                {"role": "tool", "tool_call_id": message["tool_call_id"], "content": text}
            )
        elif role == "assistant":
            calls = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": json.dumps(call.get("arguments") or {}),
                    },
                }
                for call in message.get("tool_calls") or []
            ]
            if not content.strip() and not calls:
                continue
            answer: dict[str, Any] = {"role": "assistant", "content": content or None}
            if calls:
                answer["tool_calls"] = calls
            converted.append(answer)
        else:
            converted.append({"role": "user", "content": _parts(content, message.get("blocks"))})
    if check:
        check_chat_messages(converted)
    return converted


def check_chat_messages(messages: list[dict[str, Any]]) -> None:
    """Raise InvalidRequest unless Chat Completions would accept these messages: every
    assistant tool call answered by the tool messages right after it, and every tool
    message answering such a call."""
    waiting: list[str] = []
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            if message["tool_call_id"] not in waiting:
                raise convert.InvalidRequest(
                    f"messages[{index}] answers {message['tool_call_id']!r}, not a call "
                    "waiting for its result"
                )
            waiting.remove(message["tool_call_id"])
            continue
        if waiting:
            raise convert.InvalidRequest(f"messages[{index}] follows calls without results")
        waiting = [call["id"] for call in message.get("tool_calls") or []]
    if waiting:
        raise convert.InvalidRequest(f"the last message has calls without results: {waiting}")


def is_chat_completion(response: Any) -> bool:
    return getattr(response, "object", None) == "chat.completion" or (
        isinstance(getattr(response, "choices", None), list)
        and hasattr(getattr(response, "usage", None), "prompt_tokens")
    )


def chat_completion_result(response: Any) -> ChatResult:
    """The first choice's text and tool calls, the usage with its cached part split out."""
    choice = (response.choices or [None])[0]
    message = getattr(choice, "message", None)
    calls = getattr(message, "tool_calls", None) or []
    return ChatResult(
        text=getattr(message, "content", None) or "",
        usage=usage_from_openai(response.usage),
        model=getattr(response, "model", None) or "",
        stop_reason=getattr(choice, "finish_reason", None),
        tool_calls=[
            {
                "id": call.id,
                "name": call.function.name,
                "arguments": parsed_arguments(call.function.arguments),
            }
            for call in calls
            if getattr(call, "function", None) is not None
        ],
        provider=OPENAI.name,
    )


def sdk_stream(returned: Any) -> bool:
    """Whether `returned` is the openai SDK's stream (`create(stream=True)`), sync or async."""
    sdk = loaded_sdk("openai")
    return sdk is not None and isinstance(returned, sdk.Stream | sdk.AsyncStream)


class ChatStream(StreamReader):
    """`chat.completions.create(stream=True, stream_options={"include_usage": True})`:
    content deltas, tool calls in pieces by index, and the usage in the last chunk
    (`choices: []`)."""

    def __init__(self, source: Any) -> None:
        super().__init__(source)
        self.parts: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: Any = None
        self.model, self.finish = "", None

    def text(self, event: Any) -> str:
        self.model = getattr(event, "model", None) or self.model
        self.usage = getattr(event, "usage", None) or self.usage
        delta = ""
        for choice in (event.choices or [])[:1]:
            self.finish = choice.finish_reason or self.finish
            delta = getattr(choice.delta, "content", None) or ""
            for piece in getattr(choice.delta, "tool_calls", None) or []:
                call = self.calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = piece.id or call["id"]
                function = piece.function
                if function is not None:
                    call["name"] += function.name or ""
                    call["arguments"] += function.arguments or ""
        self.parts.append(delta)
        return delta

    def final(self) -> ChatResult | None:
        """None when the stream was cut short of its finish reason; a stream asked for
        without stream_options={"include_usage": True} has no usage to record and is
        refused (stream_without_usage)."""
        if self.finish is None:
            return None
        if self.usage is None:
            raise ValidationError(
                'The stream carried no usage: pass stream_options={"include_usage": True} '
                "with stream=True, so the answer is recorded with its whole usage.",
                code="stream_without_usage",
            )
        return ChatResult(
            text="".join(self.parts),
            usage=usage_from_openai(self.usage),
            model=self.model,
            stop_reason=self.finish,
            tool_calls=[
                {"id": c["id"], "name": c["name"], "arguments": parsed_arguments(c["arguments"])}
                for _, c in sorted(self.calls.items())
            ],
            provider=OPENAI.name,
        )


class OpenAIWire(Wire):
    name = "openai"
    models = MODELS
    media = MediaRates(openai_image_tokens, TOKENS_PER_PDF_PAGE)

    def request(
        self,
        system: str,
        summaries: list[str],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        check: bool = True,
    ) -> dict[str, Any]:
        """{"messages", "tools"?}: `chat.completions.create`'s."""
        request: dict[str, Any] = {
            "messages": chat_messages(system, summaries, messages, check=check)
        }
        if tools:
            request["tools"] = self.tool_definitions(tools)
        return request

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"type": "function", "function": function_spec(t)} for t in tools or []]

    def recognizes(self, response: Any) -> bool:
        return is_chat_completion(response)

    def result(self, response: Any) -> ChatResult:
        return chat_completion_result(response)

    def stream_reader(self, returned: Any) -> StreamReader | None:
        return ChatStream(returned) if sdk_stream(returned) else None

    def overflow(self, error: BaseException) -> bool | None:
        return overflow_code(error)


OPENAI = OpenAIWire()
