"""Which provider summarizes, from settings and the SDKs' own environment variables;
and the summarize() entry point with its fallback. Which model embeds (`embedder()`,
ASSISTANT_EMBEDDINGS: docs/operations.rst, "Where embeddings come from"), with the same
keys, base URLs and client settings. A key is read, passed to its SDK's client, and
never logged."""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from django.core.exceptions import ImproperlyConfigured

from assistant.ops import telemetry
from assistant.providers.base import Provider, ProviderError, SummaryResult
from assistant.providers.cached_request import CachedRequest
from assistant.providers.catalog import (
    DEFAULT_EMBEDDING_MODELS,
    EMBEDDING_MODELS,
    telemetry_name,
)
from assistant.providers.embeddings import Embedder, chosen_dimensions, embedding_model
from assistant.providers.local import models as local_models
from assistant.providers.offline.provider import OfflineProvider
from assistant.providers.summary_prompt import validate_summary
from assistant.providers.voyage import models as voyage_models
from assistant.settings.app import SUMMARIZERS, app_setting

logger = logging.getLogger("assistant.providers")

# In the order "auto" looks for a key: each provider's settings key, then the
# environment variables its SDK reads itself.
KEYS = {
    "anthropic": ("ANTHROPIC_API_KEY", ("ANTHROPIC_API_KEY",)),
    "openai": ("OPENAI_API_KEY", ("OPENAI_API_KEY",)),
    "gemini": ("GEMINI_API_KEY", ("GOOGLE_API_KEY", "GEMINI_API_KEY")),
}
# A summarizer on another wire of a provider's: that provider's key, base URL and models.
SAME_KEYS = {"gemini_interactions": "gemini"}
PROVIDERS = (*KEYS, *SAME_KEYS, "offline")
# What ASSISTANT_SUMMARIZER may say (any case): its declaration's choices.
SUMMARIZER_CHOICES = SUMMARIZERS


def summarizer_setting() -> str:
    """ASSISTANT_SUMMARIZER, lower case ("auto" when blank); a name that is none of
    SUMMARIZER_CHOICES (e.g. "claude") raises ImproperlyConfigured rather than being
    taken for "auto" (its declaration, assistant/settings/app.py; `manage.py check`
    reports it as assistant.E001)."""
    return str(app_setting("ASSISTANT_SUMMARIZER"))


def key_owner(provider: str) -> str:
    """The provider whose key and settings (GEMINI_* for gemini_interactions) `provider`
    uses: itself, but for a summarizer on another of its wires (SAME_KEYS)."""
    return SAME_KEYS.get(provider, provider)


def settings_key(provider: str) -> str:
    return str(app_setting(KEYS[key_owner(provider)][0]) or "")


def environment_key(provider: str) -> str:
    variables = KEYS[key_owner(provider)][1]
    return next((os.environ[n] for n in variables if os.environ.get(n)), "")


def api_key(provider: str) -> str:
    """The provider's key: its Django setting, else its SDK's environment variable."""
    return settings_key(provider) or environment_key(provider)


def provider_name() -> str:
    """The summarizer's provider: the one ASSISTANT_SUMMARIZER names, or for "auto" the
    first whose key is found, settings' keys first (Anthropic, OpenAI, Gemini), then
    the SDKs' environment variables in the same order; offline when none is."""
    chosen = summarizer_setting()
    if chosen in PROVIDERS:
        return chosen
    for read in (settings_key, environment_key):
        found = next((name for name in KEYS if read(name)), None)
        if found is not None:
            return found
    return "offline"


@dataclass(frozen=True)
class ClientSettings:
    """What builds one provider's client: its settings (the key from the environment
    where the settings have none). Hashable, so a client is built once per value."""

    provider: str
    api_key: str
    base_url: str | None
    model: str
    chat_model: str
    timeout: float
    max_retries: int
    max_output_tokens: int
    # Gemini's SDK retries on its own schedule; the other SDKs have none of these.
    retry_initial_delay: float | None = None
    retry_max_delay: float | None = None

    def within(self, seconds: float | None) -> ClientSettings:
        """These settings with every call ended within `seconds`: one attempt, timed
        out at the smaller of `seconds` and the timeout; unchanged for None."""
        if seconds is None:
            return self
        return replace(self, timeout=min(self.timeout, seconds), max_retries=0)


