"""The worker side of semantic recall (docs/operations.rst, "Semantic recall"): what is
embedded, when, by whom, at what cost.

Embedded, by the deployment's model (`assistant.providers.embedder()`): each window
summary version (`SummaryVersion`), each session's summary (the one the next session
carries, once the model's has landed) and each compacted original (`Message.content`
of a compacted message whose original the retention policy has not dropped), of
conversations not deleted. A text over the model's input limit is embedded in chunks
(0, 1, ...) cut on line, else word, boundaries.

`embed_pending` is one run, on the worker only (`assistant.tasks.embed_texts_task`,
enqueued after an exchange that compacted something and by beat): it takes the texts
with no vectors of the current model (newest first, at most RUN_TEXTS), embeds them in
requests of `max_batch` texts, and stores each text's vectors with the tokens its
request took (`EmbeddingUsage`, in the same transaction), so a redelivered run finds
them stored and embeds nothing twice. One run at a time across the deployment (a
PostgreSQL session advisory lock, never a transaction held open across a provider
call; a dead worker's session releases it). A run that would pass the day's cap
(ASSISTANT_EMBEDDING_DAILY_TOKENS, UTC) stops and leaves the rest for the next day.
Then the vectors of other models whose text has the current model's are deleted, in
batches (a change of model re-embeds in the background).
"""

from __future__ import annotations

import logging
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, time
from itertools import groupby
from operator import attrgetter
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Sum
from django.utils import timezone

from assistant.history import first_in, in_flight, losses
from assistant.models import Conversation, Embedding, EmbeddingUsage, Message, SummaryVersion
from assistant.providers import Embedder, EmbeddingError, embedder
from assistant.recall.vectors import ensure_index, store_embedding, vectors_available
from assistant.settings.app import app_setting
from assistant.settings.conf import compaction_config
from assistant.text import estimate_tokens

logger = logging.getLogger(__name__)

Source = Embedding.Source

#: The most texts one run takes; the task enqueues the next run while more remain.
RUN_TEXTS = 500
#: Vectors of replaced models deleted per statement, and statements per run.
DELETE_BATCH = 1_000
DELETE_BATCHES = 5
#: The advisory lock one run holds (any fixed 64-bit key the app alone uses).
LOCK_KEY = zlib.crc32(b"assistant.recall.embedding_jobs") + (53 << 32)
_DAY_SECONDS = 86_400
_LINE_BREAK = re.compile(r"(?<=\n)")
_WORD = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True)
class Text:
    """One text to embed: where it is stored, and the conversation it belongs to."""

    source: str
    source_id: int
    conversation_id: int
    text: str


@dataclass
class EmbeddingRun:
    """What one run did."""

    embedded: int = 0  # texts stored
    requests: int = 0
    tokens: int = 0
    removed: int = 0  # vectors of replaced models deleted
    remains: bool = False  # more to do now: the task enqueues another run
    capped: bool = False  # stopped at the day's cap
    failed: int = 0  # requests refused for good (logged)
    dropped: int = 0  # texts left out: processes died embedding them (logged)
    skipped: str = ""  # why nothing ran: "off", "no_pgvector", "busy"
    model: str = ""
    provider: str = ""


def embed_pending(limit: int = RUN_TEXTS) -> EmbeddingRun:
    """One run of the job (the module docstring). A rate-limited or unreachable provider
    raises its EmbeddingError (retryable: the task tries again later); a request the
    provider refuses for good is logged and the run goes on."""
    model = embedder()
    if model is None:
        return _skipped("off", "no embedding model is configured (ASSISTANT_EMBEDDINGS)")
    if not vectors_available():
        return _skipped("no_pgvector", "the database has no pgvector (see migration 0017)")
    with _one_run() as mine:
        if not mine:
            return EmbeddingRun(skipped="busy", model=model.model, provider=model.provider)
        run = EmbeddingRun(model=model.model, provider=model.provider)
        ensure_index(model.dimensions)
        texts: list[Text] = []
        if tokens_today() < _daily_cap():
            texts = pending_texts(model.model, model.dimensions, limit)
            _embed(model, texts, run)
        else:
            run.capped = True
            _note_cap(tokens_today(), _daily_cap())
        # Texts refused for good (or left out) wait for beat's next run, not an immediate one.
        run.remains = len(texts) == limit and not run.capped and not run.failed and run.embedded > 0
        run.removed = remove_replaced(model.model, model.dimensions)
        run.remains = run.remains or run.removed == DELETE_BATCH * DELETE_BATCHES
        return run


