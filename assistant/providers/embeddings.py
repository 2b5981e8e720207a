"""The embedding interface semantic recall stores and searches with (docs/operations.rst,
"Where embeddings come from"): one `Embedder` per deployment, its model and dimensions
fixed by settings; `EmbeddingResult`, `EmbeddingError`; each provider's models
(`EmbeddingModel`) and what the settings may ask of them. No SDK is imported here.

The providers' embedders live beside their summarizers (openai/embeddings.py,
gemini/embeddings.py, voyage/, local/); `assistant.providers.registry.embedder()` builds
the configured one.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from django.core.exceptions import ImproperlyConfigured

from assistant.providers.base import ProviderError
from assistant.providers.wire import longest_prefix, normalized_model
from assistant.settings.app import MAX_EMBEDDING_DIMENSIONS
from assistant.text import estimate_tokens

EmbeddingKind = Literal["document", "query"]


@dataclass(frozen=True)
class EmbeddingResult:
    vectors: list[list[float]]  # one per text, in order, each `dimensions` long, unit length
    input_tokens: int  # as the provider reported them (counted where it reports none)
    model: str
    provider: str


class EmbeddingError(ProviderError):
    """An embedding call failed (after the SDK's own retries), or its answer was not one
    vector of the configured dimensions per text (`final`: retrying would give the same).
    Says why, never the key; the SDK's error is `__cause__`."""

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        model: str,
        status: int | None = None,
        final: bool = False,
    ) -> None:
        super().__init__(message, provider=provider, model=model, status=status)
        self.final = final

    @property
    def retryable(self) -> bool:
        """A rate limit, an overload, a timeout or a dropped connection; never a refused
        request (a bad key, a bad model) nor an answer of the wrong shape."""
        return not self.final and super().retryable


class Embedder(abc.ABC):
    provider: str  # "openai" | "gemini" | "voyage" | "local"
    model: str
    dimensions: int
    # Per text: the worker chunks longer texts (assistant.text.estimate_tokens).
    max_input_tokens: int
    max_batch: int  # texts per request

    @abc.abstractmethod
    def embed(self, texts: Sequence[str], *, kind: EmbeddingKind) -> EmbeddingResult:
        """One unit vector of `dimensions` per text, in order. `kind`: "document" for
        what is stored, "query" for what searches it (the providers that tell them
        apart embed each for its role). More texts than `max_batch` go in several
        requests."""

    def checked(self, vectors: Sequence[Sequence[float]], count: int) -> list[list[float]]:
        """The provider's vectors, one per text and of `dimensions`, at unit length;
        EmbeddingError (final) otherwise."""
        if len(vectors) != count:
            raise EmbeddingError(
                f"{self.provider} answered {len(vectors)} vectors for {count} texts",
                provider=self.provider,
                model=self.model,
                final=True,
            )
        lengths = {len(vector) for vector in vectors}
        if lengths - {self.dimensions}:
            raise EmbeddingError(
                f"{self.provider} answered vectors of {sorted(lengths)} dimensions, "
                f"not {self.dimensions} (ASSISTANT_EMBEDDING_DIMENSIONS)",
                provider=self.provider,
                model=self.model,
                final=True,
            )
        try:
            return [unit_vector(vector) for vector in vectors]
        except ValueError as error:
            raise EmbeddingError(
                f"{self.provider} answered {error}",
                provider=self.provider,
                model=self.model,
                final=True,
            ) from None


class BatchedEmbedder(Embedder):
    """An embedder over a provider's request of several texts (`_request`): embed() sends
    them in order, in as many requests as the model's limits need, and checks what comes
    back. A model its provider's table does not list takes the limits of the provider's
    default model, and its vectors are taken as they come (nothing asks for a count)."""

    request_tokens: int  # estimated tokens per request (EmbeddingModel.request_tokens)

    def __init__(
        self, model: str, dimensions: int, table: dict[str, EmbeddingModel], default_model: str
    ) -> None:
        row = embedding_model(table, model)
        limits = row or table[normalized_model(default_model)]
        self.model = model
        self.dimensions = dimensions
        self.max_input_tokens = limits.max_input_tokens
        self.max_batch = limits.max_batch
        self.request_tokens = limits.request_tokens
        self.asks_dimensions = row is not None and row.asks(dimensions)

    def embed(self, texts: Sequence[str], *, kind: EmbeddingKind) -> EmbeddingResult:
        if kind not in ("document", "query"):
            raise ValueError(f'kind must be "document" or "query", got {kind!r}')
        if not all(isinstance(text, str) and text.strip() for text in texts):
            raise ValueError("every text to embed must be a non-blank string")
        vectors: list[list[float]] = []
        tokens = 0
        for batch in batches(texts, self.max_batch, self.request_tokens):
            found, used = self._request(batch, kind)
            vectors += self.checked(found, len(batch))
            tokens += used
        return EmbeddingResult(vectors, tokens, self.model, self.provider)

    @abc.abstractmethod
    def _request(
        self, texts: list[str], kind: EmbeddingKind
    ) -> tuple[Sequence[Sequence[float]], int]:
        """The provider's vectors for `texts` (one request), and the input tokens it
        reported (counted where it reports none); EmbeddingError on failure."""


