"""search_history with semantic recall (issue 53): the query's embedding against the
stored ones, fused with the full-text matches; the host's widened scope; and search
by words alone, saying so, when there is no embedding model.

The embeddings come through the real OpenAI SDK from the testing kit's fake, whose
vectors put related words near each other (they test the plumbing and the ranking;
quality is measured in the bench with a real model)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assistant.cost import conversation_cost
from assistant.models import Conversation, Embedding, EmbeddingUsage, Message, SummaryVersion
from assistant.providers import embedder
from assistant.recall import ensure_index, index_name, run_tool_call, store_embedding
from assistant.services import answer_tool_calls, compact_tool_results, new_session
from tests.builders import html, tool_turn
from tests.test_vectors import needs_pgvector

pytestmark = [needs_pgvector, pytest.mark.django_db]

REFUND_RULES = "The chargeback policy: a customer is reimbursed within 14 days of the claim."
UNRELATED = "The build pipeline runs the linters, then the unit tests, then packaging."


def compacted(conversation: Conversation, text: str, tool: str = "read_doc") -> Message:
    """A tool result holding `text` deep in a long page, compacted."""
    page = html(2500) + text + html(2500)
    turn = tool_turn(conversation, "Read it", [(tool, {"path": tool}, page)])
    compact_tool_results(conversation)
    message = Message.objects.get(pk=turn[2].pk)
    assert message.compacted_content is not None
    return message


def embedded(message: Message) -> None:
    """Store the message's original as the worker does: by the configured model."""
    model = embedder()
    assert model is not None
    vector = model.embed([message.content], kind="document").vectors[0]
    store_embedding(
        message.conversation, Embedding.Source.ORIGINAL, message.pk, model.model, vector
    )


@pytest.fixture
def embeddings(fake_llm, settings):
    fake_llm.use_embeddings(settings, "openai")
    model = embedder()
    assert model is not None
    # Before the test writes a row: PostgreSQL builds no index in a transaction with
    # pending constraint checks (the worker's job runs outside one).
    ensure_index(model.dimensions)
    return fake_llm


def search(conversation: Conversation, query: str, **host) -> str:
    return run_tool_call(conversation, "search_history", {"query": query}, **host)


def test_a_question_in_other_words_finds_the_original_that_answered_it(
    embeddings, django_user_model
) -> None:
    user = django_user_model.objects.create(username="ana")
    conversation = Conversation.objects.create(user=user)
    answer = compacted(conversation, REFUND_RULES, "read_policy")
    other = compacted(conversation, UNRELATED, "read_ci")
    embedded(answer)
    embedded(other)

    text = search(conversation, "what did we decide about refund rules?")

    lines = text.splitlines()
    assert lines[1].startswith(f"- ref m{answer.pk} (tool read_policy)"), text
    assert "words only" not in text
    # The query went to the embedding endpoint as a query, once.
    assert embeddings.count("openai.embeddings") == 3  # two documents, one query


def test_without_an_embedding_model_search_is_by_words_and_says_so(conversation) -> None:
    compacted(conversation, REFUND_RULES)

    found = search(conversation, "chargeback")
    missed = search(conversation, "refund rules")

    assert found.startswith('1 match for "chargeback"'), found
    assert found.endswith("(Searched by words only: no embedding model is configured.)")
    assert missed == (
        'No stored original matches "refund rules".\n'
        "(Searched by words only: no embedding model is configured.)"
    )


def test_a_hit_by_words_and_by_meaning_ranks_above_a_hit_by_one(embeddings, conversation) -> None:
    both = compacted(conversation, "Refund rules: the chargeback is reimbursed in 14 days.")
    meaning = compacted(conversation, "Chargeback policy, reimbursement within two weeks.")
    words = compacted(conversation, "Rules of the linter: no refund of the style points.")
    for message in (both, meaning, words):
        embedded(message)

    text = search(conversation, "refund rules")

    order = [line.split()[2] for line in text.splitlines()[1:4]]
    assert order[0] == f"m{both.pk}", text
    assert set(order) == {f"m{both.pk}", f"m{meaning.pk}", f"m{words.pk}"}, text


def test_only_the_current_models_vectors_are_searched(embeddings, conversation) -> None:
    answer = compacted(conversation, REFUND_RULES)
    vector = embedder().embed([answer.content], kind="document").vectors[0]  # type: ignore[union-attr]
    store_embedding(conversation, Embedding.Source.ORIGINAL, answer.pk, "an-old-model", vector)

    assert search(conversation, "refund rules").startswith("No stored original matches")


