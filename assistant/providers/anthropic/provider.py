"""Anthropic through the official SDK's Messages API."""

from __future__ import annotations

from typing import Any

import anthropic

from assistant.providers.base import Provider, ProviderError, SummaryResult, Usage
from assistant.providers.cached_request import CachedRequest
from assistant.providers.catalog import model_context_window
from assistant.providers.http import sdk_client
from assistant.providers.overflow import OVERFLOW_STOP_REASON, context_overflow
from assistant.providers.summary_prompt import build_summary_prompt, validate_summary

# A malformed 200 body surfaces as a ValueError (JSON decoding), not as an APIError.
_CALL_ERRORS = (anthropic.APIError, ValueError)


class AnthropicProvider(Provider):
    name = "anthropic"
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
    ) -> None:
        self.configure_models(
            model,
            chat_model,
            window=model_context_window(model),
            max_output_tokens=max_output_tokens,
        )
        self._client = sdk_client(
            anthropic.Anthropic,
            anthropic.DefaultHttpxClient,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
        )

    def _error(self, error: Exception, model: str) -> ProviderError:
        status = getattr(error, "status_code", None)
        return ProviderError(
            f"anthropic {type(error).__name__} (status {status})",
            provider=self.name,
            model=model,
            status=status,
            overflow=context_overflow(error),
        )

    def _create(self, model: str, **request: Any) -> Any:
        try:
            return self._client.messages.create(model=model, **request)
        except _CALL_ERRORS as error:
            raise self._error(error, model) from error

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
        response = self._create(
            self.model,
            max_tokens=self.max_output_tokens,
            system=system,
            messages=[{"role": "user", "content": user_text}],
        )
        return self._summary(response, self.model)

    def summarize_cached(self, request: CachedRequest) -> SummaryResult:
        """The conversation's request to the chat model (its cache holds all of it
        but the instruction), tools included so the cached prefix matches."""
        response = self._create(
            self.chat_model, max_tokens=self.max_output_tokens, **request.anthropic()
        )
        return self._summary(response, self.chat_model)

    def _summary(self, response: Any, model: str) -> SummaryResult:
        if response.stop_reason == OVERFLOW_STOP_REASON:
            raise ProviderError(
                "anthropic stopped at the context window",
                provider=self.name,
                model=model,
                overflow=True,
            )
        text = "".join(b.text for b in response.content if b.type == "text")
        try:
            text = validate_summary(text)
        except ProviderError as error:
            error.provider, error.model = self.name, model
            raise
        return SummaryResult(
            text=text,
            usage=Usage.from_anthropic(response.usage),
            model=response.model or model,
            provider=self.name,
        )
