"""Gemini through the official google-genai SDK."""

from __future__ import annotations

from typing import Any

import httpx2
from google import genai
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
from assistant.providers.gemini.wire import gemini_result
from assistant.providers.overflow import context_overflow
from assistant.providers.summary_prompt import build_summary_prompt, validate_summary

RETRY_STATUS_CODES = [408, 429, 500, 502, 503, 504]
# Timeouts and connection failures come through unwrapped from the SDK's HTTP stack; a
# malformed body surfaces as a ValueError (JSON or validation).
_CALL_ERRORS = (genai_errors.APIError, httpx2.HTTPError, ValueError)


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
        # google-genai has no timeout and no retries unless told (timeout in milliseconds).
        retry = types.HttpRetryOptions(
            attempts=max_retries + 1,
            initial_delay=retry_initial_delay,
            max_delay=retry_max_delay,
            jitter=retry_initial_delay,
            http_status_codes=RETRY_STATUS_CODES,
        )
        self._client = genai.Client(
            api_key=api_key,
            http_options=types.HttpOptions(
                base_url=base_url, timeout=int(timeout * 1000), retry_options=retry
            ),
        )

    def _call(self, method: str, model: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client.models, method)(model=model, **kwargs)
        except _CALL_ERRORS as error:
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
