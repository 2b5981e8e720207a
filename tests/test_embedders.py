"""Where semantic recall's embeddings come from (docs/operations.rst, "Where embeddings
come from"): each provider's embedder through its real SDK against the testing kit's
fake server, the settings that choose one, and the fake's own vectors."""

from __future__ import annotations

import logging
import math
import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from assistant.checks import embeddings_can_run
from assistant.providers import (
    EMBEDDING_MODELS,
    EmbeddingError,
    EmbeddingResult,
    embedder,
    price_of,
    registry,
)
from assistant.providers.openai.embeddings import OpenAIEmbedder
from assistant.settings.app import app_setting
from assistant.testing.fake_embeddings import fake_vector
from assistant.text import estimate_tokens
from tests.fake_llm import ok, overloaded, rate_limited, raw

SECRET = "test-key-SECRET-embeddings"
TEXTS = [
    "What did we decide about the refund rules?",
    "The chargeback policy: customers get their money back within 30 days.",
    "Postgres needs an index on the embedding column.",
]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def unit(vector: list[float]) -> bool:
    return math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-6)


@pytest.fixture
def openai_embeddings(fake_llm, settings):
    fake_llm.use_embeddings(settings, "openai", key=SECRET)
    return fake_llm


# --- OpenAI ---------------------------------------------------------------------------


def test_openai_embeds_each_text_in_order_through_the_sdk(openai_embeddings):
    found = embedder()

    result = found.embed(TEXTS, kind="document")

    assert isinstance(result, EmbeddingResult)
    assert (result.provider, result.model) == ("openai", "text-embedding-3-small")
    assert found.dimensions == 1536
    assert [len(vector) for vector in result.vectors] == [1536] * 3
    assert all(unit(vector) for vector in result.vectors)
    # In order: each vector is the fake's vector of its own text.
    for text, vector in zip(TEXTS, result.vectors, strict=True):
        assert cosine(vector, fake_vector(text, 1536)) == pytest.approx(1.0)
    (request,) = openai_embeddings.requests_for("openai.embeddings")
    assert request.path == "/v1/embeddings"
    assert request.body["input"] == TEXTS
    assert request.body["model"] == "text-embedding-3-small"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    # The tokens are the provider's own count (usage.prompt_tokens), not an estimate.
    assert result.input_tokens == request.usage["prompt_tokens"]


def test_openai_asks_for_the_configured_dimensions(openai_embeddings, settings):
    settings.ASSISTANT_EMBEDDING_DIMENSIONS = 256

    result = embedder().embed(TEXTS[:1], kind="query")

    assert len(result.vectors[0]) == 256
    assert unit(result.vectors[0])
    (request,) = openai_embeddings.requests_for("openai.embeddings")
    assert request.body["dimensions"] == 256


def test_openai_has_no_query_kind_so_both_kinds_embed_alike(openai_embeddings):
    found = embedder()

    document = found.embed(TEXTS[:1], kind="document").vectors[0]
    query = found.embed(TEXTS[:1], kind="query").vectors[0]

    assert cosine(document, query) == pytest.approx(1.0)
    bodies = [r.body for r in openai_embeddings.requests_for("openai.embeddings")]
    assert bodies[0] == bodies[1]


def test_more_texts_than_one_request_takes_go_in_several_requests_in_order(openai_embeddings):
    small = OpenAIEmbedder(
        api_key=SECRET,
        base_url=openai_embeddings.openai_url,
        model="text-embedding-3-small",
        dimensions=64,
    )
    small.max_batch = 2
    texts = [f"note {n} about the refund of order {n}" for n in range(5)]

    result = small.embed(texts, kind="document")

    requests = openai_embeddings.requests_for("openai.embeddings")
    assert [r.body["input"] for r in requests] == [texts[0:2], texts[2:4], texts[4:5]]
    for text, vector in zip(texts, result.vectors, strict=True):
        assert cosine(vector, fake_vector(text, 64)) == pytest.approx(1.0)
    assert result.input_tokens == sum(r.usage["prompt_tokens"] for r in requests)


