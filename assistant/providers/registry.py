"""Which provider summarizes, from settings and the SDKs' own environment variables;
and the summarize() entry point with its fallback. A key is read, passed to its SDK's
client, and never logged."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from assistant.ops import telemetry
from assistant.providers.base import Provider, ProviderError, SummaryResult
from assistant.providers.cached_request import CachedRequest
from assistant.providers.catalog import telemetry_name
from assistant.providers.offline.provider import OfflineProvider
from assistant.providers.summary_prompt import validate_summary
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
    """Import the configured summarizer's SDK (seconds of CPU for some) and build
    no client. A worker's main process calls it before it forks its pool, so a
    child, replaced after a crash however loaded the machine, starts with the SDK
    already in memory and builds its own client, with its own sockets, at first use
    (docs/operations.rst, "Faults")."""
    name = provider_name()
    if name in ("anthropic", "openai") and api_key(name):
        _client_class(name)
    elif key_owner(name) == "gemini" and api_key(name):
        _gemini_class(name)


def forget_clients() -> None:
    """Drop the clients built so far: a forked process builds its own, since one
    built before the fork would share its parent's connections."""
    _client.cache_clear()


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