def test_a_summary_hit_names_the_range_it_covers(embeddings, conversation) -> None:
    first = tool_turn(conversation, "hello", [])[0]
    last = tool_turn(conversation, "bye", [])[-1]
    version = SummaryVersion.objects.create(
        conversation=conversation,
        through_message_id=last.pk,
        text="We agreed the chargeback policy reimburses customers within 14 days.",
    )
    model = embedder()
    assert model is not None
    vector = model.embed([version.text], kind="document").vectors[0]
    store_embedding(conversation, Embedding.Source.SUMMARY, version.pk, model.model, vector)

    text = search(conversation, "refund rules")

    assert f"- ref m{first.pk}..m{last.pk} (summary): We agreed the chargeback" in text, text
    assert "ref m" in run_tool_call(conversation, "recall", {"handle": f"m{first.pk}..m{last.pk}"})


def test_a_widened_search_reads_the_users_other_conversations_and_no_one_elses(
    embeddings, django_user_model
) -> None:
    ana = django_user_model.objects.create(username="ana")
    bo = django_user_model.objects.create(username="bo")
    today = Conversation.objects.create(user=ana)
    last_week = Conversation.objects.create(user=ana)
    bos = Conversation.objects.create(user=bo)
    hers = compacted(last_week, REFUND_RULES, "read_policy")
    his = compacted(bos, REFUND_RULES, "read_policy")
    embedded(hers)
    embedded(his)

    narrow = search(today, "chargeback")
    wide = search(today, "chargeback", recall_scope="user")

    assert narrow.startswith("No stored original matches"), narrow
    assert f"- ref m{hers.pk} (tool read_policy, conversation {last_week.pk})" in wide, wide
    assert f"m{his.pk}" not in wide
    assert f"m{his.pk}" not in search(today, "refund rules", recall_scope="user")
    # recall reads the widened hit's handle with the same scope, and only with it.
    handle = {"handle": f"m{hers.pk}"}
    assert REFUND_RULES in run_tool_call(today, "recall", handle, recall_scope="user")
    assert run_tool_call(today, "recall", handle).startswith("Error: no stored original")
    refused = run_tool_call(today, "recall", {"handle": f"m{his.pk}"}, recall_scope="user")
    assert refused.startswith("Error: no stored original")


def test_a_conversation_without_a_user_has_no_others(embeddings, conversation) -> None:
    stranger = Conversation.objects.create()
    embedded(compacted(stranger, REFUND_RULES))

    assert search(conversation, "chargeback", recall_scope="user").startswith("No stored")


def test_the_scope_is_the_hosts_keyword_and_checked_before_anything_runs(conversation) -> None:
    with pytest.raises(ValidationError) as raised:
        run_tool_call(conversation, "search_history", {"query": "x"}, recall_scope="everyone")
    assert raised.value.code == "invalid_recall_scope"
    call = {"id": "c1", "name": "search_history", "arguments": {"query": "x"}}
    with pytest.raises(ValidationError) as raised:
        answer_tool_calls(conversation, [call], lambda *_: "", recall_scope="all")
    assert raised.value.code == "invalid_recall_scope"
    # The model cannot widen it: an argument of that name is not the host's keyword.
    sneaky = run_tool_call(conversation, "search_history", {"query": "x", "recall_scope": "user"})
    assert "conversation" not in sneaky.split("\n")[0]


def test_a_failing_embedding_model_leaves_search_by_words(embeddings, conversation) -> None:
    from tests.fake_llm import raw

    compacted(conversation, REFUND_RULES)
    embeddings.script("openai.embeddings", raw(401, {"error": {"message": "bad key"}}))

    text = search(conversation, "chargeback")

    assert text.startswith('1 match for "chargeback"'), text
    assert text.endswith("(Searched by words only: the embedding model did not answer.)")


def bulk_embeddings(model: str, dimensions: int, count: int, first: int) -> None:
    """`count` stored embeddings of random directions in another conversation, through SQL."""
    elsewhere = Conversation.objects.create()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO assistant_embedding "
            "(conversation_id, source, source_id, chunk, model, dimensions, vector, created_at) "
            "SELECT %s, 'original', %s + n, 0, %s, %s, "
            "(SELECT array_agg(random() * 2 - 1)::vector FROM generate_series(1, %s) "
            "WHERE n > 0), now() FROM generate_series(1, %s) AS n",
            [elsewhere.pk, first, model, dimensions, dimensions, count],
        )
        cursor.execute("ANALYZE assistant_embedding")