def test_openai_retries_a_rate_limit_itself_then_answers(openai_embeddings):
    openai_embeddings.script("openai.embeddings", rate_limited())

    result = embedder().embed(TEXTS[:1], kind="document")

    assert len(result.vectors) == 1
    assert openai_embeddings.count("openai.embeddings") == 2


def test_a_rate_limit_past_the_retries_is_a_retryable_error(openai_embeddings, settings):
    settings.LLM_MAX_RETRIES = 0
    openai_embeddings.script("openai.embeddings", rate_limited())

    with pytest.raises(EmbeddingError) as raised:
        embedder().embed(TEXTS[:1], kind="document")

    assert raised.value.status == 429
    assert raised.value.retryable
    assert (raised.value.provider, raised.value.model) == ("openai", "text-embedding-3-small")


def test_a_refused_key_is_an_error_not_worth_retrying_and_never_shows_the_key(
    openai_embeddings, settings, caplog
):
    # OpenAI's own refusal quotes the start and the end of the key it was given.
    message = f"Incorrect API key provided: {SECRET[:8]}****{SECRET[-4:]}."
    refusal = {
        "error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}
    }
    openai_embeddings.script("openai.embeddings", raw(401, refusal))
    caplog.set_level(logging.DEBUG)

    with pytest.raises(EmbeddingError) as raised:
        embedder().embed(TEXTS[:1], kind="document")

    assert raised.value.status == 401
    assert not raised.value.retryable
    said = f"{raised.value} {raised.value!r} {caplog.text}"
    assert SECRET not in said
    assert SECRET[-4:] not in str(raised.value)


def test_an_answer_of_the_wrong_dimensions_is_refused_and_not_retried(openai_embeddings, settings):
    # A model no table lists: its dimensions are what the settings say, and an answer of
    # another count is not stored.
    settings.ASSISTANT_EMBEDDING_MODEL = "my-proxy-embedder"
    settings.ASSISTANT_EMBEDDING_DIMENSIONS = 512

    with pytest.raises(EmbeddingError) as raised:
        embedder().embed(TEXTS[:1], kind="document")

    assert "1536" in str(raised.value)
    assert raised.value.final
    assert not raised.value.retryable
    (request,) = openai_embeddings.requests_for("openai.embeddings")
    assert "dimensions" not in request.body  # nothing is asked of a model the app does not know


def test_an_overloaded_provider_is_retryable(openai_embeddings, settings):
    settings.LLM_MAX_RETRIES = 0
    openai_embeddings.script("openai.embeddings", overloaded())

    with pytest.raises(EmbeddingError) as raised:
        embedder().embed(TEXTS[:1], kind="document")

    assert (raised.value.status, raised.value.retryable) == (503, True)


# --- Gemini ---------------------------------------------------------------------------


@pytest.fixture
def gemini_embeddings(fake_llm, settings):
    fake_llm.use_embeddings(settings, "gemini", key=SECRET)
    return fake_llm


def test_gemini_embeds_each_text_as_its_kind_through_the_sdk(gemini_embeddings):
    found = embedder()

    stored = found.embed(TEXTS, kind="document")
    asked = found.embed(TEXTS[:1], kind="query")

    assert (stored.provider, stored.model, found.dimensions) == (
        "gemini",
        "gemini-embedding-001",
        768,
    )
    assert [len(vector) for vector in stored.vectors] == [768] * 3
    for text, vector in zip(TEXTS, stored.vectors, strict=True):
        assert cosine(vector, fake_vector(text, 768)) == pytest.approx(1.0)
    document, query = gemini_embeddings.requests_for("gemini.embeddings")
    assert document.path.endswith("/models/gemini-embedding-001:batchEmbedContents")
    assert document.headers["x-goog-api-key"] == SECRET
    assert [r["content"]["parts"][0]["text"] for r in document.body["requests"]] == TEXTS
    assert {r["taskType"] for r in document.body["requests"]} == {"RETRIEVAL_DOCUMENT"}
    assert {r["outputDimensionality"] for r in document.body["requests"]} == {768}
    assert [r["taskType"] for r in query.body["requests"]] == ["RETRIEVAL_QUERY"]
    assert asked.vectors[0] == pytest.approx(stored.vectors[0])


