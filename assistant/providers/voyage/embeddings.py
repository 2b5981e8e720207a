"""Embeddings from Voyage AI through the official `voyageai` SDK (`Client.embed`), the
`voyage` extra; VOYAGE_API_KEY (else the SDK's VOYAGE_API_KEY variable) and
VOYAGE_BASE_URL, with the summarizer's timeout and retries (docs/operations.rst, "Where
embeddings come from")."""

from __future__ import annotations

from collections.abc import Sequence

import voyageai
from voyageai import error as voyage_errors

from assistant.providers.embeddings import BatchedEmbedder, EmbeddingError, EmbeddingKind
from assistant.providers.voyage.models import DEFAULT_EMBEDDING_MODEL, EMBEDDING_MODELS, NAME

# Every failure of the SDK's request layer (HTTP errors, timeouts, connection errors, a
# malformed body) is a VoyageError; a body that parses but lacks a field is a KeyError or
# an AttributeError in its response object.
_CALL_ERRORS = (voyage_errors.VoyageError, KeyError, AttributeError, TypeError, ValueError)


class VoyageEmbedder(BatchedEmbedder):
    """Voyage embeds a stored text and a question differently (`input_type` "document"
    or "query"). The SDK retries a rate limit, an overload and a timeout itself
    (`max_retries` counts its attempts: LLM_MAX_RETRIES + 1), waiting 1 to 16 s between
    them (it ignores retry-after); each attempt is bounded by the timeout."""

    provider = NAME

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
        self._client = voyageai.Client(
            api_key=api_key, max_retries=max_retries + 1, timeout=timeout, base_url=base_url
        )

    def _request(
        self, texts: list[str], kind: EmbeddingKind
    ) -> tuple[Sequence[Sequence[float]], int]:
        try:
            response = self._client.embed(
                texts,
                model=self.model,
                input_type=kind,
                output_dimension=self.dimensions if self.asks_dimensions else None,
            )
        except _CALL_ERRORS as error:
            status = getattr(error, "http_status", None)
            status = status if isinstance(status, int) else None
            raise EmbeddingError(
                f"voyage {type(error).__name__} (status {status})",
                provider=self.provider,
                model=self.model,
                status=status,
            ) from error
        return response.embeddings, int(response.total_tokens)