def client_settings(provider: str) -> ClientSettings:
    prefix = key_owner(provider).upper()
    gemini = key_owner(provider) == "gemini"
    return ClientSettings(
        provider=provider,
        api_key=api_key(provider),
        base_url=app_setting(f"{prefix}_BASE_URL") or None,
        model=app_setting(f"{prefix}_SUMMARY_MODEL"),
        chat_model=app_setting(f"{prefix}_CHAT_MODEL"),
        timeout=float(app_setting("LLM_TIMEOUT_SECONDS")),
        max_retries=int(app_setting("LLM_MAX_RETRIES")),
        max_output_tokens=int(app_setting("SUMMARY_MAX_OUTPUT_TOKENS")),
        retry_initial_delay=float(app_setting("LLM_RETRY_INITIAL_DELAY")) if gemini else None,
        retry_max_delay=float(app_setting("LLM_RETRY_MAX_DELAY")) if gemini else None,
    )


def _client_class(provider: str) -> Callable[..., Provider]:
    # Imported here: an SDK costs seconds to import, and only the one in use is needed.
    if provider == "openai":
        from assistant.providers.openai.provider import OpenAIProvider

        return OpenAIProvider
    from assistant.providers.anthropic.provider import AnthropicProvider

    return AnthropicProvider


def _gemini_class(provider: str = "gemini") -> Callable[..., Provider]:
    from assistant.providers.gemini.provider import GeminiInteractionsProvider, GeminiProvider

    return GeminiInteractionsProvider if provider == "gemini_interactions" else GeminiProvider


def import_sdk() -> None:
    """Import the configured summarizer's SDK (seconds of CPU for some) and the
    embedder's, and build no client. A worker's main process calls it before it forks
    its pool, so a child, replaced after a crash however loaded the machine, starts with the SDK
    already in memory and builds its own client, with its own sockets, at first use
    (docs/operations.rst, "Faults")."""
    name = provider_name()
    if name in ("anthropic", "openai") and api_key(name):
        _client_class(name)
    elif key_owner(name) == "gemini" and api_key(name):
        _gemini_class(name)
    chosen = embedder_settings()
    if chosen is not None and embeddings_off_reason() is None:
        _embedder_class(chosen.provider)


def forget_clients() -> None:
    """Drop the clients built so far (summarizers' and embedders'): a forked process
    builds its own, since one built before the fork would share its parent's connections."""
    _client.cache_clear()
    _embedder.cache_clear()


# Clients are built once per distinct configuration, so a test that overrides settings
# gets a fresh client and production reuses one connection pool.
@functools.lru_cache(maxsize=8)
def _client(chosen: ClientSettings) -> Provider:
    common = {
        "api_key": chosen.api_key,
        "base_url": chosen.base_url,
        "model": chosen.model,
        "chat_model": chosen.chat_model,
        "timeout": chosen.timeout,
        "max_retries": chosen.max_retries,
        "max_output_tokens": chosen.max_output_tokens,
    }
    if key_owner(chosen.provider) == "gemini":
        return _gemini_class(chosen.provider)(
            **common,
            retry_initial_delay=chosen.retry_initial_delay,
            retry_max_delay=chosen.retry_max_delay,
        )
    return _client_class(chosen.provider)(**common)


def offline_reason() -> str | None:
    """Why the configured summarizer cannot run and the offline one answers
    instead (a provider, or "auto", with no key in the Django settings nor in
    its SDK's environment variables); None when it can run, or when "offline"
    is what was asked for."""
    chosen = summarizer_setting()
    if chosen == "offline":
        return None
    if key_owner(chosen) in KEYS:
        if api_key(chosen):
            return None
        places = " nor ".join(_key_places(chosen))
        return f"ASSISTANT_SUMMARIZER is {chosen!r} but neither {places} is set"
    if provider_name() != "offline":
        return None
    places = ", ".join(place for name in KEYS for place in _key_places(name))
    return f"ASSISTANT_SUMMARIZER is {chosen!r} and none of {places} is set"


def _key_places(provider: str) -> list[str]:
    setting, variables = KEYS[key_owner(provider)]
    return [f"settings.{setting}", *variables]


@functools.cache
def _warn_offline_once(reason: str) -> None:
    # Once per process (and per reason): the system check said it at start-up.
    logger.warning("summarizer_offline: %s; summaries come from the offline summarizer", reason)


def get_provider(name: str | None = None, *, within: float | None = None) -> Provider:
    """The configured provider (or the one named); offline when its key is
    missing, which the first time is logged as a warning. `within`: a call
    is bounded by these seconds, attempt and retries together (the chat
    path's deadline): one attempt, timed out at the smaller of `within` and
    LLM_TIMEOUT_SECONDS. Built once per configuration, so the SDK is imported
    and the client ready when this returns."""
    configured = name is None
    name = name or provider_name()
    if key_owner(name) in KEYS and api_key(name):
        return _client(client_settings(name).within(within))
    if configured and (reason := offline_reason()) is not None:
        _warn_offline_once(reason)
    return OfflineProvider()