def test_gemini_shortened_vectors_come_back_at_unit_length(gemini_embeddings):
    # Like the real model's, the fake's vector cut below 3,072 dimensions is not unit length.
    result = embedder().embed(TEXTS[:2], kind="document")

    assert all(unit(vector) for vector in result.vectors)


def test_gemini_reports_no_tokens_so_they_are_counted(gemini_embeddings):
    result = embedder().embed(TEXTS, kind="document")

    (request,) = gemini_embeddings.requests_for("gemini.embeddings")
    assert request.usage is None
    assert result.input_tokens == sum(estimate_tokens(text) for text in TEXTS)


def test_gemini_tokens_it_reports_are_taken_as_reported(gemini_embeddings):
    gemini_embeddings.script("gemini.embeddings", ok(usage={"promptTokenCount": 123}))

    assert embedder().embed(TEXTS, kind="document").input_tokens == 123


def test_gemini_errors_keep_the_retryable_split(gemini_embeddings, settings):
    settings.LLM_MAX_RETRIES = 0
    refusal = {
        "error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}
    }
    gemini_embeddings.script("gemini.embeddings", rate_limited(), raw(400, refusal))

    with pytest.raises(EmbeddingError) as limited:
        embedder().embed(TEXTS[:1], kind="document")
    with pytest.raises(EmbeddingError) as refused:
        embedder().embed(TEXTS[:1], kind="document")

    assert (limited.value.status, limited.value.retryable) == (429, True)
    assert (refused.value.status, refused.value.retryable) == (400, False)
    assert SECRET not in f"{limited.value!r} {refused.value!r}"


# --- Voyage ---------------------------------------------------------------------------


@pytest.fixture
def voyage_embeddings(fake_llm, settings):
    fake_llm.use_embeddings(settings, "voyage", key=SECRET)
    return fake_llm


def test_voyage_embeds_each_text_as_its_kind_through_the_sdk(voyage_embeddings):
    found = embedder()

    stored = found.embed(TEXTS, kind="document")
    asked = found.embed(TEXTS[:1], kind="query")

    assert (stored.provider, stored.model, found.dimensions) == ("voyage", "voyage-3.5", 1024)
    for text, vector in zip(TEXTS, stored.vectors, strict=True):
        assert len(vector) == 1024
        assert cosine(vector, fake_vector(text, 1024)) == pytest.approx(1.0, abs=1e-6)
    document, query = voyage_embeddings.requests_for("voyage.embeddings")
    assert document.path == "/voyage/v1/embeddings"
    assert document.headers["authorization"] == f"Bearer {SECRET}"
    assert (document.body["input"], document.body["input_type"]) == (TEXTS, "document")
    assert (query.body["input"], query.body["input_type"]) == (TEXTS[:1], "query")
    assert document.body["output_dimension"] is None  # 1,024: the model's own
    assert stored.input_tokens == document.usage["total_tokens"]
    assert asked.input_tokens == query.usage["total_tokens"]


def test_voyage_asks_for_the_configured_dimensions(voyage_embeddings, settings):
    settings.ASSISTANT_EMBEDDING_MODEL = "voyage-3.5-lite"
    settings.ASSISTANT_EMBEDDING_DIMENSIONS = 512

    result = embedder().embed(TEXTS[:1], kind="document")

    assert (result.model, len(result.vectors[0])) == ("voyage-3.5-lite", 512)
    (request,) = voyage_embeddings.requests_for("voyage.embeddings")
    assert (request.body["model"], request.body["output_dimension"]) == ("voyage-3.5-lite", 512)


