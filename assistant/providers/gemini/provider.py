"""Gemini's summarizers through the official google-genai SDK: on generateContent
(GeminiProvider) and on the Interactions API (GeminiInteractionsProvider)."""

from __future__ import annotations

from typing import Any

import httpx2
from google import genai
from google.genai import _interactions as interactions_errors
from google.genai import errors as genai_errors
from google.genai import types

from assistant.providers.base import (
    Provider,
    ProviderError,
    SummaryResult,
    Usage,
)
from assistant.providers.cached_request import CachedRequest
from assistant.providers.catalog import model_context_window
from assistant.providers.gemini.interactions import GEMINI_INTERACTIONS, interaction_result
from assistant.providers.gemini.wire import gemini_result
from assistant.providers.overflow import context_overflow
from assistant.providers.summary_prompt import build_summary_prompt, validate_summary

RETRY_STATUS_CODES = [408, 429, 500, 502, 503, 504]
# Timeouts and connection failures come through unwrapped from the SDK's HTTP stack; a
# malformed body surfaces as a ValueError (JSON or validation).
CALL_ERRORS = (genai_errors.APIError, httpx2.HTTPError, ValueError)


def gemini_client(
    *,
    api_key: str,
    base_url: str | None,
    timeout: float,
    max_retries: int,
    retry_initial_delay: float,
    retry_max_delay: float,
) -> genai.Client:
    """A google-genai client with the summarizer's bounds: google-genai has no timeout and
    no retries unless told (timeout in milliseconds); it retries RETRY_STATUS_CODES and
    connection errors on its own backoff (it ignores retry-after)."""
    retry = types.HttpRetryOptions(
        attempts=max_retries + 1,
        initial_delay=retry_initial_delay,
        max_delay=retry_max_delay,
        jitter=retry_initial_delay,
        http_status_codes=RETRY_STATUS_CODES,
    )
    return genai.Client(
        api_key=api_key,
        http_options=types.HttpOptions(
            base_url=base_url, timeout=int(timeout * 1000), retry_options=retry
        ),
    )


class GeminiProvider(Provider):
    name = "gemini"
    reads_prompt_cache = True

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        chat_model: str,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        max_output_tokens: int = 2048,
        retry_initial_delay: float = 1.0,
        retry_max_delay: float = 8.0,
    ) -> None:
        self.configure_models(
            model,
            chat_model,
            window=model_context_window(model),
            max_output_tokens=max_output_tokens,
        )
        self._client = gemini_client(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            retry_initial_delay=retry_initial_delay,
            retry_max_delay=retry_max_delay,
        )

    def _call(self, method: str, model: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client.models, method)(model=model, **kwargs)
        except CALL_ERRORS as error:
            status = getattr(error, "code", None)
            status = status if isinstance(status, int) else None
            raise ProviderError(
                f"gemini {type(error).__name__} (status {status})",
                provider=self.name,
                model=model,
                status=status,
                overflow=context_overflow(error),
            ) from error

    def _generate(
        self, model: str, system: str, contents: Any, max_tokens: int, **extra: Any
    ) -> Any:
        config = types.GenerateContentConfig(
            system_instruction=system or None,
            max_output_tokens=max_tokens,
            temperature=0.2,
            **extra,
        )
        return self._call("generate_content", model, contents=contents, config=config)

    def summarize(
        self,
        transcript: str,
        *,
        previous_summary: str | None = None,
        instructions: str | None = None,
    ) -> SummaryResult:
        system, user_text = build_summary_prompt(transcript, previous_summary)
        if instructions:
            system = f"{system}\n\n{instructions}"
        contents = [{"role": "user", "parts": [{"text": user_text}]}]
        response = self._generate(self.model, system, contents, self.max_output_tokens)
        return self._summary(response, self.model)

    def summarize_cached(self, request: CachedRequest) -> SummaryResult:
        """The conversation's request to the chat model: implicit caching discounts the
        prefix it repeats (system instruction, tools, contents)."""
        shape = request.gemini()
        extra: dict[str, Any] = {}
        if shape["tools"]:
            extra["tools"] = shape["tools"]
            extra["automatic_function_calling"] = {"disable": True}
        response = self._generate(
            self.chat_model,
            shape["system_instruction"],
            shape["contents"],
            self.max_output_tokens,
            **extra,
        )
        return self._summary(response, self.chat_model)

    def _summary(self, response: Any, model: str) -> SummaryResult:
        try:
            text = validate_summary(gemini_result(response).text)
        except ProviderError as error:
            error.provider, error.model = self.name, model
            raise
        return SummaryResult(
            text=text,
            usage=Usage.from_gemini(response.usage_metadata),
            model=response.model_version or model,
            provider=self.name,
        )