def _skipped(reason: str, why: str) -> EmbeddingRun:
    if first_in(f"embeddings_{reason}", _DAY_SECONDS):
        logger.info("embeddings_skipped reason=%s: %s; semantic search is off", reason, why)
    return EmbeddingRun(skipped=reason)


@contextmanager
def _one_run() -> Iterator[bool]:
    """Whether this process holds the job's lock (held for the run, on this session)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        row = cursor.fetchone()
    mine = bool(row and row[0])
    try:
        yield mine
    finally:
        if mine:
            # A session that broke meanwhile took its lock along.
            with suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])


def _embedded(source: str, model: str, dimensions: int) -> Exists:
    """The text (its chunk 0) has vectors of this model: the unique constraint's index."""
    return Exists(
        Embedding.objects.filter(
            source=source, source_id=OuterRef("pk"), chunk=0, model=model, dimensions=dimensions
        )
    )


def pending_sources(model: str, dimensions: int) -> list[tuple[str, QuerySet[Any, Any]]]:
    """Each source's texts with no vectors of `model` (with `dimensions`), newest first,
    as (id, conversation id, text) rows: window summary versions (the primary key),
    session summaries (assistant_conv_session_summary) and compacted originals
    (assistant_msg_compacted), each candidate checked against the embeddings' unique
    constraint's index."""
    summaries = (
        SummaryVersion.objects.filter(conversation__deleted_at__isnull=True)
        .exclude(text="")
        .filter(~_embedded(Source.SUMMARY, model, dimensions))
        .order_by("-id")
        .values_list("id", "conversation_id", "text")
    )
    # The summary a session's next session carries, stored under the session it
    # summarizes; the offline one, still to be replaced by the model's
    # (summary_deferred), waits.
    sessions = (
        Conversation.objects.filter(
            parent_link=Conversation.Link.SESSION,
            parent_conversation_summary__isnull=False,
            summary_deferred=False,
            deleted_at__isnull=True,
            parent_conversation__deleted_at__isnull=True,
        )
        .exclude(parent_conversation_summary="")
        .filter(~_embedded(Source.SESSION, model, dimensions))
        .order_by("-id")
        .values_list("id", "parent_conversation_id", "parent_conversation_summary")
    )
    originals = (
        Message.objects.filter(
            compacted_content__isnull=False,
            original_dropped_at__isnull=True,
            conversation__deleted_at__isnull=True,
        )
        .exclude(content="")
        .filter(~_embedded(Source.ORIGINAL, model, dimensions))
        .order_by("-compacted_at")
        .values_list("id", "conversation_id", "content")
    )
    return [(Source.SUMMARY, summaries), (Source.SESSION, sessions), (Source.ORIGINAL, originals)]


def pending_texts(model: str, dimensions: int, limit: int = RUN_TEXTS) -> list[Text]:
    """At most `limit` texts with no vectors of `model`: the summaries first, then the
    session summaries, then the originals (`pending_sources`)."""
    texts: list[Text] = []
    for source, rows in pending_sources(model, dimensions):
        if len(texts) >= limit:
            break
        texts += [Text(source, pk, owner, text) for pk, owner, text in rows[: limit - len(texts)]]
    return texts


def chunks(text: str, max_tokens: int) -> list[str]:
    """`text` in pieces of at most `max_tokens` by estimate_tokens, cut after a line
    where one fits, else after a word, else (a longer word) inside it; whitespace-only
    pieces are left out. A text that fits is one piece."""
    if estimate_tokens(text) <= max_tokens:
        return [text]
    # estimate_tokens counts characters: a piece of `most` characters estimates to max_tokens.
    most = max(1, max_tokens * compaction_config().CHARS_PER_TOKEN)
    found: list[str] = []
    current = ""
    for piece in _pieces(text, most):
        if current and len(current) + len(piece) > most:
            found.append(current)
            current = ""
        current += piece
    found.append(current)
    return [piece for piece in found if piece.strip()]


