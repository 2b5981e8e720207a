"""Voyage's embedding models (no SDK imported): 32,000 tokens per text, up to 1,000 texts
a request and a total of tokens per request that depends on the model; 1,024 dimensions
by default, or 256, 512 or 2,048 (`output_dimension`). USD per million input tokens."""

from __future__ import annotations

from assistant.providers.embeddings import EmbeddingModel

NAME = "voyage"
CHOICES = (256, 512, 1024, 2048)


def _voyage(price: float, request_tokens: int) -> EmbeddingModel:
    return EmbeddingModel(
        1024,
        32_000,
        1_000,
        price,
        dimension_choices=CHOICES,
        max_request_tokens=request_tokens,
    )


EMBEDDING_MODELS = {
    "voyage-3.5": _voyage(0.06, 320_000),
    "voyage-3.5-lite": _voyage(0.02, 1_000_000),
    "voyage-3-large": _voyage(0.18, 120_000),
    "voyage-code-3": _voyage(0.18, 120_000),
}
DEFAULT_EMBEDDING_MODEL = "voyage-3.5"
