"""The fake server's embedding endpoints, in each provider's real wire shape, with
deterministic vectors in which related words are near each other:

- OpenAI `POST /v1/embeddings` (`embeddings.create`; base64 or float vectors as the
  request's `encoding_format` asks, `dimensions`, usage.prompt_tokens), kind
  `openai.embeddings`;
- Gemini `POST /{version}/models/{model}:batchEmbedContents` (what `embed_content` calls on
  the Gemini API: one request per text, with its `taskType` and `outputDimensionality`)
  and `:embedContent` (one text), kind `gemini.embeddings`; like the real model's, a
  vector cut to fewer dimensions than its 3,072 is not unit length, and no usage is
  reported;
- Voyage `POST /voyage/v1/embeddings` (the `voyageai` SDK with `base_url=fake.voyage_url`:
  `input_type`, `output_dimension`, base64 vectors, usage.total_tokens; errors as
  `{"detail": ...}`), kind `voyage.embeddings`.

The vectors (`fake_vector`): each word of the text, lower-cased, stop words left out, is
reduced to a crude stem (a plural or verb ending cut off); a stem that belongs to one of
the groups of `RELATED` (refund, chargeback, reimbursement...; database, postgres, sql...)
stands for its group. Every group and every other stem has a fixed pseudo-random direction
(seeded by its SHA-256): a text's vector is the sum over its words of its group's
direction plus a smaller one of the word itself, scaled to unit length, at the
dimensions the request asks for (the model's own otherwise). So texts sharing words or
related words are near each other (cosine well above that of unrelated texts, near 0),
the same text always gets the same vector, and a document and a query embed alike.
They test the plumbing and the ranking; they mean nothing about quality, which is
measured with the local model (docs/operations.rst, "Where embeddings come from").

A scripted reply answers as on the other endpoints (`ok()`: the vectors above; `ok(usage=
{...})`: that usage object in the provider's names; `rate_limited()`, `overloaded()`,
`overflow()`, `malformed()`, `raw(...)`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import random
import re
import struct
from typing import Any

OPENAI = "openai.embeddings"
GEMINI = "gemini.embeddings"
VOYAGE = "voyage.embeddings"
KINDS = (OPENAI, GEMINI, VOYAGE)
OPENAI_PATHS = ("/v1/embeddings", "/embeddings")
VOYAGE_PATHS = ("/voyage/v1/embeddings",)
GEMINI_PATH = re.compile(r"^/(?:[^/]+/)*models/([^/:]+):(batchEmbedContents|embedContent)$")

#: Words that mean nearly the same thing here: each group shares one direction.
RELATED: tuple[tuple[str, ...], ...] = (
    ("refund", "chargeback", "reimbursement", "repayment", "rebate", "moneyback"),
    ("database", "postgres", "postgresql", "sql", "sqlite", "mysql", "db"),
    ("deploy", "deployment", "release", "rollout"),
    ("bug", "defect", "fault", "glitch", "crash", "regression"),
    ("invoice", "bill", "billing", "receipt"),
    ("login", "signin", "authentication", "auth", "password", "credential"),
    ("car", "automobile", "vehicle"),
    ("cache", "caching", "memoize", "memoization"),
    ("price", "pricing", "cost", "fee", "tariff"),
    ("meeting", "appointment", "standup"),
)
_STOP_WORDS = (
    "a an and are as at be but by did do does for from had has have how i in is it its "
    "me my of on or our so that the their them then there these they this to was we "
    "were what when where which who why will with you your about into over"
)
STOP_WORDS = frozenset(_STOP_WORDS.split())
# A word's own direction, beside its group's: related words are near, not identical.
WORD_WEIGHT = 0.35
# A Gemini vector cut below its native 3,072 dimensions comes back at this length.
GEMINI_NATIVE_DIMENSIONS = 3072
GEMINI_CUT_LENGTH = 0.6
# OpenAI's dimensions when the request names none.
DEFAULT_DIMENSIONS = {
    "text-embedding-3-large": 3072,
}
OPENAI_DEFAULT_DIMENSIONS = 1536
VOYAGE_DEFAULT_DIMENSIONS = 1024
_WORD = re.compile(r"[a-z0-9]+")


def stem(word: str) -> str:
    """A crude stem: a plural or verb ending cut off (refunds, refunded -> refund)."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