def summarize(
    transcript: str,
    previous_summary: str | None = None,
    *,
    instructions: str | None = None,
    provider: Provider | None = None,
) -> SummaryResult:
    """A validated summary from the configured provider; on failure (after the SDK's own
    retries) or a rejected summary, the offline summarizer's, unless fallback is off."""
    provider = provider or get_provider()
    try:
        with telemetry.summarizer_call(
            telemetry_name(provider.name, provider.model), provider.model
        ) as span:
            result = provider.summarize(
                transcript, previous_summary=previous_summary, instructions=instructions
            )
            telemetry.summarizer_usage(
                span, telemetry_name(provider.name, provider.model), provider.model, result.usage
            )
            validate_summary(result.text)
        return result
    except ProviderError as error:
        _log_failure(provider, error, provider.model)
        if not app_setting("ASSISTANT_SUMMARY_FALLBACK") or isinstance(provider, OfflineProvider):
            raise
    return _offline(provider, transcript, previous_summary)


def summarize_cached(request: CachedRequest, *, provider: Provider) -> SummaryResult:
    """A validated summary from `provider`'s chat model, asked with the conversation's
    own cached request (`CachedRequest`); on failure or a rejected summary, the offline
    summarizer's of `request.transcript`, unless fallback is off."""
    try:
        with telemetry.summarizer_call(
            telemetry_name(provider.name, provider.chat_model), provider.chat_model
        ) as span:
            result = provider.summarize_cached(request)
            telemetry.summarizer_usage(
                span,
                telemetry_name(provider.name, provider.chat_model),
                provider.chat_model,
                result.usage,
            )
            validate_summary(result.text)
        return result
    except ProviderError as error:
        _log_failure(provider, error, provider.chat_model)
        if not app_setting("ASSISTANT_SUMMARY_FALLBACK"):
            raise
    return _offline(provider, request.transcript, request.previous_summary)


def _log_failure(provider: Provider, error: ProviderError, model: str) -> None:
    # Never the key or any message content: provider, model, class, status only.
    cause = error.__cause__
    logger.warning(
        "summarizer call failed: provider=%s model=%s error=%s cause=%s status=%s reason=%s",
        provider.name,
        model,
        type(error).__name__,
        type(cause).__name__ if cause else None,
        error.status,
        getattr(error, "reason", None),
    )


def _offline(provider: Provider, transcript: str, previous_summary: str | None) -> SummaryResult:
    offline = OfflineProvider()
    telemetry.summarizer_fallback(telemetry_name(provider.name, provider.model), provider.model)
    with telemetry.summarizer_call(offline.name, offline.model) as span:
        result = offline.summarize(transcript, previous_summary=previous_summary)
        telemetry.summarizer_usage(span, offline.name, offline.model, result.usage)
    return SummaryResult(
        text=validate_summary(result.text),
        usage=result.usage,
        model=result.model,
        provider=result.provider,
        fallback=True,
    )


# --- embeddings ------------------------------------------------------------------------

# The embedding providers whose key is not a summarizer's: its settings key, then the
# environment variable its SDK reads itself. OpenAI and Gemini use KEYS.
EMBEDDING_KEYS = {voyage_models.NAME: ("VOYAGE_API_KEY", ("VOYAGE_API_KEY",))}
# What each optional provider needs installed: the `voyage` and `local-embeddings` extras.
EMBEDDING_PACKAGES = {
    voyage_models.NAME: (("voyageai",), "voyage"),
    local_models.NAME: (
        (local_models.MODEL_PACKAGE, local_models.RUNTIME_PACKAGE),
        "local-embeddings",
    ),
}


@dataclass(frozen=True)
class EmbedderSettings:
    """What builds the deployment's embedder; hashable, so it is built once per value."""

    provider: str
    model: str
    dimensions: int
    api_key: str
    base_url: str | None
    timeout: float
    max_retries: int
    retry_initial_delay: float
    retry_max_delay: float


def embedding_provider() -> str:
    """ASSISTANT_EMBEDDINGS, lower case ("off" when blank)."""
    return str(app_setting("ASSISTANT_EMBEDDINGS"))


def embedding_key(provider: str) -> str:
    """The embedding provider's key: its Django setting, else its SDK's environment
    variable ("" for the local model, which needs none)."""
    if provider in KEYS:
        return api_key(provider)
    if provider not in EMBEDDING_KEYS:
        return ""
    setting, variables = EMBEDDING_KEYS[provider]
    written = str(app_setting(setting) or "")
    return written or next((os.environ[n] for n in variables if os.environ.get(n)), "")


