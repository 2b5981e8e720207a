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
from assistant.models import Conversation, Message
from assistant.provider_compaction import record_event
from assistant.providers import CHAT_PROVIDERS, read_response
from assistant.window import refresh_size


def record_response(
    conversation: Conversation, response: Any, *, provider: str = "", **fields: Any
) -> Message:
    """Store the assistant message of a model call: its text, tool calls, thinking
    (Anthropic's thinking blocks, the Responses API's reasoning items), the usage
    (input, cache read, cache write, output), and who answered (`Message.provider`,
    `Message.model`: the model the response names). `response`: the anthropic SDK's
    `Message` (direct, Bedrock or Vertex, or a stream's final message), google-genai's
    `GenerateContentResponse`, the openai SDK's `ChatCompletion` (also from any
    OpenAI-compatible server) or Responses API `Response`, or the app's own
    `ChatResult`. The provider's own compaction in it (Anthropic's compaction block,
    the Responses API's compaction item) is stored verbatim with the message, with its
    event and price (docs/provider-compaction.rst). `provider` names the provider
    called (chat_step passes its own) where the response cannot say. `fields` go to
    `add_message` as they are (e.g. metadata) and win over what the response says.
    Anything else raises ValidationError (code "unknown_response") and stores nothing."""
    result = read_response(response)
    if result is None:
        raise ValidationError(
            f"Cannot record a {type(response).__name__}: expected a response of one of the "
            f"providers ({', '.join(CHAT_PROVIDERS)}) or a ChatResult.",
            code="unknown_response",
        )
    recorded: dict[str, Any] = {
        "tool_calls": result.tool_calls or None,
        "blocks": result.blocks or None,
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "cache_read_tokens": result.usage.cache_read_tokens,
        "cache_write_tokens": result.usage.cache_write_tokens,
        "provider": provider or result.provider,
        "model": result.model,
        "provider_compaction": result.compaction,
    }
    recorded.update(fields)
    before = conversation.context_tokens or 0
    message = add_message(conversation, Message.Role.ASSISTANT, result.text, **recorded)
    if message.provider_compaction:
        record_event(message, message.provider_compaction, model=result.model, before=before)
        refresh_size(conversation.pk)
    return message