_GROUPS = {stem(word): group[0] for group in RELATED for word in group}


@functools.lru_cache(maxsize=4096)
def _direction(name: str, dimensions: int) -> tuple[float, ...]:
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    generator = random.Random(seed)
    return tuple(generator.gauss(0.0, 1.0) for _ in range(dimensions))


def _unit(values: list[float]) -> list[float]:
    norm = math.sqrt(math.fsum(value * value for value in values))
    return [value / norm for value in values]


def fake_vector(text: str, dimensions: int) -> list[float]:
    """The fake's unit vector of `text` (see the module doc)."""
    words = [stem(word) for word in _WORD.findall(text.lower()) if word not in STOP_WORDS]
    if not words:  # nothing but stop words (or no words): the text's own direction
        return _unit(list(_direction(f"text:{text}", dimensions)))
    total = [0.0] * dimensions
    for word in words:
        group = _GROUPS.get(word)
        parts = [(f"group:{group}", 1.0), (f"word:{word}", WORD_WEIGHT)] if group else []
        for name, weight in parts or [(f"word:{word}", 1.0)]:
            for index, value in enumerate(_direction(name, dimensions)):
                total[index] += weight * value
    return _unit(total)


def text_tokens(text: str) -> int:
    """The fake's token count of one text: a token per four characters."""
    return max(1, math.ceil(len(text) / 4))


def kind_of(path: str) -> str | None:
    """The embedding kind a request path names; None for any other path."""
    if path in VOYAGE_PATHS:
        return VOYAGE
    if path in OPENAI_PATHS:
        return OPENAI
    if GEMINI_PATH.match(path):
        return GEMINI
    return None


def _base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def render(reply: Any, kind: str, path: str, body: Any) -> tuple[int, dict[str, str], Any]:
    """(status, headers, body) of a scripted reply to an embedding request of `kind`."""
    if kind == OPENAI:
        return _openai(reply, body)
    if kind == VOYAGE:
        return _voyage(reply, body)
    match = GEMINI_PATH.match(path)
    assert match is not None  # kind_of matched it
    return _gemini(reply, body, match.group(2))


def _retry_headers(reply: Any) -> dict[str, str]:
    seconds = reply.retry_after or 0
    return {"retry-after": str(max(0, round(seconds))), "retry-after-ms": str(int(seconds * 1000))}