def test_voyage_errors_keep_the_retryable_split_and_never_show_the_key(
    voyage_embeddings, settings, caplog
):
    settings.LLM_MAX_RETRIES = 0
    refused = raw(401, {"detail": "Provided API key is invalid."})
    voyage_embeddings.script("voyage.embeddings", rate_limited(), refused)
    caplog.set_level(logging.DEBUG)

    with pytest.raises(EmbeddingError) as limited:
        embedder().embed(TEXTS[:1], kind="document")
    with pytest.raises(EmbeddingError) as unauthorized:
        embedder().embed(TEXTS[:1], kind="document")

    assert (limited.value.status, limited.value.retryable) == (429, True)
    assert (unauthorized.value.status, unauthorized.value.retryable) == (401, False)
    assert SECRET not in f"{limited.value!r} {unauthorized.value!r} {caplog.text}"


# --- the fake's vectors ---------------------------------------------------------------


def test_the_fakes_related_words_are_nearer_than_unrelated_ones(openai_embeddings):
    texts = [
        "refund rules",
        "chargeback policy",
        "reimbursement of the order",
        "postgres index",
        "the database schema in sql",
    ]
    refund, chargeback, reimbursement, postgres, database = (
        embedder().embed(texts, kind="document").vectors
    )

    for related in (chargeback, reimbursement):
        assert cosine(refund, related) > cosine(refund, postgres) + 0.2
        assert cosine(refund, related) > cosine(refund, database) + 0.2
    assert cosine(postgres, database) > cosine(postgres, chargeback) + 0.2
    assert fake_vector("refund rules", 64) == fake_vector("refund rules", 64)


# --- settings -------------------------------------------------------------------------


def test_embedder_is_none_when_embeddings_are_off(settings, fake_llm):
    fake_llm.use_openai(settings)  # a key is there: off means off
    settings.ASSISTANT_EMBEDDINGS = "off"
    assert embedder() is None
    settings.ASSISTANT_EMBEDDINGS = ""
    assert embedder() is None
    assert embeddings_can_run() == []


