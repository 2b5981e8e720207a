"""The figures a conversation's context size is compared with: the trigger
of a window shift, the soft watermark before it, and the chat model's window."""

from __future__ import annotations

from dataclasses import dataclass

from assistant.app_settings import app_setting
from assistant.conf import compaction_config
from assistant.llm.overflow import model_context_window
from assistant.llm.registry import provider_name


@dataclass(frozen=True)
class Limits:
    """The figures a context size is compared with."""

    trigger: int
    soft: int
    window: int
    model: str

    def level(self, tokens: int) -> str:
        if tokens >= self.window:
            return "over-window"
        if tokens >= self.trigger:
            return "past-trigger"
        if tokens >= self.soft:
            return "near"
        return "ok"


def current_limits() -> Limits:
    config = compaction_config()
    model = app_setting(
        "GEMINI_CHAT_MODEL" if provider_name() == "gemini" else "ANTHROPIC_CHAT_MODEL"
    )
    return Limits(
        trigger=config.CONTEXT_TOKEN_THRESHOLD,
        soft=int(config.SOFT_WATERMARK * config.CONTEXT_TOKEN_THRESHOLD),
        window=model_context_window(model),
        model=model,
    )
