"""The figures a conversation's context size is compared with: the trigger
of a window shift, the soft watermark before it, and the chat model's window."""

from __future__ import annotations

from dataclasses import dataclass

from assistant.models import Message
from assistant.providers import (
    ANTHROPIC,
    CHAT_PROVIDERS,
    configured_chat_model,
    model_context_window,
    provider_name,
    send_bound,
)
from assistant.settings.conf import compaction_config


@dataclass(frozen=True)
class Limits:
    """The figures a context size is compared with."""

    trigger: int
    soft: int
    window: int
    model: str
    # The largest request the model can take: its window less its output cap.
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
    config = compaction_config()
    if not model:
        provider = provider_name()
        model = configured_chat_model(provider)
    return Limits(
        trigger=config.CONTEXT_TOKEN_THRESHOLD,
        soft=int(config.SOFT_WATERMARK * config.CONTEXT_TOKEN_THRESHOLD),
        window=model_context_window(model, provider),
        model=model,
        bound=send_bound(model, provider),
    )


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