def _pieces(text: str, most: int) -> Iterator[str]:
    for line in _LINE_BREAK.split(text):
        if len(line) <= most:
            yield line
            continue
        for word in _WORD.findall(line):
            while len(word) > most:
                yield word[:most]
                word = word[most:]
            if word:
                yield word


@dataclass(frozen=True)
class _Item:
    text: int  # its index in the run's texts
    chunk: int
    piece: str
    estimate: int


def _embed(model: Embedder, texts: list[Text], run: EmbeddingRun) -> None:
    """Embed `texts` in requests of `max_batch` pieces, storing each text once all its
    chunks are embedded, with each request's tokens, in one transaction per request.
    A text whose request a process died in (`losses`) goes in requests of its own, so it
    takes no other text down with it; past ASSISTANT_MAX_TASK_DELIVERIES it is left out."""
    cap = _daily_cap()
    used = tokens_today()
    lost = losses([_work(text) for text in texts])
    tried = [index for index, text in enumerate(texts) if not _dropped(text, lost[index], run)]
    items = [
        _Item(index, number, piece, estimate_tokens(piece))
        for index in tried
        for number, piece in enumerate(chunks(texts[index].text, model.max_input_tokens))
    ]
    wanted = Counter(item.text for item in items)
    vectors: dict[int, dict[int, list[float]]] = {}
    failed: set[int] = set()
    for batch in _batches(items, lost, max(1, model.max_batch)):
        if used + sum(item.estimate for item in batch) > cap:
            run.capped = True
            _note_cap(used, cap)
            return
        with in_flight(sorted({_work(texts[item.text]) for item in batch})):
            found = _request(model, batch, run)
        if found is None:
            failed.update(item.text for item in batch)
            continue
        answered, tokens = found
        used += tokens
        for item, vector in zip(batch, answered, strict=True):
            vectors.setdefault(item.text, {})[item.chunk] = vector
        complete = sorted(
            {item.text for item in batch}
            - failed
            - {index for index in vectors if len(vectors[index]) < wanted[index]}
        )
        with transaction.atomic():
            for index in complete:
                text = texts[index]
                for chunk, vector in sorted(vectors.pop(index).items()):
                    store_embedding(
                        Conversation(pk=text.conversation_id),
                        text.source,
                        text.source_id,
                        model.model,
                        vector,
                        chunk=chunk,
                    )
            EmbeddingUsage.objects.bulk_create(
                EmbeddingUsage(
                    conversation_id=owner, model=model.model, input_tokens=share, texts=n
                )
                for owner, (share, n) in _usage(texts, batch, tokens).items()
            )
        run.embedded += len(complete)


def _work(text: Text) -> str:
    """The text as a piece of work (assistant.history.deliveries)."""
    return f"embed:{text.source}:{text.source_id}"


def _dropped(text: Text, lost: int, run: EmbeddingRun) -> bool:
    """Whether `text` has killed the worker too often to be tried again (logged once a day)."""
    if lost < app_setting("ASSISTANT_MAX_TASK_DELIVERIES"):
        return False
    run.dropped += 1
    if first_in(f"embedding_dropped:{_work(text)}", _DAY_SECONDS):
        logger.warning(
            "embedding_dropped source=%s id=%s conversation_id=%s deliveries=%s: "
            "a worker died embedding it each time; it is left out",
            text.source,
            text.source_id,
            text.conversation_id,
            lost,
        )
    return True


def _batches(items: list[_Item], lost: list[int], size: int) -> Iterator[list[_Item]]:
    """The requests: the texts no process died with in batches of `size` pieces, then
    each of the others alone (a text's pieces are consecutive in `items`)."""
    sound = [item for item in items if not lost[item.text]]
    suspects = groupby((item for item in items if lost[item.text]), key=attrgetter("text"))
    for group in [sound, *(list(pieces) for _, pieces in suspects)]:
        for start in range(0, len(group), size):
            yield group[start : start + size]