def unit_vector(vector: Sequence[float]) -> list[float]:
    """`vector` scaled to length 1 (a model's reduced dimensions are not normalized);
    ValueError for a zero or non-finite vector."""
    values = [float(value) for value in vector]
    norm = math.sqrt(math.fsum(value * value for value in values))
    if not math.isfinite(norm) or norm == 0:
        raise ValueError("a zero or non-finite vector")
    return [value / norm for value in values]


def batches(texts: Sequence[str], max_batch: int, max_tokens: int) -> Iterator[list[str]]:
    """`texts` in order, in requests of at most `max_batch` texts and `max_tokens`
    estimated tokens (a text alone may exceed it: the worker chunks to the model's limit)."""
    batch: list[str] = []
    tokens = 0
    for text in texts:
        size = estimate_tokens(text)
        if batch and (len(batch) == max_batch or tokens + size > max_tokens):
            yield batch
            batch, tokens = [], 0
        batch.append(text)
        tokens += size
    if batch:
        yield batch


# The share of a model's per-text and per-request token limits the worker fills, by
# assistant.text.estimate_tokens: characters / 4 undercounts code and some languages.
ESTIMATE_MARGIN = 2 / 3


@dataclass(frozen=True)
class EmbeddingModel:
    """One embedding model: its dimensions by default and those it can produce
    (`min_dimensions` to `max_dimensions`, or `dimension_choices`; neither: its default
    alone), what it gives unasked (`native_dimensions`, where that is not the default the
    app asks for), the most tokens one text may have (`input_limit`), texts per request,
    tokens per request (0: no limit of its own), and its input price in USD per million
    tokens."""

    default_dimensions: int
    input_limit: int
    max_batch: int
    input_price: float
    min_dimensions: int = 0
    max_dimensions: int = 0
    dimension_choices: tuple[int, ...] = ()
    max_request_tokens: int = 0
    native_dimensions: int = 0

    def produces(self, dimensions: int) -> bool:
        if self.dimension_choices:
            return dimensions in self.dimension_choices
        if self.min_dimensions:
            return self.min_dimensions <= dimensions <= self.max_dimensions
        return dimensions == self.default_dimensions

    def asks(self, dimensions: int) -> bool:
        """Whether a request must name `dimensions` (the model gives another count unasked)."""
        adjustable = bool(self.dimension_choices or self.min_dimensions)
        return adjustable and dimensions != (self.native_dimensions or self.default_dimensions)

    def described(self) -> str:
        if self.dimension_choices:
            return ", ".join(f"{choice:,}" for choice in self.dimension_choices)
        if self.min_dimensions:
            return f"{self.min_dimensions:,} to {self.max_dimensions:,}"
        return f"{self.default_dimensions:,} only"

    @property
    def max_input_tokens(self) -> int:
        """What the worker may send as one text, by the estimate (ESTIMATE_MARGIN)."""
        return int(self.input_limit * ESTIMATE_MARGIN)

    @property
    def request_tokens(self) -> int:
        """What one request may carry, by the estimate (ESTIMATE_MARGIN)."""
        limit = self.max_request_tokens or self.input_limit * self.max_batch
        return int(limit * ESTIMATE_MARGIN)


def embedding_model(table: dict[str, EmbeddingModel], model: str) -> EmbeddingModel | None:
    """`model`'s row (exact, else its longest listed prefix: a dated release)."""
    name = longest_prefix(normalized_model(model), table)
    return table[name] if name is not None else None


def chosen_dimensions(provider: str, model: str, row: EmbeddingModel | None, written: int) -> int:
    """The dimensions the deployment embeds with: `written` (ASSISTANT_EMBEDDING_DIMENSIONS),
    or for 0 the model's default; ImproperlyConfigured, naming the settings, for a count
    the model cannot produce, or none for a model no table lists."""
    if row is None:
        if written:
            return written
        raise ImproperlyConfigured(
            f"ASSISTANT_EMBEDDING_MODEL {model!r} is no {provider} embedding model the app "
            "lists, so its dimensions are unknown: set ASSISTANT_EMBEDDING_DIMENSIONS to them"
        )
    dimensions = written or row.default_dimensions
    if dimensions > MAX_EMBEDDING_DIMENSIONS:
        raise ImproperlyConfigured(
            f"{model} gives {dimensions} dimensions by default, over the "
            f"{MAX_EMBEDDING_DIMENSIONS:,} an HNSW index takes: set "
            "ASSISTANT_EMBEDDING_DIMENSIONS to a count it can produce "
            f"({row.described()})"
        )
    if not row.produces(dimensions):
        raise ImproperlyConfigured(
            f"ASSISTANT_EMBEDDING_DIMENSIONS is {dimensions}, which {model} cannot produce "
            f"({row.described()})"
        )
    return dimensions
