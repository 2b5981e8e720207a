"""Recording a provider's response on a conversation, as the SDK returned it.

The usage goes in whole, as the provider reports it: with prompt caching on,
Anthropic's `input_tokens` is only the part after the last cache breakpoint
(the rest is `cache_read_input_tokens` and `cache_creation_input_tokens`),
and the context size the pre-call hook decides on is their sum.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError

from assistant.history import (
    EXPECTED_KEY,
    add_message,
    cache_expectation,
    jsonb_equal,
    record_cache_break,
)
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
    The cache reads are checked against the prefix the request expected to read
    (assistant.history.cache_check): a shortfall is recorded as a `cache_break` event.
    Anything else raises ValidationError (code "unknown_response") and stores nothing.
    The model's tool-call arguments are stored even where add_message would refuse a
    host's number jsonb gives back changed (1e16, -0.0): in the form that reads back
    equal (`jsonb_equal`), and the returned message still carries them as the model
    sent them, so a paid answer is never lost to its spelling of a number."""
    result = read_response(response)
    if result is None:
        raise ValidationError(
            f"Cannot record a {type(response).__name__}: expected a response of one of the "
            f"providers ({', '.join(CHAT_PROVIDERS)}) or a ChatResult.",
            code="unknown_response",
        )
    sent_calls = [_parsed(call) for call in result.tool_calls]
    recorded: dict[str, Any] = {
        "tool_calls": [
            {**call, "arguments": jsonb_equal(call.get("arguments"))} for call in sent_calls
        ]
        or None,
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
    expected = cache_expectation(conversation.pk, recorded["provider"], recorded["model"])
    if expected is not None and isinstance(recorded.get("metadata") or {}, dict):
        recorded["metadata"] = {**(recorded.get("metadata") or {}), EXPECTED_KEY: expected}
    before = conversation.context_tokens or 0
    message = add_message(conversation, Message.Role.ASSISTANT, result.text, **recorded)
    if message.tool_calls and "tool_calls" not in fields:
        _as_sent(message, sent_calls)
    if expected is not None:
        record_cache_break(message, expected, result.cache_diagnosis)
    if message.provider_compaction:
        record_event(message, message.provider_compaction, model=result.model, before=before)
        refresh_size(conversation.pk)
    return message


def _parsed(call: dict[str, Any]) -> dict[str, Any]:
    """`call` with its arguments as an object where they are a JSON string (OpenAI's),
    parsed as add_message would; one that does not parse is left for it to refuse."""
    arguments = call.get("arguments")
    if isinstance(arguments, str) and arguments.strip():
        try:
            return {**call, "arguments": json.loads(arguments)}
        except (ValueError, RecursionError):
            pass
    return call


def _as_sent(message: Message, sent: list[dict[str, Any]]) -> None:
    """The stored message's calls with the model's arguments as it sent them (equal in
    value to the stored ones), for the host's Step.tool_calls."""
    for call, original in zip(message.tool_calls or [], sent, strict=True):
        if isinstance(original.get("arguments"), dict):
            call["arguments"] = original["arguments"]