def _request(
    model: Embedder, batch: list[_Item], run: EmbeddingRun
) -> tuple[list[list[float]], int] | None:
    """One request's vectors and tokens; None (logged) when the provider refused it for
    good or answered something else than one vector of the model's size per text."""
    try:
        result = model.embed([item.piece for item in batch], kind="document")
    except EmbeddingError as exc:
        if exc.retryable:
            raise
        run.failed += 1
        logger.warning(
            "embedding_failed provider=%s model=%s status=%s texts=%s error=%s",
            model.provider,
            model.model,
            exc.status,
            len(batch),
            type(exc).__name__,
        )
        return None
    run.requests += 1
    run.tokens += result.input_tokens
    if len(result.vectors) != len(batch) or any(
        len(vector) != model.dimensions for vector in result.vectors
    ):
        run.failed += 1
        logger.warning(
            "embedding_failed provider=%s model=%s texts=%s vectors=%s dimensions=%s "
            "reason=unexpected_vectors",
            model.provider,
            model.model,
            len(batch),
            len(result.vectors),
            model.dimensions,
        )
        return None
    return result.vectors, result.input_tokens


def _usage(texts: list[Text], batch: list[_Item], tokens: int) -> dict[int, tuple[int, int]]:
    """A request's tokens by conversation, shared by the pieces' estimates (exact in
    sum: the remainder goes to the largest fractions), with each one's piece count."""
    weights = [max(1, item.estimate) for item in batch]
    whole = sum(weights)
    shares = [tokens * weight // whole for weight in weights]
    by_fraction = sorted(
        range(len(batch)), key=lambda k: (tokens * weights[k]) % whole, reverse=True
    )
    for k in by_fraction[: tokens - sum(shares)]:
        shares[k] += 1
    found: dict[int, tuple[int, int]] = {}
    for item, share in zip(batch, shares, strict=True):
        owner = texts[item.text].conversation_id
        total, pieces = found.get(owner, (0, 0))
        found[owner] = (total + share, pieces + 1)
    return found


def _daily_cap() -> int:
    return int(app_setting("ASSISTANT_EMBEDDING_DAILY_TOKENS"))


def day_start(now: datetime | None = None) -> datetime:
    """Midnight UTC of `now`'s day (the cap's day)."""
    day = (now or timezone.now()).astimezone(UTC).date()
    return datetime.combine(day, time.min, tzinfo=UTC)


def tokens_today(now: datetime | None = None) -> int:
    """The tokens embedded since midnight UTC across the deployment (assistant_embusage_day)."""
    rows = EmbeddingUsage.objects.filter(created_at__gte=day_start(now))
    return int(rows.aggregate(total=Sum("input_tokens"))["total"] or 0)


def _note_cap(used: int, cap: int) -> None:
    day = day_start().date().isoformat()
    if first_in(f"embeddings_capped:{day}", _DAY_SECONDS):
        logger.warning(
            "embeddings_capped day=%s tokens=%s cap=%s: the rest is embedded from "
            "midnight UTC (ASSISTANT_EMBEDDING_DAILY_TOKENS)",
            day,
            used,
            cap,
        )


def remove_replaced(model: str, dimensions: int) -> int:
    """Delete the vectors of other models of the texts that have `model`'s, in batches of
    DELETE_BATCH, at most DELETE_BATCHES a run (assistant_embedding_model's two ranges,
    each checked against the unique constraint's index). How many went."""
    current = Embedding.objects.filter(
        source=OuterRef("source"),
        source_id=OuterRef("source_id"),
        chunk=0,
        model=model,
        dimensions=dimensions,
    )
    replaced = Embedding.objects.filter(Q(model__lt=model) | Q(model__gt=model)).filter(
        Exists(current)
    )
    removed = 0
    for _ in range(DELETE_BATCHES):
        ids = list(replaced.values_list("id", flat=True)[:DELETE_BATCH])
        if ids:
            removed += Embedding.objects.filter(pk__in=ids).delete()[0]
        if len(ids) < DELETE_BATCH:
            break
    return removed
