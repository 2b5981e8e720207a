"""Is this error (or response) a context-window overflow? Typed errors and status first,
wording second; look-alikes (token rate limits, output caps, body size) are not."""

from __future__ import annotations

import re

import anthropic
from django.conf import settings
from google.genai import errors as genai_errors

from assistant.llm.base import ProviderError, Usage

OVERFLOW_STOP_REASON = "model_context_window_exceeded"

_OVERFLOW_WORDING = re.compile(
    r"prompt is too long"
    r"|input token count.{0,40}exceeds the maximum"
    r"|maximum context length"
    r"|context[_ ]length[_ ]exceeded"
    r"|reduce the length of the messages"
    r"|context ?window ?exceeded"
    r"|exceeds? the context window"
    r"|input is too long for requested model"
    r"|too many (?:input )?tokens",
    re.I,
)
# Wording that means a limit other than the context window, even on a 400.
_NOT_OVERFLOW_WORDING = re.compile(
    r"tokens per (?:minute|day)|rate limit|\bTPM\b|\bRPM\b|quota"
    r"|maximum allowed number of output tokens|max_tokens\b.{0,40}>",
    re.I,
)
# Status codes on which an overflow can be reported; None = unknown (a proxy's plain exception).
_OVERFLOW_STATUSES = {400, 422, None}


def _status_and_text(error: BaseException) -> tuple[int | None, str]:
    if isinstance(error, anthropic.APIStatusError):
        return error.status_code, f"{error.message} {error.body}"
    if isinstance(error, genai_errors.APIError):
        return error.code, f"{error.status} {error.message}"
    status = getattr(error, "status_code", None) or getattr(error, "code", None)
    return (status if isinstance(status, int) else None), str(error)


def context_overflow(error: BaseException | None) -> bool:
    """True when `error` says the prompt did not fit the model's context window."""
    if error is None:
        return False
    if isinstance(error, ProviderError):
        return error.overflow or context_overflow(error.__cause__)
    if isinstance(error, anthropic.ContentTooLargeError | anthropic.RateLimitError):
        return False  # a 413 is the request body's size; a 429 is never the window
    if isinstance(error, anthropic.APIConnectionError):
        return False
    if type(error).__name__ == "ContextWindowExceededError":  # LiteLLM and friends
        return True
    status, text = _status_and_text(error)
    if status not in _OVERFLOW_STATUSES:
        return False
    if _NOT_OVERFLOW_WORDING.search(text):
        return False
    return bool(_OVERFLOW_WORDING.search(text))


# Longest matching prefix wins.
_WINDOWS = {
    "claude-": 200_000,
    "claude-3": 200_000,
    "claude-opus": 200_000,
    "claude-sonnet": 200_000,
    "claude-haiku": 200_000,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-2": 1_048_576,
    "gemini-3": 1_048_576,
}


def model_context_window(model: str) -> int:
    name = (model or "").lower().removeprefix("models/")
    if name.startswith("claude") and "[1m]" in name:
        return 1_000_000
    best = max((p for p in _WINDOWS if name.startswith(p)), key=len, default=None)
    if best is None:
        return int(settings.ASSISTANT_DEFAULT_CONTEXT_WINDOW)
    return _WINDOWS[best]


def response_overflowed(usage: Usage, model: str, stop_reason: str | None) -> bool:
    """A response that reports more prompt tokens than the window, or stopped on it."""
    return stop_reason == OVERFLOW_STOP_REASON or usage.prompt_tokens > model_context_window(model)