def embedder_settings() -> EmbedderSettings | None:
    """The configured embedding model and its client settings; None when embeddings are
    off. ImproperlyConfigured, naming the settings, for a model or a dimension count the
    app refuses (`manage.py check` reports it, assistant.E002)."""
    provider = embedding_provider()
    if provider == "off":
        return None
    table = EMBEDDING_MODELS[provider]
    model = str(app_setting("ASSISTANT_EMBEDDING_MODEL") or DEFAULT_EMBEDDING_MODELS[provider])
    row = embedding_model(table, model)
    if row is None and provider == local_models.NAME:
        raise ImproperlyConfigured(
            f"ASSISTANT_EMBEDDING_MODEL is {model!r}, but the local embedder runs "
            f"{local_models.DEFAULT_EMBEDDING_MODEL} only (leave it blank)"
        )
    dimensions = chosen_dimensions(
        provider, model, row, int(app_setting("ASSISTANT_EMBEDDING_DIMENSIONS"))
    )
    local = provider == local_models.NAME
    base_url = None if local else app_setting(f"{provider.upper()}_BASE_URL")
    return EmbedderSettings(
        provider=provider,
        model=model,
        dimensions=dimensions,
        api_key=embedding_key(provider),
        base_url=base_url or None,
        timeout=float(app_setting("LLM_TIMEOUT_SECONDS")),
        max_retries=int(app_setting("LLM_MAX_RETRIES")),
        retry_initial_delay=float(app_setting("LLM_RETRY_INITIAL_DELAY")),
        retry_max_delay=float(app_setting("LLM_RETRY_MAX_DELAY")),
    )


def embeddings_off_reason() -> str | None:
    """Why the configured embedding model cannot run, so search is full-text alone: its
    provider's key is missing, or the extra it needs is not installed; None when it can
    run, or when embeddings are off as asked. Settings the app refuses raise
    ImproperlyConfigured (embedder_settings)."""
    chosen = embedder_settings()
    return None if chosen is None else _off_reason(chosen)


def _off_reason(chosen: EmbedderSettings) -> str | None:
    if chosen.provider in EMBEDDING_PACKAGES:
        packages, extra = EMBEDDING_PACKAGES[chosen.provider]
        missing = [name for name in packages if importlib.util.find_spec(name) is None]
        if missing:
            return (
                f"ASSISTANT_EMBEDDINGS is {chosen.provider!r} but {', '.join(missing)} is not "
                f"installed (pip install django-assistant-compaction[{extra}])"
            )
    if chosen.provider != local_models.NAME and not chosen.api_key:
        setting, variables = (
            KEYS[chosen.provider] if chosen.provider in KEYS else EMBEDDING_KEYS[chosen.provider]
        )
        places = " nor ".join([f"settings.{setting}", *variables])
        return f"ASSISTANT_EMBEDDINGS is {chosen.provider!r} but neither {places} is set"
    return None


def _embedder_class(provider: str) -> Callable[..., Embedder]:
    # Imported when chosen: an SDK costs seconds to import, and voyageai and the local
    # model (torch) are optional extras, installed only where they are used.
    if provider == "openai":
        from assistant.providers.openai.embeddings import OpenAIEmbedder

        return OpenAIEmbedder
    if provider == "gemini":
        from assistant.providers.gemini.embeddings import GeminiEmbedder

        return GeminiEmbedder
    if provider == voyage_models.NAME:
        from assistant.providers.voyage.embeddings import VoyageEmbedder

        return VoyageEmbedder
    from assistant.providers.local.embeddings import LocalEmbedder

    return LocalEmbedder


@functools.lru_cache(maxsize=4)
def _embedder(chosen: EmbedderSettings) -> Embedder:
    build = _embedder_class(chosen.provider)
    if chosen.provider == local_models.NAME:
        return build(model=chosen.model, dimensions=chosen.dimensions)
    common = {
        "api_key": chosen.api_key,
        "base_url": chosen.base_url,
        "model": chosen.model,
        "dimensions": chosen.dimensions,
        "timeout": chosen.timeout,
        "max_retries": chosen.max_retries,
    }
    if chosen.provider == "gemini":
        return build(
            **common,
            retry_initial_delay=chosen.retry_initial_delay,
            retry_max_delay=chosen.retry_max_delay,
        )
    return build(**common)


@functools.cache
def _warn_embeddings_off_once(reason: str) -> None:
    # Once per process (and per reason): the system check said it at start-up.
    logger.warning("embeddings_off: %s; search is full-text alone", reason)


def embedder() -> Embedder | None:
    """The deployment's one embedding model, from settings (ASSISTANT_EMBEDDINGS,
    ASSISTANT_EMBEDDING_MODEL, ASSISTANT_EMBEDDING_DIMENSIONS); None when embeddings are
    off, or when the chosen provider cannot run (no key, or its extra not installed:
    logged once as a warning). Built once per configuration; ImproperlyConfigured for
    settings the app refuses."""
    chosen = embedder_settings()
    if chosen is None:
        return None
    reason = _off_reason(chosen)
    if reason is not None:
        _warn_embeddings_off_once(reason)
        return None
    return _embedder(chosen)