def _openai_error(message: str, error_type: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def _texts(value: Any) -> list[str] | None:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        return None
    return values


def _openai(reply: Any, body: Any) -> tuple[int, dict[str, str], Any]:
    body = body if isinstance(body, dict) else {}
    texts = _texts(body.get("input"))
    if not body.get("model"):
        return (
            400,
            {},
            _openai_error("you must provide a model parameter", "invalid_request_error", None),
        )
    if not texts or len(texts) > 2048:
        message = "'$.input' is invalid. Please check the API reference."
        return 400, {}, _openai_error(message, "invalid_request_error", None)
    if reply.kind == "rate_limited":
        message = f"Rate limit reached for {body['model']} on tokens per min (TPM)."
        return 429, _retry_headers(reply), _openai_error(message, "tokens", "rate_limit_exceeded")
    if reply.kind == "overloaded":
        message = "The server is overloaded or not ready yet."
        return 503, _retry_headers(reply), _openai_error(message, "server_error", None)
    if reply.kind == "overflow":
        message = (
            "This model's maximum context length is 8192 tokens, however you requested "
            "9000 tokens. Please reduce your prompt."
        )
        return 400, {}, _openai_error(message, "invalid_request_error", "context_length_exceeded")
    model = str(body["model"])
    dimensions = body.get("dimensions") or DEFAULT_DIMENSIONS.get(model, OPENAI_DEFAULT_DIMENSIONS)
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(texts):
        vector = fake_vector(text, int(dimensions))
        data.append(
            {
                "object": "embedding",
                "index": index,
                "embedding": _base64(vector) if as_base64 else vector,
            }
        )
    tokens = sum(text_tokens(text) for text in texts)
    usage = reply.usage or {"prompt_tokens": tokens, "total_tokens": tokens}
    return 200, {}, {"object": "list", "data": data, "model": model, "usage": usage}


def _gemini_error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def _gemini_vector(request: Any) -> list[float] | None:
    """One request's vector, or None when it carries no text."""
    request = request if isinstance(request, dict) else {}
    parts = (request.get("content") or {}).get("parts") or []
    text = "".join(str(part.get("text") or "") for part in parts if isinstance(part, dict))
    if not text:
        return None
    dimensions = int(request.get("outputDimensionality") or GEMINI_NATIVE_DIMENSIONS)
    vector = fake_vector(text, dimensions)
    if dimensions < GEMINI_NATIVE_DIMENSIONS:
        vector = [value * GEMINI_CUT_LENGTH for value in vector]
    return vector


def _gemini(reply: Any, body: Any, method: str) -> tuple[int, dict[str, str], Any]:
    body = body if isinstance(body, dict) else {}
    requests = body.get("requests") if method == "batchEmbedContents" else [body]
    if not isinstance(requests, list) or not requests or len(requests) > 100:
        message = "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch"
        return 400, {}, _gemini_error(400, "INVALID_ARGUMENT", message)
    if reply.kind == "rate_limited":
        message = "Resource has been exhausted (e.g. check quota)."
        return 429, _retry_headers(reply), _gemini_error(429, "RESOURCE_EXHAUSTED", message)
    if reply.kind == "overloaded":
        message = "The model is overloaded. Please try again later."
        return 503, _retry_headers(reply), _gemini_error(503, "UNAVAILABLE", message)
    vectors = [_gemini_vector(request) for request in requests]
    if any(vector is None for vector in vectors):
        message = "* BatchEmbedContentsRequest.requests[].content: contents must not be empty"
        return 400, {}, _gemini_error(400, "INVALID_ARGUMENT", message)
    embeddings = [{"values": vector} for vector in vectors]
    answer: dict[str, Any] = (
        {"embeddings": embeddings}
        if method == "batchEmbedContents"
        else {"embedding": embeddings[0]}
    )
    if reply.usage:
        answer["usageMetadata"] = reply.usage
    return 200, {}, answer


def _voyage(reply: Any, body: Any) -> tuple[int, dict[str, str], Any]:
    body = body if isinstance(body, dict) else {}
    texts = _texts(body.get("input"))
    if not texts or len(texts) > 1000:
        return 400, {}, {"detail": "Input cannot contain empty strings or empty lists."}
    if body.get("input_type") not in (None, "query", "document"):
        return 400, {}, {"detail": "Value error, input_type must be None, 'query', or 'document'."}
    if reply.kind == "rate_limited":
        detail = "You have exceeded your rate limit. Please try again later."
        return 429, _retry_headers(reply), {"detail": detail}
    if reply.kind == "overloaded":
        return 503, _retry_headers(reply), {"detail": "Service unavailable."}
    model = str(body.get("model") or "voyage-3.5")
    dimensions = int(body.get("output_dimension") or VOYAGE_DEFAULT_DIMENSIONS)
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(texts):
        vector = fake_vector(text, dimensions)
        data.append(
            {
                "object": "embedding",
                "embedding": _base64(vector) if as_base64 else vector,
                "index": index,
            }
        )
    usage = reply.usage or {"total_tokens": sum(text_tokens(text) for text in texts)}
    return 200, {}, {"object": "list", "data": data, "model": model, "usage": usage}
