"""Embeddings from OpenAI's `embeddings.create` through the official SDK (also any
OpenAI-compatible server, by OPENAI_BASE_URL), with the summarizer's client settings
(docs/operations.rst, "Where embeddings come from")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openai

from assistant.providers.embeddings import BatchedEmbedder, EmbeddingError, EmbeddingKind
from assistant.providers.http import sdk_client
from assistant.providers.openai.wire import DEFAULT_EMBEDDING_MODEL, EMBEDDING_MODELS, OPENAI
from assistant.text import estimate_tokens

# A malformed 200 body surfaces as a ValueError (JSON decoding, or "No embedding data").
_CALL_ERRORS = (openai.APIError, ValueError)


class OpenAIEmbedder(BatchedEmbedder):
    """OpenAI's embedding models draw no line between documents and queries: both kinds
    are embedded alike. `dimensions` is sent where the model shortens its vectors."""

    provider = OPENAI.name

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        dimensions: int,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
    ) -> None:
        super().__init__(model, dimensions, EMBEDDING_MODELS, DEFAULT_EMBEDDING_MODEL)
        self._client = sdk_client(
            openai.OpenAI,
            openai.DefaultHttpxClient,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
        )

    def _request(
        self, texts: list[str], kind: EmbeddingKind
    ) -> tuple[Sequence[Sequence[float]], int]:
        extra: dict[str, Any] = {"dimensions": self.dimensions} if self.asks_dimensions else {}
        try:
            response = self._client.embeddings.create(model=self.model, input=texts, **extra)
        except _CALL_ERRORS as error:
            status = getattr(error, "status_code", None)
            raise EmbeddingError(
                f"openai {type(error).__name__} (status {status})",
                provider=self.provider,
                model=self.model,
                status=status,
            ) from error
        ordered = sorted(response.data, key=lambda item: item.index)
        usage = getattr(response, "usage", None)
        tokens = getattr(usage, "prompt_tokens", None)
        if tokens is None:  # an OpenAI-compatible server that reports none
            tokens = sum(estimate_tokens(text) for text in texts)
        return [item.embedding for item in ordered], int(tokens)