# The Interactions API's errors are the SDK's second family (google/genai/_gaos/lib/
# compat_errors.py, re-exported by google/genai/_interactions: APIStatusError with
# status_code, APIConnectionError and its APITimeoutError, APIResponseValidationError
# for a malformed body); a hop of its automatic continuation failing after progress is
# errors.ContinuationInterruptedError (google/genai/errors.py).
_INTERACTIONS_ERRORS = (
    interactions_errors.APIError,
    genai_errors.ContinuationInterruptedError,
    httpx2.HTTPError,
    ValueError,
)
# An interaction that ended without its whole answer (interaction.py's InteractionStatus).
_UNFINISHED = frozenset({"incomplete", "failed", "cancelled", "budget_exceeded"})


class GeminiInteractionsProvider(GeminiProvider):
    """The summarizer on Gemini's Interactions API (`client.interactions.create`), for
    ASSISTANT_SUMMARIZER = "gemini_interactions": GEMINI_*'s key, base URL and models.
    Each call goes with `store=False` and never names `previous_interaction_id`, as the
    chat wire's (docs/providers.rst): nothing is kept on the server, nothing chained."""

    name = GEMINI_INTERACTIONS.name

    def _interact(self, model: str, request: dict[str, Any], **config: Any) -> Any:
        config = {"max_output_tokens": self.max_output_tokens, "temperature": 0.2, **config}
        try:
            return self._client.interactions.create(
                model=model, generation_config=config, **{**request, "store": False}
            )
        except _INTERACTIONS_ERRORS as error:
            status = getattr(error, "status_code", None)
            status = status if isinstance(status, int) else None
            raise ProviderError(
                f"gemini_interactions {type(error).__name__} (status {status})",
                provider=self.name,
                model=model,
                status=status,
                overflow=context_overflow(error),
            ) from error

    def summarize(
        self,
        transcript: str,
        *,
        previous_summary: str | None = None,
        instructions: str | None = None,
    ) -> SummaryResult:
        system, user_text = build_summary_prompt(transcript, previous_summary)
        if instructions:
            system = f"{system}\n\n{instructions}"
        request = {
            "system_instruction": system,
            "input": [{"type": "user_input", "content": [{"type": "text", "text": user_text}]}],
        }
        return self._interaction_summary(self._interact(self.model, request), self.model)

    def summarize_cached(self, request: CachedRequest) -> SummaryResult:
        """The conversation's request to the chat model, as the chat wire sent it (the
        whole compacted context as `input`), the instruction a user_input step after it;
        with tools, tool_choice "none" (the tools keep the cached prefix, the answer is
        the summary)."""
        shape = request.gemini_interactions()
        choice = {"tool_choice": "none"} if shape.get("tools") else {}
        response = self._interact(self.chat_model, shape, **choice)
        return self._interaction_summary(response, self.chat_model)

    def _interaction_summary(self, response: Any, model: str) -> SummaryResult:
        result = interaction_result(response, model)
        if result.stop_reason in _UNFINISHED and not result.text:
            raise ProviderError(
                f"gemini_interactions ended {result.stop_reason}", provider=self.name, model=model
            )
        try:
            text = validate_summary(result.text)
        except ProviderError as error:
            error.provider, error.model = self.name, model
            raise
        return SummaryResult(text=text, usage=result.usage, model=result.model, provider=self.name)
