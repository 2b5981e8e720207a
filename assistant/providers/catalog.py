"""The chat providers by name, and their models' windows and prices
(docs/providers.rst); the embedding models by provider, with their input prices
(docs/operations.rst, "Where embeddings come from"). No SDK is imported here or by
the wires.

A model no table lists gets ASSISTANT_DEFAULT_CONTEXT_WINDOW and no price (its calls
are counted at zero and listed as unpriced); the system check assistant.W002 warns
when the configured chat models are among them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from assistant.providers.anthropic.wire import ANTHROPIC
from assistant.providers.base import ChatResult
from assistant.providers.embeddings import EmbeddingModel
from assistant.providers.gemini import wire as gemini_wire
from assistant.providers.gemini.interactions import GEMINI_INTERACTIONS
from assistant.providers.gemini.wire import GEMINI
from assistant.providers.local import models as local_models
from assistant.providers.offline.provider import OFFLINE_MODEL
from assistant.providers.openai import wire as openai_wire
from assistant.providers.openai.responses_api import OPENAI_RESPONSES
from assistant.providers.openai.wire import OPENAI
from assistant.providers.voyage import models as voyage_models
from assistant.providers.wire import ModelInfo, Wire, longest_prefix, normalized_model
from assistant.settings.app import app_setting
from assistant.text import MediaRates

WIRES: dict[str, Wire] = {
    wire.name: wire for wire in (ANTHROPIC, GEMINI, GEMINI_INTERACTIONS, OPENAI, OPENAI_RESPONSES)
}
CHAT_PROVIDERS = tuple(WIRES)
DEFAULT_PROVIDER = ANTHROPIC.name  # chat_step's, kept from before there were others
# The models the settings name, each with its provider's table.
MODEL_SETTINGS = {
    "ANTHROPIC_CHAT_MODEL": "anthropic",
    "ANTHROPIC_SUMMARY_MODEL": "anthropic",
    "OPENAI_CHAT_MODEL": "openai",
    "OPENAI_SUMMARY_MODEL": "openai",
    "GEMINI_CHAT_MODEL": "gemini",
    "GEMINI_SUMMARY_MODEL": "gemini",
}
# The chat model each provider's settings name, for a conversation with no answer yet.
CHAT_MODEL_SETTINGS = {
    "anthropic": "ANTHROPIC_CHAT_MODEL",
    "gemini": "GEMINI_CHAT_MODEL",
    "openai": "OPENAI_CHAT_MODEL",
    "openai_responses": "OPENAI_CHAT_MODEL",
    "gemini_interactions": "GEMINI_CHAT_MODEL",
}

# The embedding models by provider (ASSISTANT_EMBEDDINGS), and each provider's default.
EMBEDDING_MODELS: dict[str, dict[str, EmbeddingModel]] = {
    OPENAI.name: openai_wire.EMBEDDING_MODELS,
    GEMINI.name: gemini_wire.EMBEDDING_MODELS,
    voyage_models.NAME: voyage_models.EMBEDDING_MODELS,
    local_models.NAME: local_models.EMBEDDING_MODELS,
}
DEFAULT_EMBEDDING_MODELS = {
    OPENAI.name: openai_wire.DEFAULT_EMBEDDING_MODEL,
    GEMINI.name: gemini_wire.DEFAULT_EMBEDDING_MODEL,
    voyage_models.NAME: voyage_models.DEFAULT_EMBEDDING_MODEL,
    local_models.NAME: local_models.DEFAULT_EMBEDDING_MODEL,
}


def wire_of(provider: str) -> Wire:
    """The named provider's wire; an unknown name raises ValidationError (unknown_provider)."""
    found = WIRES.get(provider) if isinstance(provider, str) else None
    if found is None:
        raise ValidationError(
            f"Unknown provider {provider!r}: expected one of {', '.join(CHAT_PROVIDERS)}.",
            code="unknown_provider",
        )
    return found


def media_rates(provider: str) -> MediaRates:
    """The named provider's media rates; Anthropic's for the offline summarizer."""
    return WIRES.get(provider, ANTHROPIC).media


