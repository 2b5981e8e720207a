"""The worker side of semantic recall (issue 53, docs/operations.rst "Semantic recall"):
what is embedded, in chunks and in batches, the day's cap, a change of model, a task
delivered twice, the cost, and the job with no model or no pgvector. Real PostgreSQL with
pgvector, the fake server's OpenAI embeddings through the real SDK, a real Celery worker
where the task runs."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from django.db import connection
from django.db.models import F, Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assistant.cleanup import drop_compacted_originals
from assistant.cost import conversation_cost, list_figures, store_costs
from assistant.history import add_message, record_compaction
from assistant.models import (
    CompactionEvent,
    Conversation,
    Embedding,
    EmbeddingUsage,
    Message,
    SummaryVersion,
)
from assistant.post_exchange import finish_exchange
from assistant.providers import embedder, price_of
from assistant.recall import (
    chunks,
    embed_pending,
    embedding_jobs,
    ensure_index,
    pending_sources,
    remove_replaced,
    tokens_today,
)
from assistant.settings.cleanup import beat_schedule
from assistant.settings.conf import compaction_config
from assistant.tasks import embed_texts_task
from assistant.text import estimate_tokens
from tests.conftest import wait_until
from tests.fake_llm import FakeProvider, ok, rate_limited, raw, slow
from tests.test_faults import children, worker_process
from tests.test_vectors import needs_pgvector

pytestmark = needs_pgvector

EMBEDDINGS = "openai.embeddings"
DIMENSIONS = 64
JOB_LOGGER = "assistant.recall.embedding_jobs"
KEY = "test-key-openai"


@pytest.fixture
def fake(fake_llm: FakeProvider, settings, redis_client: redis.Redis) -> Iterator[FakeProvider]:
    """The deployment's embeddings from the fake (OpenAI's default model, 64 dimensions),
    and no line logged "once a day" nor text marked in flight yet."""
    fake_llm.use_embeddings(settings, "openai")
    settings.ASSISTANT_EMBEDDING_DIMENSIONS = DIMENSIONS
    settings.LLM_MAX_RETRIES = 0
    settings.ASSISTANT_PROVIDER_RETRY_SECONDS = 0.01
    forget_once(redis_client)
    # Built by the first run where a deployment starts; here before the test's rows,
    # which its transaction holds (CREATE INDEX refuses to run after them).
    ensure_index(DIMENSIONS)
    yield fake_llm
    forget_once(redis_client)


def forget_once(client: redis.Redis) -> None:
    """Forget the lines logged once a day and the texts marked in flight (a test
    database starts its ids again where an earlier run's marks may still be)."""
    keys = [*client.scan_iter("assistant:once:*"), *client.scan_iter("assistant:in_flight:*")]
    if keys:
        client.delete(*keys)


def compacted(conversation: Conversation, text: str, role: str = "user") -> Message:
    """A message whose original is compacted (what the model sees is a stub)."""
    message = add_message(conversation, role, text)
    Message.objects.filter(pk=message.pk).update(
        compacted_content=f"[compacted: ref m{message.pk}]",
        compaction=Message.Compaction.TRUNCATED,
        compacted_at=timezone.now(),
    )
    return message


def stored() -> set[tuple[str, int, int, int]]:
    return set(Embedding.objects.values_list("source", "source_id", "conversation_id", "chunk"))


def sent_texts(fake: FakeProvider) -> list[str]:
    return [text for request in fake.requests_for(EMBEDDINGS) for text in request.body["input"]]


def job_lines(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    lines = [record.getMessage() for record in caplog.records if record.name == JOB_LOGGER]
    return [line for line in lines if word in line]


@pytest.mark.django_db
def test_the_job_embeds_the_summaries_the_session_summaries_and_the_compacted_originals(fake):
    conversation = Conversation.objects.create(title="Refunds")
    original = compacted(conversation, "The chargeback policy: refunds within 30 days.")
    add_message(conversation, "assistant", "Not compacted: the context still shows it.")
    dropped = compacted(conversation, "Dropped by the retention policy.")
    Message.objects.filter(pk=dropped.pk).update(content="", original_dropped_at=timezone.now())
    version = SummaryVersion.objects.create(
        conversation=conversation, text="## Goal\n- Settle the refund rules."
    )
    session = Conversation.objects.create(
        parent_conversation=conversation,
        parent_link=Conversation.Link.SESSION,
        parent_conversation_summary="The first session settled the refund rules.",
    )
    # The offline summary, which the model's replaces: embedded once that one lands.
    Conversation.objects.create(
        parent_conversation=session,
        parent_link=Conversation.Link.SESSION,
        parent_conversation_summary="offline summary",
        summary_deferred=True,
    )
    gone = Conversation.objects.create(title="Deleted")
    compacted(gone, "A deleted conversation's original.")
    SummaryVersion.objects.create(conversation=gone, text="A deleted conversation's summary.")
    Conversation.objects.filter(pk=gone.pk).update(deleted_at=timezone.now())

    run = embed_pending()

    assert stored() == {
        ("summary", version.pk, conversation.pk, 0),
        ("session", session.pk, conversation.pk, 0),
        ("original", original.pk, conversation.pk, 0),
    }
    model = embedder()
    assert model is not None
    assert set(Embedding.objects.values_list("model", "dimensions")) == {(model.model, DIMENSIONS)}
    # One request for the three texts, each sent as stored.
    assert fake.count(EMBEDDINGS) == 1
    assert sorted(sent_texts(fake)) == sorted(
        [
            "## Goal\n- Settle the refund rules.",
            "The first session settled the refund rules.",
            "The chargeback policy: refunds within 30 days.",
        ]
    )
    assert (run.embedded, run.requests, run.remains) == (3, 1, False)
    # The request's tokens, as the provider reported them, are the conversation's.
    reported = fake.requests_for(EMBEDDINGS)[0].usage["prompt_tokens"]
    assert reported > 0
    assert list(EmbeddingUsage.objects.values_list("conversation_id", "input_tokens")) == [
        (conversation.pk, reported)
    ]
    assert embed_pending().embedded == 0  # nothing is embedded twice
    assert fake.count(EMBEDDINGS) == 1


@pytest.mark.django_db
def test_texts_of_several_conversations_share_a_request_and_its_tokens(fake):
    first, second = Conversation.objects.create(), Conversation.objects.create()
    for index in range(3):
        compacted(first, f"First conversation, original {index}: the deployment notes.")
        compacted(second, f"Second conversation, original {index}: a much longer text " * 4)

    run = embed_pending()

    assert (run.embedded, fake.count(EMBEDDINGS)) == (6, 1)
    usage = dict(EmbeddingUsage.objects.values_list("conversation_id", "input_tokens"))
    reported = fake.requests_for(EMBEDDINGS)[0].usage["prompt_tokens"]
    assert sum(usage.values()) == reported == run.tokens
    assert usage[second.pk] > usage[first.pk] > 0  # shared by the texts' sizes


@pytest.mark.django_db
def test_each_source_of_pending_texts_is_read_through_indexes():
    """The plans with sequential scans priced out: no table is scanned, the sessions'
    and the originals' candidates come from their partial indexes (whose conditions
    the queries repeat), and the embeddings are probed by index."""
    partial = {"session": "assistant_conv_session_summary", "original": "assistant_msg_compacted"}
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    for source, rows in pending_sources("text-embedding-3-small", DIMENSIONS):
        plan = rows[:500].explain()
        assert "Seq Scan" not in plan, plan
        assert partial.get(source, "") in plan, plan
        assert "on assistant_embedding" in plan, plan
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + replaced_query_sql())
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan" not in plan, plan
    assert "assistant_embedding_model" in plan, plan


def replaced_query_sql() -> str:
    """The statement `remove_replaced` selects a batch with (its first, as it runs)."""
    with CaptureQueriesContext(connection) as queries:
        remove_replaced("text-embedding-3-small", DIMENSIONS)
    return next(q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT"))


@pytest.mark.django_db
def test_a_run_takes_a_bounded_number_of_texts_and_says_more_remain(fake):
    conversation = Conversation.objects.create()
    for index in range(5):
        compacted(conversation, f"Original number {index} about the release.")

    first = embed_pending(limit=3)
    assert (first.embedded, first.remains) == (3, True)
    second = embed_pending(limit=3)
    assert (second.embedded, second.remains) == (2, False)
    assert Embedding.objects.count() == 5


def test_a_text_is_cut_at_line_ends_then_at_words_then_inside_a_word():
    per_token = compaction_config().CHARS_PER_TOKEN
    lines = "".join(f"line {index} of the log\n" for index in range(40))
    pieces = chunks(lines, 20)
    assert len(pieces) > 1
    assert "".join(pieces) == lines
    assert all(piece.endswith("\n") and estimate_tokens(piece) <= 20 for piece in pieces)

    word = "x" * (per_token * 25)
    pieces = chunks(f"a few words then {word} and more", 10)
    assert "".join(pieces) == f"a few words then {word} and more"
    assert all(estimate_tokens(piece) <= 10 for piece in pieces)
    assert chunks("short", 10) == ["short"]


@pytest.mark.django_db
def test_a_long_original_is_embedded_in_chunks_stored_under_one_text(fake):
    model = embedder()
    assert model is not None
    per_token = compaction_config().CHARS_PER_TOKEN
    line = "The chargeback window is thirty days for every refund request.\n"
    text = line * (2 * model.max_input_tokens * per_token // len(line) + 1)
    conversation = Conversation.objects.create()
    message = compacted(conversation, text)

    embed_pending()

    chunk_rows = Embedding.objects.filter(source="original", source_id=message.pk)
    assert sorted(chunk_rows.values_list("chunk", flat=True)) == [0, 1, 2]
    pieces = sent_texts(fake)
    assert "".join(pieces) == text
    assert all(piece.endswith("\n") for piece in pieces)
    assert all(estimate_tokens(piece) <= model.max_input_tokens for piece in pieces)


@pytest.mark.django_db
def test_the_day_cap_stops_the_job_which_resumes_the_next_day(fake, settings, caplog):
    conversation = Conversation.objects.create()
    compacted(conversation, "Refund rules: thirty days for every order and every customer. " * 8)
    embed_pending()
    spent = tokens_today()
    assert spent == EmbeddingUsage.objects.aggregate(total=Sum("input_tokens"))["total"] > 0
    # One token left today: the next text does not fit.
    settings.ASSISTANT_EMBEDDING_DAILY_TOKENS = spent + 1
    later = compacted(conversation, "The database is PostgreSQL 15 with pgvector.")

    with caplog.at_level(logging.INFO, logger=JOB_LOGGER):
        runs = [embed_pending(), embed_pending()]
        settings.ASSISTANT_EMBEDDING_DAILY_TOKENS = spent  # spent to the token
        runs.append(embed_pending())

    assert [run.capped for run in runs] == [True, True, True]
    assert not any(run.remains for run in runs)  # the task does not run again today
    assert not Embedding.objects.filter(source_id=later.pk).exists()
    assert fake.count(EMBEDDINGS) == 1
    lines = job_lines(caplog, "embeddings_capped")
    assert len(lines) == 1  # once a day
    assert f"tokens={spent}" in lines[0]
    assert "ASSISTANT_EMBEDDING_DAILY_TOKENS" in lines[0]

    # Midnight UTC passes: yesterday's tokens no longer count.
    EmbeddingUsage.objects.update(created_at=F("created_at") - timedelta(days=1))
    assert tokens_today() == 0
    run = embed_pending()
    assert not run.capped
    assert Embedding.objects.filter(source_id=later.pk).exists()


@pytest.mark.django_db
def test_a_new_model_re_embeds_every_text_and_then_its_old_vectors_go(fake, settings):
    conversation = Conversation.objects.create()
    original = compacted(conversation, "The refund rules.")
    version = SummaryVersion.objects.create(conversation=conversation, text="## Goal\n- Refunds.")
    embed_pending()
    old = embedder()
    assert old is not None
    usage_before = EmbeddingUsage.objects.count()

    settings.ASSISTANT_EMBEDDING_MODEL = "text-embedding-3-large"
    new = embedder()
    assert new is not None and new.model != old.model
    # One text at a time: the other keeps its old vectors until it has the new ones.
    first = embed_pending(limit=1)
    assert (first.embedded, first.removed, first.remains) == (1, 1, True)
    by_model = set(Embedding.objects.values_list("source_id", "model"))
    assert by_model == {(version.pk, new.model), (original.pk, old.model)}
    second = embed_pending(limit=1)
    assert (second.embedded, second.removed) == (1, 1)
    assert set(Embedding.objects.values_list("source_id", "model")) == {
        (version.pk, new.model),
        (original.pk, new.model),
    }
    # The old model's tokens were paid for: they stay in the usage.
    assert EmbeddingUsage.objects.count() == usage_before + 2
    assert set(EmbeddingUsage.objects.values_list("model", flat=True)) == {old.model, new.model}


@pytest.mark.django_db
def test_the_embeddings_enter_the_conversations_cost_at_the_models_price(fake):
    conversation = Conversation.objects.create()
    add_message(
        conversation,
        "assistant",
        "Answered.",
        provider="openai",
        model="gpt-4.1",
        input_tokens=1_000,
        output_tokens=50,
    )
    compacted(conversation, "The refund rules: thirty days.")
    store_costs([conversation.pk])  # the list's figure, before the embeddings
    before = conversation_cost(conversation)[0]

    embed_pending()

    model = embedder()
    assert model is not None
    price = price_of(model.model)
    assert price is not None and price.input > 0
    tokens = EmbeddingUsage.objects.get(conversation=conversation).input_tokens
    cost = conversation_cost(conversation)[0]
    assert cost.embedding_tokens == tokens
    assert cost.embedding == pytest.approx(tokens * price.input / 1_000_000)
    assert cost.total == pytest.approx(before.total + cost.embedding)
    assert cost.everything == pytest.approx(before.everything)  # no "sending everything"
    # The list reads the same figure (stored once its cover names the new usage).
    assert list_figures([conversation.pk])[conversation.pk].cost == cost

    compacted(conversation, "The database: PostgreSQL.")
    embed_pending()
    cost = conversation_cost(conversation)[0]
    assert cost.embedding_tokens == sum(
        EmbeddingUsage.objects.filter(conversation=conversation).values_list(
            "input_tokens", flat=True
        )
    )
    assert list_figures([conversation.pk])[conversation.pk].cost == cost


@pytest.mark.django_db
def test_with_no_embedding_model_the_job_does_nothing_and_says_so_once(fake, settings, caplog):
    settings.ASSISTANT_EMBEDDINGS = "off"
    compacted(Conversation.objects.create(), "The refund rules.")

    with caplog.at_level(logging.INFO, logger=JOB_LOGGER):
        runs = [embed_pending(), embed_pending()]

    assert [run.skipped for run in runs] == ["off", "off"]
    assert not Embedding.objects.exists() and not EmbeddingUsage.objects.exists()
    assert len(job_lines(caplog, "embeddings_skipped reason=off")) == 1


@pytest.mark.django_db
def test_without_pgvector_the_job_does_nothing_and_says_so_once(fake, monkeypatch, caplog):
    monkeypatch.setattr(embedding_jobs, "vectors_available", lambda: False)
    compacted(Conversation.objects.create(), "The refund rules.")

    with caplog.at_level(logging.INFO, logger=JOB_LOGGER):
        runs = [embed_pending(), embed_pending()]

    assert [run.skipped for run in runs] == ["no_pgvector", "no_pgvector"]
    assert fake.count(EMBEDDINGS) == 0
    assert not Embedding.objects.exists()
    assert len(job_lines(caplog, "embeddings_skipped reason=no_pgvector")) == 1


@pytest.mark.django_db
def test_a_request_refused_for_good_is_logged_without_the_key_and_the_run_ends(fake, caplog):
    conversation = Conversation.objects.create()
    compacted(conversation, "The refund rules.")
    fake.script(EMBEDDINGS, raw(400, {"error": {"message": "bad input", "type": "invalid"}}))

    with caplog.at_level(logging.INFO, logger=JOB_LOGGER):
        run = embed_pending()

    assert (run.failed, run.embedded, run.remains) == (1, 0, False)
    lines = job_lines(caplog, "embedding_failed")
    assert len(lines) == 1 and "status=400" in lines[0]
    assert KEY not in caplog.text
    assert not Embedding.objects.exists()
    # The next run (the provider answering again) embeds it.
    assert embed_pending().embedded == 1


@pytest.mark.django_db
def test_an_original_the_retention_drops_loses_its_vectors(fake, settings):
    settings.ASSISTANT_CLEANUP = {"DROP_ORIGINALS_RETENTION_DAYS": 7}
    conversation = Conversation.objects.create()
    old = compacted(conversation, "An old original.")
    young = compacted(conversation, "A young original.")
    embed_pending()
    Message.objects.filter(pk=old.pk).update(compacted_at=timezone.now() - timedelta(days=8))

    assert drop_compacted_originals().count == 1

    assert stored() == {("original", young.pk, conversation.pk, 0)}
    assert embed_pending().embedded == 0  # nor embedded again


def test_beat_runs_the_job_for_catch_up_and_re_embedding():
    schedule = beat_schedule({})
    entry = schedule["assistant-embed-texts"]
    assert entry["task"] == embed_texts_task.name
    assert entry["schedule"] == 300.0
    assert "assistant-embed-texts" not in beat_schedule({"EMBEDDING_PERIOD_SECONDS": None})


def drained(client: redis.Redis) -> bool:
    return client.llen("celery") == 0 and not client.hlen("unacked")


def test_a_task_delivered_twice_stores_each_text_once(celery_worker, fake, redis_client):
    conversation = Conversation.objects.create()
    for index in range(3):
        compacted(conversation, f"Original {index}: the refund rules.")

    embed_texts_task.delay()
    embed_texts_task.delay()

    assert wait_until(lambda: Embedding.objects.count() == 3)
    assert wait_until(lambda: drained(redis_client))
    assert fake.count(EMBEDDINGS) == 1
    assert EmbeddingUsage.objects.count() == 1


def test_a_rate_limited_provider_is_tried_again_later(celery_worker, fake, redis_client):
    compacted(Conversation.objects.create(), "The refund rules.")
    fake.script(EMBEDDINGS, rate_limited(), ok())

    embed_texts_task.delay()

    assert wait_until(lambda: Embedding.objects.count() == 1)
    assert fake.count(EMBEDDINGS) == 2


def test_an_exchange_that_compacted_something_has_its_texts_embedded(
    celery_worker, fake, redis_client
):
    conversation = Conversation.objects.create()
    earlier = compacted(conversation, "Compacted before the last exchange was processed.")
    compaction(conversation)
    hour_ago = timezone.now() - timedelta(hours=1)
    CompactionEvent.objects.update(created_at=hour_ago)
    Conversation.objects.filter(pk=conversation.pk).update(
        post_exchange_done_at=hour_ago + timedelta(minutes=30)
    )

    # An exchange that compacted nothing: its post-exchange run enqueues no embedding.
    finish_exchange(conversation)
    assert wait_until(lambda: processed(conversation))
    assert wait_until(lambda: drained(redis_client))
    assert fake.count(EMBEDDINGS) == 0

    # One that did: the worker embeds what is new, and what was waiting.
    later = compacted(conversation, "Compacted in this exchange.")
    compaction(conversation)
    finish_exchange(conversation)

    assert wait_until(lambda: Embedding.objects.count() == 2)
    assert stored() == {
        ("original", earlier.pk, conversation.pk, 0),
        ("original", later.pk, conversation.pk, 0),
    }


def compaction(conversation: Conversation) -> None:
    record_compaction(
        conversation.pk,
        CompactionEvent.Kind.TOOL_RESULTS,
        tokens_before=100,
        tokens_after=10,
        messages_affected=1,
        duration_ms=1,
    )


def processed(conversation: Conversation) -> bool:
    row = Conversation.objects.get(pk=conversation.pk)
    return row.last_exchange_at is not None and row.post_exchange_done_at == row.last_exchange_at


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_text_that_kills_the_worker_is_embedded_alone_then_left_out(
    fake, empty_queues, redis_client, tmp_path
):
    """A real prefork worker whose child is killed (SIGKILL, as the kernel's OOM killer
    does) in the middle of a request: the task comes back (reject_on_worker_lost), each
    text of the lost request is then sent alone, so the others are embedded, and the
    one it dies in again is left out at the cap instead of killing every run."""
    conversation = Conversation.objects.create()
    poison = compacted(conversation, "The text the model chokes on.")  # the oldest: sent last
    healthy = [
        compacted(conversation, f"Original {index}: the refund rules.") for index in range(3)
    ]
    hang = 120  # seconds: far past the test, the child dies long before the answer
    fake.script(EMBEDDINGS, slow(hang), ok(), ok(), ok(), slow(hang))
    env = {
        **fake.embeddings_env("openai"),
        "ASSISTANT_EMBEDDING_DIMENSIONS": str(DIMENSIONS),
        "ASSISTANT_MAX_TASK_DELIVERIES": "2",
        "LLM_MAX_RETRIES": "0",
    }

    with worker_process("embed", tmp_path, extra_env=env) as worker:
        embed_texts_task.delay()
        assert wait_until(lambda: fake.count(EMBEDDINGS) == 1)
        os.kill(children(worker.pid)[0], signal.SIGKILL)

        # The new child sends each text alone: three answers, then the poison hangs again.
        assert wait_until(lambda: fake.count(EMBEDDINGS) == 5, timeout=90)
        assert wait_until(lambda: Embedding.objects.count() == 3)
        os.kill(children(worker.pid)[0], signal.SIGKILL)

        # Its third delivery leaves the poison out: the run ends with nothing sent.
        assert wait_until(lambda: drained(redis_client), timeout=90)
        log = tmp_path / "worker-embed.log"
        assert wait_until(lambda: "embedding_dropped" in log.read_text())

    requests = [request.body["input"] for request in fake.requests_for(EMBEDDINGS)]
    assert [len(texts) for texts in requests] == [4, 1, 1, 1, 1]
    assert requests[-1] == [poison.content]
    assert stored() == {("original", row.pk, conversation.pk, 0) for row in healthy}
    dropped = [line for line in log.read_text().splitlines() if "embedding_dropped" in line]
    assert len(dropped) == 1 and f"id={poison.pk} " in dropped[0] and "deliveries=2" in dropped[0]