def test_a_provider_without_its_key_leaves_embeddings_off_and_says_so_once(
    settings, monkeypatch, caplog
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings.ASSISTANT_EMBEDDINGS = "openai"
    settings.OPENAI_API_KEY = ""
    registry._warn_embeddings_off_once.cache_clear()

    with caplog.at_level(logging.WARNING, logger="assistant.providers"):
        assert embedder() is None
        assert embedder() is None

    (line,) = [r.getMessage() for r in caplog.records if "embeddings_off" in r.getMessage()]
    assert "settings.OPENAI_API_KEY" in line
    (warning,) = embeddings_can_run()
    assert warning.id == "assistant.W004"


def test_the_provider_may_be_written_in_any_case(openai_embeddings, settings):
    settings.ASSISTANT_EMBEDDINGS = "OpenAI"
    assert embedder().provider == "openai"


@pytest.mark.parametrize(
    ("written", "refused"),
    [
        ({"ASSISTANT_EMBEDDINGS": "claude"}, "ASSISTANT_EMBEDDINGS must be"),
        (
            {"ASSISTANT_EMBEDDING_DIMENSIONS": 2001},
            "ASSISTANT_EMBEDDING_DIMENSIONS must be >= 0 and <= 2000, got 2001",
        ),
        (
            {"ASSISTANT_EMBEDDING_DIMENSIONS": -1},
            "ASSISTANT_EMBEDDING_DIMENSIONS must be >= 0 and <= 2000, got -1",
        ),
        ({"ASSISTANT_EMBEDDING_DAILY_TOKENS": -5}, "ASSISTANT_EMBEDDING_DAILY_TOKENS must be >= 0"),
        ({"ASSISTANT_EMBEDDING_MODEL": 5}, "ASSISTANT_EMBEDDING_MODEL must be a string"),
    ],
)
def test_a_setting_of_the_wrong_type_or_range_is_refused(settings, written, refused):
    settings.ASSISTANT_EMBEDDINGS = "openai"
    for name, value in written.items():
        setattr(settings, name, value)

    (name,) = written
    with pytest.raises(ImproperlyConfigured, match=re.escape(refused)):
        app_setting(name)
    with pytest.raises(SystemCheckError, match=re.escape(refused)):
        call_command("check")


@pytest.mark.parametrize(
    ("provider", "model", "dimensions", "refused"),
    [
        # over pgvector's HNSW limit by default: the count has to be written
        ("openai", "text-embedding-3-large", 0, "over the 2,000 an HNSW index takes"),
        ("openai", "text-embedding-3-small", 1537, "cannot produce (1 to 1,536)"),
        ("openai", "text-embedding-ada-002", 512, "cannot produce (1,536 only)"),
        ("gemini", "", 100, "cannot produce (128 to 3,072)"),
        ("voyage", "", 768, "cannot produce (256, 512, 1,024, 2,048)"),
        ("local", "", 768, "cannot produce (384 only)"),
        ("local", "all-mpnet-base-v2", 0, "runs all-MiniLM-L6-v2 only"),
        ("openai", "nomic-embed-text", 0, "set ASSISTANT_EMBEDDING_DIMENSIONS"),
    ],
)
def test_a_dimension_count_the_model_cannot_produce_is_refused(
    settings, provider, model, dimensions, refused
):
    settings.ASSISTANT_EMBEDDINGS = provider
    settings.ASSISTANT_EMBEDDING_MODEL = model
    settings.ASSISTANT_EMBEDDING_DIMENSIONS = dimensions

    with pytest.raises(ImproperlyConfigured, match=re.escape(refused)):
        embedder()
    (error,) = embeddings_can_run()
    assert (error.id, refused in error.msg) == ("assistant.E002", True)


@pytest.mark.parametrize(
    ("provider", "model", "dimensions"),
    [
        ("openai", "", 1536),
        ("openai", "text-embedding-3-large", 1024),
        ("gemini", "", 768),
        ("gemini", "gemini-embedding-001", 1536),
        ("voyage", "", 1024),
        ("voyage", "voyage-3.5-lite", 512),
        ("local", "", 384),
    ],
)
def test_each_provider_has_a_default_model_and_dimensions(settings, provider, model, dimensions):
    settings.ASSISTANT_EMBEDDINGS = provider
    settings.ASSISTANT_EMBEDDING_MODEL = model
    settings.ASSISTANT_EMBEDDING_DIMENSIONS = 0 if not model else dimensions

    chosen = registry.embedder_settings()

    assert chosen.dimensions == dimensions
    assert (
        chosen.model == model
        or {
            "openai": "text-embedding-3-small",
            "gemini": "gemini-embedding-001",
            "voyage": "voyage-3.5",
            "local": "all-MiniLM-L6-v2",
        }[provider]
    )


def test_every_embedding_model_has_its_input_price():
    expected = {
        "text-embedding-3-small": 0.02,
        "text-embedding-3-large": 0.13,
        "text-embedding-ada-002": 0.10,
        "gemini-embedding-001": 0.15,
        "voyage-3.5": 0.06,
        "voyage-3.5-lite": 0.02,
        "voyage-3-large": 0.18,
        "voyage-code-3": 0.18,
        "all-MiniLM-L6-v2": 0.0,
    }
    listed = {name for table in EMBEDDING_MODELS.values() for name in table}
    assert listed == {name.lower() for name in expected}
    for model, price in expected.items():
        assert price_of(model).input == price
        assert price_of(model).output == 0
