"""Embeddings from Gemini's `embed_content` through the official google-genai SDK (on the
Gemini API it sends batchEmbedContents, one request per text), with the summarizer's
client (docs/operations.rst, "Where embeddings come from")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.genai import types

from assistant.providers.embeddings import BatchedEmbedder, EmbeddingError, EmbeddingKind
from assistant.providers.gemini.provider import CALL_ERRORS, gemini_client
from assistant.providers.gemini.wire import DEFAULT_EMBEDDING_MODEL, EMBEDDING_MODELS, GEMINI
from assistant.text import estimate_tokens

# What each kind is embedded for: Gemini embeds a stored text and a question differently.
TASK_TYPES = {"document": "RETRIEVAL_DOCUMENT", "query": "RETRIEVAL_QUERY"}


class GeminiEmbedder(BatchedEmbedder):
    """`output_dimensionality` is always sent where the model shortens its vectors (768
    by default, of gemini-embedding-001's 3,072); a shortened vector comes back below
    unit length and is normalized (BatchedEmbedder.checked)."""

    provider = GEMINI.name

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        dimensions: int,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        retry_initial_delay: float = 1.0,
        retry_max_delay: float = 8.0,
    ) -> None:
        super().__init__(model, dimensions, EMBEDDING_MODELS, DEFAULT_EMBEDDING_MODEL)
        self._client = gemini_client(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            retry_initial_delay=retry_initial_delay,
            retry_max_delay=retry_max_delay,
        )

    def _request(
        self, texts: list[str], kind: EmbeddingKind
    ) -> tuple[Sequence[Sequence[float]], int]:
        config = types.EmbedContentConfig(
            task_type=TASK_TYPES[kind],
            output_dimensionality=self.dimensions if self.asks_dimensions else None,
        )
        contents: Any = list(texts)
        try:
            response = self._client.models.embed_content(
                model=self.model, contents=contents, config=config
            )
        except CALL_ERRORS as error:
            status = getattr(error, "code", None)
            status = status if isinstance(status, int) else None
            raise EmbeddingError(
                f"gemini {type(error).__name__} (status {status})",
                provider=self.provider,
                model=self.model,
                status=status,
            ) from error
        embeddings = response.embeddings or []
        vectors = [embedding.values or [] for embedding in embeddings]
        return vectors, reported_tokens(response, texts)


def reported_tokens(response: Any, texts: Sequence[str]) -> int:
    """The input tokens the response reports (its usage metadata; on Vertex AI each
    embedding's statistics); the Gemini API reports none for batchEmbedContents, so
    they are counted as the worker counts them (assistant.text.estimate_tokens)."""
    usage = getattr(response, "usage_metadata", None)
    if usage is not None and usage.prompt_token_count is not None:
        return int(usage.prompt_token_count)
    counts = [
        getattr(embedding.statistics, "token_count", None)
        for embedding in response.embeddings or []
    ]
    if counts and all(count is not None for count in counts):
        return int(sum(count for count in counts if count is not None))
    return sum(estimate_tokens(text) for text in texts)