def read_response(response: Any) -> ChatResult | None:
    """Any provider's response as a ChatResult (one already is); None for anything else."""
    if isinstance(response, ChatResult):
        return response
    for candidate in WIRES.values():
        if candidate.recognizes(response):
            return candidate.result(response)
    return None


def model_info(model: str, provider: str = "") -> ModelInfo | None:
    """`model`'s entry in its provider's table (any provider's, when not named)."""
    wires = [WIRES[provider]] if provider in WIRES else list(WIRES.values())
    for candidate in wires:
        info = candidate.model_info(model)
        if info is not None:
            return info
    return None


def listed_name(model: str) -> str:
    """The name `model` is listed under: a platform's id (Bedrock, Vertex) reduced to
    the vendor's model name by its provider's wire; any other as it is."""
    for candidate in WIRES.values():
        if candidate.model_info(model) is not None:
            return candidate.table_name(model)
    return normalized_model(model)


def model_context_window(model: str, provider: str = "") -> int:
    info = model_info(model, provider)
    if info is None:
        return int(app_setting("ASSISTANT_DEFAULT_CONTEXT_WINDOW"))
    return info.window


def send_bound(model: str, provider: str = "") -> int:
    """The largest request `model` can take: its window less its output cap (the
    window alone for a model with no listed cap). The one pre-send bound
    (docs/chat-loop.rst, "Overflow recovery")."""
    info = model_info(model, provider)
    if info is None:
        return int(app_setting("ASSISTANT_DEFAULT_CONTEXT_WINDOW"))
    return info.window - info.max_output


def smallest_send_bound() -> int:
    """The smallest send bound of any model: a request no larger fits every one, so
    the pre-send check asks no query for it."""
    bounds = [info.window - info.max_output for w in WIRES.values() for info in w.models.values()]
    return min([*bounds, int(app_setting("ASSISTANT_DEFAULT_CONTEXT_WINDOW"))])


def listed_prices() -> dict[str, dict[str, float]]:
    """Every listed model's prices (USD per million tokens), by its table name."""
    free = {"input": 0.0, "output": 0.0, "cache_read": 0.0, "cache_write": 0.0}
    prices: dict[str, dict[str, float]] = {OFFLINE_MODEL: free}
    for candidate in WIRES.values():
        for name, info in candidate.models.items():
            row = info.prices()
            if row is not None:
                prices[name] = row
    for table in EMBEDDING_MODELS.values():
        for name, model in table.items():
            prices[name] = {**free, "input": model.input_price}
    return prices


def telemetry_name(provider: str, model: str = "") -> str:
    """gen_ai.provider.name of a call: the wire's, else the name as given (offline)."""
    found = WIRES.get(provider)
    return found.telemetry_name(model) if found else provider


def configured_chat_model(provider: str) -> str:
    return str(app_setting(CHAT_MODEL_SETTINGS.get(provider, "ANTHROPIC_CHAT_MODEL")))


def overflow_verdict(error: BaseException) -> bool | None:
    """What the providers' own errors say for sure of an overflow; None: ask the wording."""
    for candidate in WIRES.values():
        verdict = candidate.overflow(error)
        if verdict is not None:
            return verdict
    return None


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float


def model_prices() -> dict[str, Price]:
    """The providers' prices, with the host's ASSISTANT_MODEL_PRICES over them."""
    table = {**listed_prices(), **app_setting("ASSISTANT_MODEL_PRICES")}
    return {model: Price(**{k: float(v) for k, v in row.items()}) for model, row in table.items()}


def price_of(model: str, prices: dict[str, Price] | None = None) -> Price | None:
    """The model's price: its own entry, else the longest listed prefix of its
    name (a dated release; a Bedrock or Vertex id as the vendor's name), else None."""
    prices = model_prices() if prices is None else prices
    for name in dict.fromkeys((normalized_model(model), listed_name(model))):
        key = longest_prefix(name, prices)
        if key is not None:
            return prices[key]
    return None
