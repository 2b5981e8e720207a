"""The semantic half of search_history: the query's embedding against the stored ones
(docs/operations.rst, "Semantic recall").

The query is embedded by the deployment's one embedding model (`embedder()`), and the
nearest stored embeddings of that model alone (an old model's, left from before a
change, are never compared) in the searched conversations come back, nearest first,
through the HNSW index of its dimension count. Off, with the reason the search result
states, when no model is configured, when the database has no pgvector, or when the
query's embedding failed; the first two are logged once per process.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from assistant.models import EmbeddingUsage
from assistant.providers import EmbeddingError, embedder
from assistant.recall.vectors import Neighbour, nearest, vectors_available

logger = logging.getLogger("assistant.recall")

NOT_CONFIGURED = "no embedding model is configured"
NO_PGVECTOR = "this database has no pgvector"
FAILED = "the embedding model did not answer"


@dataclass(frozen=True)
class SemanticMatches:
    neighbours: list[Neighbour]
    # Why nothing was looked for (the search result says so); None when searched.
    off_because: str | None = None


@functools.cache
def _said_off(reason: str) -> None:
    logger.info("search_history is full-text search only: %s (docs/operations.rst)", reason)


def semantic_matches(
    conversation_ids: Sequence[int], query: str, limit: int, *, paid_by: int | None
) -> SemanticMatches:
    """The `limit` stored embeddings nearest to `query` in these conversations. The
    query's embedding is counted as the embedding job's requests are, for the
    conversation `paid_by` (`EmbeddingUsage`: its cost and the day's tokens; the
    cap itself stops only the job, a query is a few tokens the model waits on); None
    for a deleted conversation, which is read and never changed."""
    model = embedder()
    if model is None:
        _said_off(NOT_CONFIGURED)
        return SemanticMatches([], NOT_CONFIGURED)
    if not vectors_available():
        _said_off(NO_PGVECTOR)
        return SemanticMatches([], NO_PGVECTOR)
    try:
        result = model.embed([query], kind="query")
    except EmbeddingError as error:
        logger.warning("search_history's query embedding failed (%s): full-text only", error)
        return SemanticMatches([], FAILED)
    if paid_by is not None:
        EmbeddingUsage.objects.create(
            conversation_id=paid_by, model=model.model, input_tokens=result.input_tokens, texts=1
        )
    # Stored under the configured model's name, as the worker stores them.
    return SemanticMatches(nearest(conversation_ids, model.model, result.vectors[0], limit=limit))
