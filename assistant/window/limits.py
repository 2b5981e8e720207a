"""The figures a conversation's context size is compared with: the trigger
of a window shift, the soft watermark before it, the chat model's window, and the
hard ceiling (CONTEXT_CEILING_FRACTION of the answering model's window less its
output cap). The one place the size a context may take is computed: the trigger
below the ceiling (`ceilinged`), the pre-send bound (`Limits.bound`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from assistant.models import Message
from assistant.providers import (
    ANTHROPIC,
    CHAT_PROVIDERS,
    configured_chat_model,
    model_context_window,
    provider_name,
    send_bound,
    smallest_send_bound,
)
from assistant.settings.conf import CompactionConfig, compaction_config


@dataclass(frozen=True)
class Limits:
    """The figures a context size is compared with."""

    trigger: int  # CONTEXT_TOKEN_THRESHOLD, or the ceiling when that is lower
    soft: int
    window: int
    model: str
    # The largest request sent to the model: CONTEXT_CEILING_FRACTION of its window
    # less its output cap (the pre-send bound, docs/chat-loop.rst "Overflow recovery").
    bound: int = 0

    def level(self, tokens: int) -> str:
        if tokens >= self.window:
            return "over-window"
        if tokens >= self.trigger:
            return "past-trigger"
        if tokens >= self.soft:
            return "near"
        return "ok"


def current_limits(conversation_id: int | None = None) -> Limits:
    """The figures for a conversation (its newest answer's model: who will read the next
    request), or for a new one (the configured summarizer's provider's chat model)."""
    return limits_for(*answered_by(conversation_id))


def limits_for(provider: str, model: str) -> Limits:
    """The figures for a conversation whose next request `model` reads (of `provider`);
    with no model, the configured summarizer's provider's chat model."""
    provider, model = answering_model(provider, model)
    config = ceilinged(compaction_config(), provider, model)
    return Limits(
        trigger=config.CONTEXT_TOKEN_THRESHOLD,
        soft=int(config.SOFT_WATERMARK * config.CONTEXT_TOKEN_THRESHOLD),
        window=model_context_window(model, provider),
        model=model,
        bound=context_ceiling(config, provider, model),
    )


def answering_model(provider: str, model: str) -> tuple[str, str]:
    """(provider, model) who reads the next request: the newest answer's, else (no
    model) the configured summarizer's provider's chat model."""
    if model:
        return provider, model
    provider = provider_name()
    return provider, configured_chat_model(provider)


def context_ceiling(config: CompactionConfig, provider: str, model: str) -> int:
    """The hard ceiling of a request `model` reads: CONTEXT_CEILING_FRACTION of its
    window less its output cap (catalog.send_bound)."""
    return math.floor(config.CONTEXT_CEILING_FRACTION * send_bound(model, provider))


def smallest_ceiling() -> int:
    """The smallest ceiling of any model: a request no larger is under every one."""
    return math.floor(compaction_config().CONTEXT_CEILING_FRACTION * smallest_send_bound())


def ceilinged(config: CompactionConfig, provider: str, model: str) -> CompactionConfig:
    """`config` for a conversation `model` answers: when the model's ceiling is below
    CONTEXT_TOKEN_THRESHOLD, the trigger is the ceiling, and MAX_RECENT_TOKENS and
    PINNED_MAX_TOKENS shrink in the same proportion (so the verbatim window and the pins
    keep their share of what a request may take); else `config` unchanged."""
    provider, model = answering_model(provider, model)
    ceiling = context_ceiling(config, provider, model)
    trigger = config.CONTEXT_TOKEN_THRESHOLD
    if ceiling >= trigger:
        return config
    ceiling = max(ceiling, 1)
    return replace(
        config,
        CONTEXT_TOKEN_THRESHOLD=ceiling,
        MAX_RECENT_TOKENS=max(1, config.MAX_RECENT_TOKENS * ceiling // trigger),
        PINNED_MAX_TOKENS=config.PINNED_MAX_TOKENS * ceiling // trigger,
    )


def conversation_config(
    conversation_id: int | None, config: CompactionConfig | None = None
) -> CompactionConfig:
    """The settings a conversation's compaction runs under: `config` (the settings now
    unless given) under its answering model's ceiling (`ceilinged`)."""
    return ceilinged(config or compaction_config(), *answered_by(conversation_id))


def request_shape(conversation_id: int) -> str:
    """The provider whose request shape the conversation's next request takes: its
    newest answer's, else the configured summarizer's, else Anthropic's."""
    provider = answered_by(conversation_id)[0] or provider_name()
    return provider if provider in CHAT_PROVIDERS else ANTHROPIC.name


def answered_by(conversation_id: int | None) -> tuple[str, str]:
    """(provider, model) of the conversation's newest answer that names its model."""
    if conversation_id is None:
        return "", ""
    newest = (
        Message.objects.filter(conversation_id=conversation_id, role=Message.Role.ASSISTANT)
        .exclude(model="")
        .order_by("-id")
        .values_list("provider", "model")
        .first()
    )
    return newest or ("", "")


# The key of a chat message's metadata that names the model that wrote it.
MODEL_KEY = "model"


def chat_model(metadata: dict | None, model: str = "") -> str:
    """The model of a recorded chat call: the one that answered, else the one its metadata
    names, else the configured one."""
    if model:
        return model
    named = (metadata or {}).get(MODEL_KEY)
    return named if isinstance(named, str) and named else current_limits().model