@pytest.fixture
def short_embeddings(fake_llm, settings):
    """Embeddings of 64 dimensions (OpenAI's `dimensions`), for tables of thousands."""
    settings.ASSISTANT_EMBEDDING_DIMENSIONS = 64
    fake_llm.use_embeddings(settings, "openai")
    ensure_index(64)
    return fake_llm


def test_a_search_runs_as_many_statements_among_10_or_10000_embeddings(
    short_embeddings, conversation
) -> None:
    """And finds the conversation's one embedding among another's 10,000 (through the
    HNSW index, an iterative scan goes on past them)."""
    answer = compacted(conversation, REFUND_RULES)
    embedded(answer)
    model = embedder()
    assert model is not None

    def statements() -> int:
        with CaptureQueriesContext(connection) as captured:
            text = search(conversation, "refund rules")
        assert f"ref m{answer.pk}" in text, text
        return len(captured)

    bulk_embeddings(model.model, model.dimensions, 10, first=10**12)
    few = statements()
    bulk_embeddings(model.model, model.dimensions, 9_990, first=2 * 10**12)

    assert statements() == few


def test_a_paraphrase_finds_the_session_that_answered_it(embeddings, django_user_model) -> None:
    ana = django_user_model.objects.create(username="ana")
    closed = Conversation.objects.create(user=ana, title="Billing questions")
    first = tool_turn(closed, "How do refunds work here?", [])[0]
    last = tool_turn(closed, "Thanks", [])[-1]
    session = new_session(closed)
    Conversation.objects.filter(pk=session.pk).update(
        parent_conversation_summary="We settled the chargeback policy: reimbursed in 14 days."
    )
    model = embedder()
    assert model is not None
    vector = model.embed(["chargeback policy reimbursed"], kind="document").vectors[0]
    store_embedding(closed, Embedding.Source.SESSION, session.pk, model.model, vector)
    today = Conversation.objects.create(user=ana)

    in_the_chain = search(session, "refund rules")
    widened = search(today, "refund rules", recall_scope="user")

    line = f'- ref m{first.pk}..m{last.pk} (session "Billing questions", conversation {closed.pk})'
    assert line in in_the_chain, in_the_chain
    assert line in widened, widened
    assert search(today, "refund rules").startswith("No stored original matches")


def test_read_through_the_hnsw_index_a_conversation_among_many_still_gets_its_neighbours(
    short_embeddings, conversation
) -> None:
    """The HNSW scan's first 40 are all another conversation's: its iterative scan
    reads on until this conversation's rows come (the plan forced onto the index, as
    the planner takes it for a wide scope)."""
    answer = compacted(conversation, REFUND_RULES)
    embedded(answer)
    model = embedder()
    assert model is not None
    bulk_embeddings(model.model, model.dimensions, 5_000, first=10**12)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")  # this test's transaction only
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        query = "[" + ",".join(["0.1"] * model.dimensions) + "]"
        cursor.execute(
            f"EXPLAIN SELECT id FROM assistant_embedding WHERE dimensions = {model.dimensions} "
            "AND model = %s AND conversation_id = ANY(%s) "
            f"ORDER BY (vector::vector({model.dimensions})) <=> %s::vector({model.dimensions}) "
            "LIMIT 40",
            [model.model, [conversation.pk], query],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert index_name(model.dimensions) in plan, plan

    assert f"- ref m{answer.pk} " in search(conversation, "refund rules")


def test_the_querys_embedding_is_counted_in_the_conversations_cost(
    embeddings, conversation
) -> None:
    embedded(compacted(conversation, REFUND_RULES))

    search(conversation, "refund rules")

    usage = EmbeddingUsage.objects.get(conversation=conversation)
    assert (usage.texts, usage.model) == (1, "text-embedding-3-small")
    assert usage.input_tokens > 0
    cost, _ = conversation_cost(conversation)
    assert cost.embedding_tokens == usage.input_tokens
    assert cost.embedding > 0


def test_a_deleted_conversation_searches_and_records_nothing(embeddings, conversation) -> None:
    embedded(compacted(conversation, REFUND_RULES))
    Conversation.objects.filter(pk=conversation.pk).update(deleted_at=timezone.now())
    conversation.refresh_from_db()

    assert "- ref m" in search(conversation, "refund rules")
    assert not EmbeddingUsage.objects.filter(conversation=conversation).exists()
