"""Is this error (or response) a context-window overflow? Typed errors and status first,
wording second; look-alikes (token rate limits, output caps, body size) are not."""

from __future__ import annotations

import re
from collections.abc import Callable

from assistant.providers.base import ProviderError
from assistant.providers.catalog import overflow_verdict
from assistant.providers.wire import loaded_sdk

OVERFLOW_STOP_REASON = "model_context_window_exceeded"

# How servers word "the prompt did not fit the context window". Anthropic, OpenAI and Gemini
# first, then what users put behind OpenAI-compatible endpoints, each checked against the
# server's source or its users' reports.
_OVERFLOW_WORDING = re.compile(
    r"prompt is too long"  # Anthropic
    r"|input length and `?max_tokens`? exceed context limit"  # Anthropic, input + max_tokens
    r"|input token count.{0,40}exceeds the maximum"  # Gemini
    r"|maximum context length"  # OpenAI, Azure, DeepSeek, vLLM, OpenRouter, LiteLLM
    r"|context[_ ]length[_ ]exceeded"  # OpenAI's error code
    r"|reduce the length of the messages"  # OpenAI, Groq
    r"|context ?window ?exceeded|model_context_window_exceeded"  # proxies, z.ai
    r"|exceeds? the context window"  # OpenAI Responses API
    r"|input is too long for requested model"  # Bedrock
    r"|exceeds the available context size"  # llama.cpp server
    r"|prompt too long; exceeded (?:max )?context length"  # Ollama
    r"|maximum prompt length is"  # xAI
    r"|is longer than the model'?s context length"  # Together
    r"|exceeds the maximum allowed input length"  # Poolside
    r"|greater than the context length"  # LM Studio
    r"|context window exceeds limit"  # MiniMax
    r"|exceeded model token limit"  # Kimi
    r"|range of input length should be"  # DashScope (Qwen)
    r"|prompt token count of [\d,]+ exceeds the limit"  # GitHub Copilot
    r"|`?inputs`? tokens \+ `?max_new_tokens`? must be <="  # Hugging Face TGI
    r"|`?inputs`? must have less than [\d,]+ tokens"  # Hugging Face TGI
    r"|too many (?:input )?tokens",  # Cohere, proxies
    re.I,
)
# Wording that means a limit other than the context window, even on a 400 or with no status:
# token rate limits and quotas (Bedrock words a throttle "Too many tokens, please wait"), and
# caps on the output alone.
_NOT_OVERFLOW_WORDING = re.compile(
    r"tokens per (?:minute|day)|per minute|this minute|rate limit|\bTPM\b|\bRPM\b|quota"
    r"|throttl|please wait|service unavailable"
    r"|maximum allowed number of output tokens|supports at most [\d,]+ completion tokens",
    re.I,
)
# Status codes on which an overflow can be reported; None = unknown (a proxy's plain exception).
_OVERFLOW_STATUSES = {400, 422, None}


def _status_and_text(error: BaseException) -> tuple[int | None, str]:
    # An SDK's error can exist only once that SDK is imported: importing the SDKs here
    # would cost every process (manage.py commands, the admin) seconds at start-up.
    anthropic, genai_errors = loaded_sdk("anthropic"), loaded_sdk("google.genai.errors")
    if anthropic and isinstance(error, anthropic.APIStatusError):
        return error.status_code, f"{error.message} {error.body}"
    if genai_errors and isinstance(error, genai_errors.APIError):
        return error.code, f"{error.status} {error.message}"
    status = getattr(error, "status_code", None) or getattr(error, "code", None)
    return (status if isinstance(status, int) else None), str(error)


def context_overflow(error: BaseException | None) -> bool:
    """True when `error` says the prompt did not fit the model's context window."""
    if error is None:
        return False
    if isinstance(error, ProviderError):
        return error.overflow or context_overflow(error.__cause__)
    verdict = overflow_verdict(error)  # the provider's own error, where it says for sure
    if verdict is not None:
        return verdict
    if type(error).__name__ == "ContextWindowExceededError":  # LiteLLM and friends
        return True
    status, text = _status_and_text(error)
    if status not in _OVERFLOW_STATUSES:
        return False
    if _NOT_OVERFLOW_WORDING.search(text):
        return False
    return bool(_OVERFLOW_WORDING.search(text))


def _number(text: str | None) -> int:
    return int((text or "0").replace(",", ""))


def _sent_limit(sent: str, limit: str) -> tuple[int, int]:
    return _number(sent), _number(limit)


def _limit_sent(limit: str, sent: str) -> tuple[int, int]:
    return _number(sent), _number(limit)


def _input_beside_output(sent: int, output: str, window: str) -> tuple[int, int]:
    # The window holds input and requested output: the input may use what the output leaves.
    return sent, max(0, _number(window) - _number(output))


def _anthropic_input_and_output(sent: str, output: str, window: str) -> tuple[int, int]:
    return _input_beside_output(_number(sent), output, window)


def _openai_requested(window: str, text: str, tools: str | None, output: str) -> tuple[int, int]:
    return _input_beside_output(_number(text) + _number(tools), output, window)


def _vllm_output_too_large(output: str, window: str, sent: str) -> tuple[int, int]:
    return _input_beside_output(_number(sent), output, window)


