"""The summarizer on OpenAI's Chat Completions through the official SDK (also any
OpenAI-compatible server, by OPENAI_BASE_URL)."""

from __future__ import annotations

from typing import Any

import openai

from assistant.providers.base import Provider, ProviderError, SummaryResult
from assistant.providers.cached_request import CachedRequest
from assistant.providers.catalog import model_context_window
from assistant.providers.http import sdk_client
from assistant.providers.openai.wire import OPENAI, chat_completion_result
from assistant.providers.overflow import context_overflow
from assistant.providers.summary_prompt import build_summary_prompt, validate_summary

# A malformed 200 body surfaces as a ValueError (JSON decoding), not as an APIError.
_CALL_ERRORS = (openai.APIError, ValueError)


class OpenAIProvider(Provider):
    name = OPENAI.name
    reads_prompt_cache = True  # automatic prompt caching from 1,024 tokens

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
            openai.OpenAI,
            openai.DefaultHttpxClient,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
        )

    def _create(self, model: str, max_tokens: int | None = None, **request: Any) -> Any:
        cap = max_tokens or self.max_output_tokens
        try:
            return self._client.chat.completions.create(
                model=model, max_completion_tokens=cap, **request
            )
        except _CALL_ERRORS as error:
            status = getattr(error, "status_code", None)
            raise ProviderError(
                f"openai {type(error).__name__} (status {status})",
                provider=self.name,
                model=model,
                status=status,
                overflow=context_overflow(error),
            ) from error

    def compact(self, request: dict[str, Any]) -> Any:
        """`responses.compact` (OpenAI's own compaction of a Responses conversation)."""
        try:
            return self._client.responses.compact(**request)
        except _CALL_ERRORS as error:
            status = getattr(error, "status_code", None)
            raise ProviderError(
                f"openai {type(error).__name__} (status {status})",
                provider=self.name,
                model=request.get("model") or "",
                status=status,
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
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user_text}]
        return self._summary(self._create(self.model, messages=messages), self.model)

    def summarize_cached(self, request: CachedRequest) -> SummaryResult:
        """The conversation's request to the chat model (OpenAI's cache holds all of it
        but the instruction), tools included so the cached prefix matches."""
        response = self._create(self.chat_model, **request.openai())
        return self._summary(response, self.chat_model)

    def _summary(self, response: Any, model: str) -> SummaryResult:
        result = chat_completion_result(response)
        if result.stop_reason == "length" and not result.text:
            raise ProviderError("openai stopped at the output cap", provider=self.name, model=model)
        try:
            text = validate_summary(result.text)
        except ProviderError as error:
            error.provider, error.model = self.name, model
            raise
        return SummaryResult(
            text=text, usage=result.usage, model=result.model or model, provider=self.name
        )
