"""Gemini through google-genai's `generate_content`: request shape (contents and a
config with the system instruction and tools), response reading, model table."""

from __future__ import annotations

import inspect
import math
from typing import Any

from assistant.providers import convert
from assistant.providers.base import ChatResult, Usage, new_tool_call_id
from assistant.providers.embeddings import EmbeddingModel
from assistant.providers.wire import ModelInfo, StreamReader, Wire
from assistant.text import MediaRates

# Longest prefix wins; USD per million tokens. Implicit caching: cached input at 0.1x,
# no write premium (written at the input price).
MODELS = {
    "gemini-1.5-pro": ModelInfo(2_097_152, max_output=8_192),
    "gemini-1.5-flash": ModelInfo(1_048_576, max_output=8_192),
    "gemini-2": ModelInfo(1_048_576, max_output=8_192),
    "gemini-3": ModelInfo(1_048_576, max_output=65_536),
    "gemini-2.5-pro": ModelInfo(1_048_576, 1.25, 10.0, 0.125, 1.25, 65_536),
    "gemini-2.5-flash": ModelInfo(1_048_576, 0.3, 2.5, 0.03, 0.3, 65_536),
    "gemini-2.5-flash-lite": ModelInfo(1_048_576, 0.1, 0.4, 0.01, 0.1, 65_536),
}

# The embedding models (`embed_content`, batchEmbedContents: up to 100 texts a request):
# gemini-embedding-001 reads 2,048 tokens per text and gives 3,072 dimensions unasked; the
# app asks for 768 by default (`output_dimensionality`, 128 to 3,072). USD per million
# input tokens.
EMBEDDING_MODELS = {
    "gemini-embedding-001": EmbeddingModel(
        768, 2_048, 100, 0.15, min_dimensions=128, max_dimensions=3072, native_dimensions=3072
    ),
}
DEFAULT_EMBEDDING_MODEL = "gemini-embedding-001"

# Token docs: an image with both sides up to 384 px is 258 tokens; a larger one is cut
# into 768 x 768 tiles of 258 tokens each; a document page is 258 tokens.
SMALL_IMAGE_EDGE = 384
TILE_EDGE = 768
TOKENS_PER_TILE = 258
TOKENS_PER_PDF_PAGE = 258


def gemini_image_tokens(width: int, height: int) -> int:
    if width <= SMALL_IMAGE_EDGE and height <= SMALL_IMAGE_EDGE:
        return TOKENS_PER_TILE
    tiles = math.ceil(width / TILE_EDGE) * math.ceil(height / TILE_EDGE)
    return tiles * TOKENS_PER_TILE


def is_gemini_response(response: Any) -> bool:
    return hasattr(response, "candidates") and hasattr(response, "usage_metadata")


def gemini_result(response: Any, model: str = "") -> ChatResult:
    """The first candidate's text (thought summaries left out) and function calls (an id
    made up when Gemini sent none); usage split into uncached input and cache reads
    (Gemini's promptTokenCount includes the cached part)."""
    candidate = (response.candidates or [None])[0]
    return _result(
        _parts(candidate),
        response.usage_metadata,
        getattr(response, "model_version", None) or model,
        getattr(candidate, "finish_reason", None),
    )


def _parts(candidate: Any) -> list[Any]:
    return (candidate.content.parts if candidate and candidate.content else None) or []


def _result(parts: list[Any], usage: Any, model: str, finish: Any) -> ChatResult:
    calls = [part.function_call for part in parts if part.function_call]
    return ChatResult(
        text="".join(p.text for p in parts if p.text and not p.thought),
        usage=Usage.from_gemini(usage),
        model=model,
        stop_reason=getattr(finish, "value", finish),
        tool_calls=[
            {
                "id": c.id or new_tool_call_id(),
                "name": c.name or "",
                "arguments": dict(c.args or {}),
            }
            for c in calls
        ],
        provider=GEMINI.name,
    )


class GeminiStream(StreamReader):
    """`generate_content_stream(...)`: chunks of the same response, each with parts of
    its candidate; the last one carries the finish reason and the whole usage."""

    def __init__(self, source: Any) -> None:
        super().__init__(source)
        self.parts: list[Any] = []
        self.usage: Any = None
        self.model, self.finish = "", None

    def text(self, event: Any) -> str:
        candidate = (event.candidates or [None])[0]
        parts = _parts(candidate)
        self.parts += parts
        self.usage = event.usage_metadata or self.usage
        self.model = getattr(event, "model_version", None) or self.model
        self.finish = getattr(candidate, "finish_reason", None) or self.finish
        return "".join(p.text for p in parts if p.text and not p.thought)

    def final(self) -> ChatResult | None:
        if self.finish is None:
            return None
        return _result(self.parts, self.usage, self.model, self.finish)


class GeminiWire(Wire):
    name = "gemini"
    models = MODELS
    media = MediaRates(gemini_image_tokens, TOKENS_PER_PDF_PAGE)

    def telemetry_name(self, model: str = "") -> str:
        return "gcp.gemini"

    def shape(
        self,
        system: str,
        summaries: list[str],
        messages: list[dict[str, Any]],
        *,
        check: bool = True,
    ) -> dict[str, Any]:
        """{"system_instruction": str, "contents": [...]}: `Context.to_gemini()`."""
        return convert.to_gemini(system, summaries, messages, check=check)

    def request(
        self,
        system: str,
        summaries: list[str],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        check: bool = True,
    ) -> dict[str, Any]:
        """{"contents", "config"}: `models.generate_content`'s, the config holding the
        system instruction and tools (automatic function calling off: the host runs them)."""
        shape = self.shape(system, summaries, messages, check=check)
        config: dict[str, Any] = {}
        if shape["system_instruction"]:
            config["system_instruction"] = shape["system_instruction"]
        if tools:
            config["tools"] = self.tool_definitions(tools)
            config["automatic_function_calling"] = {"disable": True}
        return {"contents": shape["contents"], "config": config}

    def with_timeout(self, request: dict[str, Any], seconds: float) -> dict[str, Any]:
        """google-genai takes a call's timeout in its config's `http_options`, in
        milliseconds."""
        config = dict(request.get("config") or {})
        options = dict(config.get("http_options") or {})
        options["timeout"] = max(1, int(seconds * 1000))
        config["http_options"] = options
        return {**request, "config": config}

    def tool_definitions(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return convert.gemini_tools(tools)

    def recognizes(self, response: Any) -> bool:
        return is_gemini_response(response)

    def result(self, response: Any) -> ChatResult:
        return gemini_result(response)

    def stream_reader(self, returned: Any) -> StreamReader | None:
        # generate_content_stream's (async) generator of GenerateContentResponse chunks
        iterator = inspect.isgenerator(returned) or inspect.isasyncgen(returned)
        return GeminiStream(returned) if iterator else None


GEMINI = GeminiWire()