def _tgi_inputs_and_new_tokens(window: str, sent: str, output: str) -> tuple[int, int]:
    return _input_beside_output(_number(sent), output, window)


_N = r"([\d,]+)"
# (pattern, how its groups give (input tokens sent, input tokens the window takes)),
# most specific first.
_COUNT_PATTERNS: tuple[tuple[re.Pattern[str], Callable[..., tuple[int, int]]], ...] = (
    # Anthropic: "input length and `max_tokens` exceed context limit: 195000 + 8192 > 200000"
    (re.compile(rf"exceed context limit: {_N} \+ {_N} > {_N}"), _anthropic_input_and_output),
    # Anthropic: "prompt is too long: 208310 tokens > 200000 maximum"
    (re.compile(rf"{_N}\s*tokens\s*>\s*{_N}\s*maximum"), _sent_limit),
    # Gemini: "The input token count (1200293) exceeds the maximum number of tokens allowed
    # (1048576)"
    (
        re.compile(rf"input token count \({_N}\) exceeds the maximum .*? allowed \({_N}\)"),
        _sent_limit,
    ),
    # OpenAI (older), DeepSeek, OpenRouter: "maximum context length is 4096 tokens. However,
    # you requested 4222 tokens (1222 in the messages, 3000 in the completion)"; OpenRouter
    # may add ", 10042 of tool input"
    (
        re.compile(
            rf"maximum context length is {_N} tokens.{{0,40}}?requested (?:about )?[\d,]+ tokens "
            rf"\({_N} (?:in the messages|in your prompt|of text input)"
            rf"(?:, {_N} of tool input)?[,;] {_N} (?:in|for) the (?:completion|output)",
            re.I | re.S,
        ),
        _openai_requested,
    ),
    # vLLM: "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum
    # context length is 4096 tokens and your request has 2778 input tokens"
    (
        re.compile(
            rf"is too large: {_N}\. This model's maximum context length is {_N} tokens "
            rf"and your request has {_N} input tokens",
            re.I,
        ),
        _vllm_output_too_large,
    ),
    # OpenAI: "maximum context length is 8192 tokens. However, your messages resulted in 9000
    # tokens"; vLLM: "... However, your request has 33000 input tokens"
    (
        re.compile(
            rf"maximum context length is {_N} tokens.{{0,40}}?"
            rf"(?:resulted in|your request has|requested (?:about )?) ?{_N} (?:input )?tokens",
            re.I | re.S,
        ),
        _limit_sent,
    ),
    # llama.cpp server: "request (4476 tokens) exceeds the available context size (4096
    # tokens)", or the counts in its error body
    (
        re.compile(rf"request \({_N} tokens\) exceeds the available context size \({_N} tokens"),
        _sent_limit,
    ),
    (re.compile(rf"n_prompt_tokens\W+{_N}.{{0,40}}?n_ctx\W+{_N}", re.S), _sent_limit),
    # Mistral: "Prompt contains 300000 tokens, too large for model with 131072 maximum context
    # length"
    (
        re.compile(rf"prompt contains {_N} tokens.*?too large for model with {_N}", re.I),
        _sent_limit,
    ),
    # xAI: "maximum prompt length is 131072 but the request contains 537812 tokens"
    (
        re.compile(rf"maximum prompt length is {_N} but the request contains {_N}", re.I),
        _limit_sent,
    ),
    # Together: "The input (265330 tokens) is longer than the model's context length (262144"
    (
        re.compile(
            rf"input \({_N} tokens\) is longer than the model'?s context length \({_N}", re.I
        ),
        _sent_limit,
    ),
    # Kimi: "exceeded model token limit: 262144 (requested: 300000)"
    (
        re.compile(rf"exceeded model token limit: {_N} \(requested: {_N}\)", re.I),
        _limit_sent,
    ),
    # Hugging Face TGI: "`inputs` tokens + `max_new_tokens` must be <= 2048. Given: 1244
    # `inputs` tokens and 1000 `max_new_tokens`"
    (
        re.compile(rf"must be <= {_N}\. Given: {_N} `?inputs`? tokens and {_N} `?max_new_tokens"),
        _tgi_inputs_and_new_tokens,
    ),
    # Poolside: "Input length 265330 exceeds the maximum allowed input length of 262144"
    (
        re.compile(rf"input length {_N} exceeds the maximum allowed input length of {_N}", re.I),
        _sent_limit,
    ),
    # GitHub Copilot: "prompt token count of 145000 exceeds the limit of 128000"
    (re.compile(rf"prompt token count of {_N} exceeds the limit of {_N}", re.I), _sent_limit),
)


def overflow_token_counts(error: BaseException) -> tuple[int, int] | None:
    """(input tokens sent, input tokens the window takes) from an overflow error or any error
    in its cause chain, when the server's message states them. Where the window must also
    hold the requested output, the second number is what the output leaves for the input."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for text in (str(current), str(getattr(current, "message", "") or "")):
            for pattern, counts in _COUNT_PATTERNS:
                match = pattern.search(text)
                if match:
                    return counts(*match.groups())
        current = current.__cause__ or current.__context__
    return None
