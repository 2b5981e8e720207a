"""Recording a provider's response on a conversation, as the SDK returned it.

The usage goes in whole, as the provider reports it: with prompt caching on,
Anthropic's `input_tokens` is only the part after the last cache breakpoint
(the rest is `cache_read_input_tokens` and `cache_creation_input_tokens`),
and the context size the pre-call hook decides on is their sum.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from assistant.history import add_message
from assistant.llm.responses import chat_result
from assistant.models import Conversation, Message


def record_response(conversation: Conversation, response: Any, **fields: Any) -> Message:
    """Store the assistant message of a model call: its text, tool calls, thinking and
    redacted_thinking blocks, and the usage (input, cache read, cache write, output).
    `response`: the anthropic SDK's `Message` (or a stream's final message), google-genai's
    `GenerateContentResponse`, or the app's own `ChatResult`. `fields` go to
    `add_message` as they are (e.g. metadata) and win over what the response says.
    Anything else raises ValidationError (code "unknown_response") and stores nothing."""
    result = chat_result(response)
    if result is None:
        raise ValidationError(
            f"Cannot record a {type(response).__name__}: expected an anthropic Message or a "
            "google-genai GenerateContentResponse.",
            code="unknown_response",
        )
    recorded: dict[str, Any] = {
        "tool_calls": result.tool_calls or None,
        "blocks": result.blocks or None,
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "cache_read_tokens": result.usage.cache_read_tokens,
        "cache_write_tokens": result.usage.cache_write_tokens,
    }
    recorded.update(fields)
    return add_message(conversation, Message.Role.ASSISTANT, result.text, **recorded)
