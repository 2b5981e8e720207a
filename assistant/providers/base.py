"""The provider interface: results, normalized usage, errors."""

from __future__ import annotations

import abc
import uuid
from dataclasses import dataclass, field
from typing import Any


def new_tool_call_id() -> str:
    """An id for a tool call the provider sent without one (Gemini may)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def _int(value: Any) -> int:
    return int(value or 0)


@dataclass(frozen=True)
class Usage:
    """Token usage, normalized so `prompt_tokens` is the whole prompt for every provider."""

    input_tokens: int = 0  # the uncached part of the prompt
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @classmethod
    def from_anthropic(cls, usage: Any) -> Usage:
        # Anthropic's input_tokens already excludes the cached parts; cache fields may be null.
        if usage is None:
            return cls()
        return cls(
            input_tokens=_int(getattr(usage, "input_tokens", 0)),
            output_tokens=_int(getattr(usage, "output_tokens", 0)),
            cache_read_tokens=_int(getattr(usage, "cache_read_input_tokens", 0)),
            cache_write_tokens=_int(getattr(usage, "cache_creation_input_tokens", 0)),
        )

    @classmethod
    def from_gemini(cls, metadata: Any) -> Usage:
        # Gemini's promptTokenCount includes the cached part: split it out.
        if metadata is None:
            return cls()
        prompt = _int(getattr(metadata, "prompt_token_count", 0))
        cached = min(_int(getattr(metadata, "cached_content_token_count", 0)), prompt)
        output = _int(getattr(metadata, "candidates_token_count", 0)) + _int(
            getattr(metadata, "thoughts_token_count", 0)
        )
        return cls(input_tokens=prompt - cached, output_tokens=output, cache_read_tokens=cached)


@dataclass(frozen=True)
class SummaryResult:
    text: str
    usage: Usage
    model: str
    provider: str
    fallback: bool = False  # the offline summarizer answered for a failed provider


@dataclass(frozen=True)
class ChatResult:
    text: str
    usage: Usage
    model: str
    stop_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {id, name, arguments}
    # Thinking and redacted_thinking blocks, verbatim: store them with the answer
    # (add_message(..., blocks=result.blocks)) so the turn can send them back.
    blocks: list[dict[str, Any]] = field(default_factory=list)
    provider: str = ""  # the wire that answered (assistant.providers.catalog), "" when unknown
    # The provider's own compaction in this answer, as Message.provider_compaction stores
    # it (assistant.providers.compaction_blocks); None without one.
    compaction: dict[str, Any] | None = None
    # Why the provider's cache missed, where the request asked it to say (Anthropic's
    # cache diagnostics: `diagnostics.cache_miss_reason`; the Responses API's
    # `prompt_cache_diagnostics` of a miss); None otherwise.
    cache_diagnosis: dict[str, Any] | None = None


class ProviderError(Exception):
    """A provider call failed after the SDK's own retries; the SDK error is `__cause__`."""

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        model: str,
        status: int | None = None,
        overflow: bool = False,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.model = model
        self.status = status
        self.overflow = overflow

    @property
    def retryable(self) -> bool:
        """Worth trying again later: a rate limit, an overload, a timeout or a
        dropped connection (no HTTP status), never a bad request or a bad summary."""
        if self.overflow or isinstance(self, SummaryRejected):
            return False
        return self.status is None or self.status in RETRYABLE_STATUSES


RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class SummaryRejected(ProviderError):
    """The provider answered, but not with a usable summary."""

    def __init__(self, reason: str, *, provider: str = "", model: str = "") -> None:
        super().__init__(f"summary rejected: {reason}", provider=provider, model=model)
        self.reason = reason


class Provider(abc.ABC):
    name: str
    model: str  # the summary model
    chat_model: str
    max_input_tokens: int  # what one summarize() call can take in; callers chunk above it
    # Can answer summarize_cached (a chat model behind a prompt cache; not the offline one).
    reads_prompt_cache: bool = False

    def configure_models(
        self, model: str, chat_model: str, *, window: int, max_output_tokens: int
    ) -> None:
        """The summary model (its context `window`), the chat model a cached summary
        request goes to, and what one summarize() call can take in: the window less
        the output."""
        self.model = model
        self.chat_model = chat_model
        self.max_output_tokens = max_output_tokens
        self.max_input_tokens = window - max_output_tokens

    def compact(self, request: dict[str, Any]) -> Any:
        """The provider's own compaction endpoint called with `request`
        (Wire.compaction_endpoint), the SDK's answer returned; ProviderError on failure."""
        raise ProviderError(
            f"{type(self).__name__} has no compaction endpoint",
            provider=self.name,
            model=request.get("model") or "",
        )

    def summarize_cached(self, request: Any) -> SummaryResult:
        """A summary from the chat model, asked with the conversation's own request and
        the instruction appended (`assistant.providers.cached_request.CachedRequest`)."""
        raise NotImplementedError(f"{type(self).__name__} has no prompt cache to read")

    @abc.abstractmethod
    def summarize(
        self,
        transcript: str,
        *,
        previous_summary: str | None = None,
        instructions: str | None = None,
    ) -> SummaryResult: ...
