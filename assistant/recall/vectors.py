"""The embeddings semantic recall searches (issue 53, docs/operations.rst "Semantic recall").

PostgreSQL with the pgvector extension only: migration 0017_vectors adds the
`Embedding.vector` column where the extension exists, and `vectors_available` says
whether it does; everything here is off (and never queried) where it does not, the
SQLite demo included. The column is untyped (one embedding model per deployment, its
dimensions chosen in settings), so each dimension count gets its own partial HNSW
index over the column cast to that count (`ensure_index`), which the nearest-neighbour
query's ORDER BY and WHERE match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connections, transaction

from assistant.models import Conversation, Embedding

# pgvector's HNSW index takes vectors of up to 2,000 dimensions.
MAX_INDEXED_DIMENSIONS = 2_000


def vectors_available(using: str = "default") -> bool:
    """True when this database has the pgvector extension and the embeddings' vector column."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_extension WHERE extname = 'vector' AND EXISTS ("
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('assistant_embedding') "
            "AND attname = 'vector' AND NOT attisdropped)"
        )
        return cursor.fetchone() is not None


def index_name(dimensions: int) -> str:
    return f"assistant_embedding_hnsw_{dimensions}"


def _dimensions(dimensions: int) -> int:
    if not isinstance(dimensions, int) or not 0 < dimensions <= MAX_INDEXED_DIMENSIONS:
        raise ValueError(f"dimensions must be an integer from 1 to {MAX_INDEXED_DIMENSIONS}")
    return dimensions


def ensure_index(dimensions: int, using: str = "default") -> None:
    """The HNSW index (cosine distance) of the embeddings with `dimensions` dimensions,
    built when missing; idempotent. Looked up first: CREATE INDEX IF NOT EXISTS would
    take the table's lock even when the index is there."""
    count = _dimensions(dimensions)
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [index_name(count)])
        row = cursor.fetchone()
        if row is not None and row[0] is not None:
            return
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {index_name(count)} ON assistant_embedding "
            f"USING hnsw ((vector::vector({count})) vector_cosine_ops) WHERE dimensions = {count}"
        )


def store_embedding(
    conversation: Conversation,
    source: str,
    source_id: int,
    model: str,
    vector: Sequence[float],
    chunk: int = 0,
) -> Embedding:
    """Store (or replace) one text's embedding by `model`."""
    embedding, _ = Embedding.objects.update_or_create(
        source=source,
        source_id=source_id,
        chunk=chunk,
        model=model,
        defaults={
            "conversation": conversation,
            "dimensions": _dimensions(len(vector)),
            "vector": list(vector),
        },
    )
    return embedding


@dataclass(frozen=True)
class Neighbour:
    source: str
    source_id: int
    chunk: int
    distance: float


def nearest(
    conversation_ids: Sequence[int],
    model: str,
    query: Sequence[float],
    limit: int = 20,
    using: str = "default",
) -> list[Neighbour]:
    """The `limit` embeddings of `model` in these conversations nearest to `query`
    (cosine distance, nearest first), read through `ensure_index`'s index.

    The index holds every conversation's embeddings, and an HNSW scan hands back its
    nearest `hnsw.ef_search` (40) before the conversation filter applies: a
    conversation among many would often get none. pgvector's iterative scan (0.8.0
    on) goes on reading the index until `limit` rows pass the filter (at most
    `hnsw.max_scan_tuples`, 20,000); its order is relaxed, so the rows are sorted
    again by their distance."""
    count = _dimensions(len(query))
    literal = "[" + ",".join(repr(float(value)) for value in query) + "]"
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        distance = f"(vector::vector({count})) <=> %s::vector({count})"
        cursor.execute(
            f"SELECT source, source_id, chunk, {distance} FROM assistant_embedding "
            f"WHERE dimensions = {count} AND model = %s AND conversation_id = ANY(%s) "
            f"ORDER BY {distance} LIMIT %s",
            [literal, model, list(conversation_ids), literal, limit],
        )
        rows = [Neighbour(row[0], row[1], row[2], float(row[3])) for row in cursor.fetchall()]
    return sorted(rows, key=lambda neighbour: neighbour.distance)
