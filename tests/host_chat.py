"""One chat call as a host makes it: the request the app builds for the provider's
wire (`Wire.request`, what `model_request` returns), sent by that provider's real
SDK client to wherever the settings point (the fake server in tests), and the
answer read back by the same wire (`Wire.result`)."""

from __future__ import annotations

from typing import Any

import anthropic
from google import genai
from google.genai import types

from assistant.providers.base import ChatResult
from assistant.providers.catalog import wire_of
from assistant.settings.app import app_setting


def host_chat(
    name: str,
    system: str,
    summaries: list[str],
    messages: list[dict[str, Any]],
    *,
    max_tokens: int,
    tools: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> ChatResult:
    """`extra`: more keyword arguments of the SDK's call (Anthropic's `thinking`)."""
    chosen = wire_of(name)
    request = chosen.request(system, summaries, messages, tools)
    if name == "anthropic":
        client = anthropic.Anthropic(
            api_key=app_setting("ANTHROPIC_API_KEY"),
            base_url=app_setting("ANTHROPIC_BASE_URL") or None,
            max_retries=0,
        )
        response = client.messages.create(
            model=app_setting("ANTHROPIC_CHAT_MODEL"), max_tokens=max_tokens, **request, **extra
        )
    else:
        options = types.HttpOptions(base_url=app_setting("GEMINI_BASE_URL") or None)
        client = genai.Client(api_key=app_setting("GEMINI_API_KEY"), http_options=options)
        config = {**request.pop("config", {}), "max_output_tokens": max_tokens}
        response = client.models.generate_content(
            model=app_setting("GEMINI_CHAT_MODEL"), config=config, **request, **extra
        )
    return chosen.result(response)
