"""Thinking, image and document blocks end to end: stored verbatim, sent in each provider's
exact shapes through the real SDKs to the fake server (which refuses what the real APIs
refuse, in their words), compacted once the exchange is over, restorable."""

from __future__ import annotations

import re
from datetime import timedelta

import anthropic
import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from google import genai
from google.genai import errors as genai_errors

from assistant.models import CompactionEvent, Conversation, Message
from assistant.post_exchange.pipeline import process_exchange
from assistant.precall.hook import ensure_context_summary
from assistant.providers import get_provider
from assistant.providers.anthropic.wire import anthropic_image_tokens
from assistant.providers.gemini.wire import gemini_image_tokens
from assistant.services import add_message, build_context
from assistant.summary.generate import summarize_messages
from assistant.testing.content import (
    ANTHROPIC_THINKING_REQUIRED,
    GEMINI_BAD_IMAGE,
    decoded,
    thinking_block,
)
from assistant.text.tokens import estimate_tokens
from assistant.tool_results.compaction import compact_tool_results, restore_originals
from tests.fake_llm import ok
from tests.host_chat import host_chat
from tests.media import b64, image_block, jpeg, pdf, pdf_block, png

pytestmark = pytest.mark.django_db

THINK = {"type": "enabled", "budget_tokens": 1024}
FETCH = {"name": "fetch_url", "description": "Fetch a URL", "parameters": {"type": "object"}}
CALL = {"id": "toolu_1", "name": "fetch_url", "arguments": {"url": "https://example.com/a.css"}}
URL_IMAGE = {"type": "image", "source": {"type": "url", "url": "https://example.com/logo.png"}}


@pytest.fixture
def conversation() -> Conversation:
    return Conversation.objects.create(title="Broken page")


def chat(provider, conversation, **options):
    context = build_context(conversation)
    return host_chat(
        provider.name,
        context.system,
        context.summaries,
        context.messages,
        max_tokens=2048,
        **options,
    )


def agent_turn(fake_llm, settings, conversation, *, keep_thinking: bool = True):
    """A user message with a screenshot; the model thinks and calls a tool; the tool
    answers with text and an image. Returns the provider and the stored call's thinking."""
    fake_llm.use_anthropic(settings)
    provider = get_provider("anthropic")
    add_message(
        conversation, "user", "Why does the page look broken?", blocks=[image_block(png(800, 600))]
    )
    fake_llm.script_anthropic(ok(thinking="The CSS may be wrong; fetch it.", tool_calls=[CALL]))
    result = chat(provider, conversation, tools=[FETCH], thinking=THINK)
    assert result.blocks == [thinking_block("The CSS may be wrong; fetch it.")]
    add_message(
        conversation,
        "assistant",
        result.text,
        tool_calls=result.tool_calls,
        blocks=result.blocks if keep_thinking else None,
    )
    add_message(
        conversation,
        "tool",
        "body { color: red }",
        tool_call_id="toolu_1",
        blocks=[image_block(png(300, 200))],
    )
    return provider


def test_blocks_are_stored_verbatim_with_provider_token_estimates(conversation, settings) -> None:
    screenshot = image_block(png(1000, 1000))
    message = add_message(conversation, "user", "What is wrong here?", blocks=[screenshot])
    message.refresh_from_db()
    assert message.blocks == [screenshot]
    text = estimate_tokens("What is wrong here?")
    assert message.token_estimate == text + anthropic_image_tokens(1000, 1000) == text + 1334

    settings.ASSISTANT_SUMMARIZER = "gemini"
    message = add_message(conversation, "user", "And this report?", blocks=[pdf_block(3)])
    assert message.token_estimate == estimate_tokens("And this report?") + 3 * 258
    assert gemini_image_tokens(1000, 1000) == 1032


def test_an_image_alone_is_a_message(conversation) -> None:
    message = add_message(conversation, "user", "", blocks=[image_block(png(10, 10))])
    assert message.content == ""
    assert (
        build_context(conversation).to_anthropic()["messages"][0]["content"][0]["type"] == "image"
    )


@pytest.mark.parametrize(
    ("role", "blocks", "code"),
    [
        ("user", [image_block(jpeg(10, 10), "image/png")], "media_type_mismatch"),
        ("user", [thinking_block("no")], "block_not_allowed"),
        ("tool", [{"type": "audio", "source": {}}], "unknown_block_type"),
        ("user", [image_block(png(10, 10), "image/tiff")], "unsupported_media_type"),
    ],
)
def test_bad_blocks_store_nothing(conversation, role, blocks, code) -> None:
    if role == "tool":
        add_message(conversation, "user", "go")
        add_message(conversation, "assistant", "", tool_calls=[CALL])
    before = Message.objects.count()
    with pytest.raises(ValidationError) as caught:
        add_message(
            conversation, role, "x", tool_call_id="toolu_1" if role == "tool" else "", blocks=blocks
        )
    assert caught.value.code == code
    assert Message.objects.count() == before


def test_anthropic_agent_turn_sends_thinking_back_verbatim(
    fake_llm, settings, conversation
) -> None:
    provider = agent_turn(fake_llm, settings, conversation)
    fake_llm.script_anthropic(ok(thinking="Red text on red.", text="The CSS makes the text red."))
    answer = chat(provider, conversation, tools=[FETCH], thinking=THINK)
    assert answer.text == "The CSS makes the text red."

    sent = fake_llm.requests_for("anthropic.messages")[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[0]["content"]] == ["image", "text"]
    assert sent[1]["content"][0] == thinking_block("The CSS may be wrong; fetch it.")
    assert [b["type"] for b in sent[1]["content"]] == ["thinking", "tool_use"]
    result = sent[2]["content"][0]
    assert result["type"] == "tool_result"
    assert [b["type"] for b in result["content"]] == ["text", "image"]
    assert result["content"][1]["source"]["data"] == b64(png(300, 200))

    # The next user turn: thinking of the finished turn is no longer sent.
    add_message(conversation, "assistant", answer.text, blocks=answer.blocks)
    add_message(conversation, "user", "And the footer?")
    fake_llm.script_anthropic(ok(text="The footer is fine."))
    chat(provider, conversation, thinking=THINK)
    sent = fake_llm.requests_for("anthropic.messages")[-1].body["messages"]
    assert all(
        b["type"] not in ("thinking", "redacted_thinking") for m in sent for b in m["content"]
    )


def test_a_dropped_thinking_block_is_refused_as_the_api_does(
    fake_llm, settings, conversation
) -> None:
    provider = agent_turn(fake_llm, settings, conversation, keep_thinking=False)
    with pytest.raises(anthropic.BadRequestError) as caught:
        chat(provider, conversation, tools=[FETCH], thinking=THINK)
    cause = caught.value
    expected = ANTHROPIC_THINKING_REQUIRED.format(index=1, found="tool_use")
    assert cause.body["error"]["message"] == expected


def test_an_edited_thinking_block_is_refused_as_the_api_does(fake_llm, settings) -> None:
    fake_llm.use_anthropic(settings)
    client = anthropic.Anthropic(api_key="k", base_url=fake_llm.url, max_retries=0)
    edited = {**thinking_block("Plan A."), "thinking": "Plan B."}
    messages = [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": [edited, {"type": "tool_use", **_tool_use()}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
        },
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="claude-sonnet-4-6", max_tokens=64, messages=messages, thinking=THINK
        )
    assert (
        caught.value.body["error"]["message"]
        == "messages.1.content.0: Invalid `signature` in `thinking` block"
    )


def _tool_use() -> dict:
    return {"id": "toolu_1", "name": "fetch_url", "input": {}}


def test_a_bad_image_is_refused_by_add_message_and_by_both_apis(fake_llm, conversation) -> None:
    disguised = image_block(jpeg(10, 10), "image/png")
    with pytest.raises(ValidationError) as caught:
        add_message(conversation, "user", "look", blocks=[disguised])
    assert caught.value.code == "media_type_mismatch"

    client = anthropic.Anthropic(api_key="k", base_url=fake_llm.url, max_retries=0)
    message = {"role": "user", "content": [disguised, {"type": "text", "text": "look"}]}
    with pytest.raises(anthropic.BadRequestError) as caught_anthropic:
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[message])
    assert caught_anthropic.value.body["error"]["message"] == (
        "messages.0.content.0.image.source.base64.data: "
        "Image does not match the provided media type image/png"
    )

    gemini = genai.Client(
        api_key="k", http_options={"base_url": fake_llm.url, "retry_options": {"attempts": 1}}
    )
    part = {"inline_data": {"mime_type": "image/png", "data": jpeg(10, 10)}}
    with pytest.raises(genai_errors.ClientError) as caught_gemini:
        gemini.models.generate_content(
            model="gemini-2.5-flash", contents=[{"role": "user", "parts": [part, {"text": "look"}]}]
        )
    assert caught_gemini.value.code == 400
    assert caught_gemini.value.message == GEMINI_BAD_IMAGE


def test_gemini_gets_inline_and_file_data(fake_llm, settings, conversation) -> None:
    fake_llm.use_gemini(settings)
    provider = get_provider("gemini")
    report = pdf_block(2, title="Q3 report")
    add_message(
        conversation, "user", "Compare these.", blocks=[image_block(png(64, 64)), URL_IMAGE, report]
    )
    add_message(conversation, "assistant", "", tool_calls=[CALL], blocks=[thinking_block("hidden")])
    add_message(
        conversation, "tool", "done", tool_call_id="toolu_1", blocks=[image_block(png(8, 8))]
    )
    fake_llm.script_gemini(ok(text="They differ."))
    assert chat(provider, conversation, tools=[FETCH]).text == "They differ."

    contents = camel(fake_llm.requests_for("gemini.generate")[-1].body["contents"])
    user, model, results = contents
    assert user["parts"] == [
        {"inlineData": {"mimeType": "image/png", "data": png(64, 64)}},
        {"fileData": {"fileUri": "https://example.com/logo.png", "mimeType": "image/png"}},
        {"inlineData": {"mimeType": "application/pdf", "data": pdf(2)}},
        {"text": "Compare these."},
    ]
    assert [list(part) for part in model["parts"]] == [["functionCall"]]  # no thinking
    assert list(results["parts"][0]) == ["functionResponse"]
    assert results["parts"][1] == {"inlineData": {"mimeType": "image/png", "data": png(8, 8)}}


def camel(value):
    """The wire form read as the API reads it: field names in proto JSON's lowerCamelCase
    (the SDK sends some in snake_case) and inline data decoded (it sends URL-safe base64)."""
    if isinstance(value, list):
        return [camel(item) for item in value]
    if not isinstance(value, dict):
        return value
    named = {re.sub(r"_([a-z])", lambda m: m[1].upper(), k): camel(v) for k, v in value.items()}
    if "mimeType" in named and isinstance(named.get("data"), str):
        named["data"] = decoded(named["data"])
    return named


def test_old_media_become_placeholders_and_come_back(fake_llm, settings, conversation) -> None:
    provider = agent_turn(fake_llm, settings, conversation)
    fake_llm.script_anthropic(ok(thinking="Red.", text="Red text."))
    answer = chat(provider, conversation, tools=[FETCH], thinking=THINK)
    add_message(conversation, "assistant", answer.text, blocks=answer.blocks)
    add_message(conversation, "user", "Thanks.")
    before = {m.pk: m.token_estimate for m in Message.objects.filter(conversation=conversation)}

    compact_tool_results(conversation)

    request = build_context(conversation).to_anthropic()["messages"]
    first = request[0]["content"]
    assert [b["type"] for b in first] == ["text", "text"]
    assert first[0]["text"].startswith("[image image/png 800x600 sha256:")
    result = request[2]["content"][0]["content"]
    assert result[1]["text"].startswith("[image image/png 300x200 sha256:")
    user, assistant_call = Message.objects.filter(conversation=conversation).order_by("id")[:2]
    assert user.blocks == [image_block(png(800, 600))]  # the original is kept
    assert assistant_call.compacted_blocks == []  # its thinking is no longer sent
    assert user.token_estimate < before[user.pk] - 600
    event = CompactionEvent.objects.get(conversation=conversation, kind="media")
    assert event.messages_affected == 3

    assert restore_originals(conversation, [user.pk]) == 1
    request = build_context(conversation).to_anthropic()["messages"]
    assert request[0]["content"][0] == image_block(png(800, 600))
    user.refresh_from_db()
    assert user.token_estimate == before[user.pk]
    compact_tool_results(conversation)  # a restored message stays verbatim
    assert (
        build_context(conversation).to_anthropic()["messages"][0]["content"][0]["type"] == "image"
    )


def test_thinking_is_never_summarized(fake_llm, settings, conversation) -> None:
    provider = agent_turn(fake_llm, settings, conversation)
    fake_llm.script_anthropic(ok(thinking="SECRET-PLAN-42", text="Done."))
    answer = chat(provider, conversation, tools=[FETCH], thinking=THINK)
    add_message(conversation, "assistant", answer.text, blocks=answer.blocks)

    summarize_messages(list(Message.objects.filter(conversation=conversation).order_by("id")))

    summarizer_request = fake_llm.requests_for("anthropic.messages")[-1].body
    transcript = summarizer_request["messages"][0]["content"]
    assert (
        "[user] Why does the page look broken? [attached: image image/png 800x600 sha256:"
        in str(transcript)
    )
    assert "SECRET-PLAN-42" not in str(summarizer_request)
    assert "The CSS may be wrong" not in str(summarizer_request)


def test_emergency_compacts_the_current_turns_media_but_keeps_its_thinking(
    fake_llm, settings, conversation
) -> None:
    provider = agent_turn(fake_llm, settings, conversation)

    assert compact_tool_results(conversation, include_current_turn=True, min_chars=10**9) == 2

    request = build_context(conversation).to_anthropic()["messages"]
    assert request[0]["content"][0]["text"].startswith("[image image/png 800x600 sha256:")
    assert request[1]["content"][0] == thinking_block("The CSS may be wrong; fetch it.")
    assert request[2]["content"][0]["content"][1]["text"].startswith("[image image/png 300x200")
    fake_llm.script_anthropic(ok(thinking="Red.", text="Red text."))
    assert chat(provider, conversation, tools=[FETCH], thinking=THINK).text == "Red text."


def finished_turn_with_media(conversation) -> Message:
    user = add_message(conversation, "user", "Look", blocks=[image_block(png(800, 600))])
    add_message(conversation, "assistant", "A grey square.")
    add_message(conversation, "user", "Thanks.")
    return user


def test_the_pre_call_hook_compacts_old_media_once_the_cache_is_cold(conversation) -> None:
    user = finished_turn_with_media(conversation)
    ensure_context_summary(conversation)  # warm cache: the request keeps its prefix
    assert (
        build_context(conversation).to_anthropic()["messages"][0]["content"][0]["type"] == "image"
    )

    Message.objects.filter(conversation=conversation, role="assistant").update(
        created_at=timezone.now() - timedelta(hours=1)
    )
    ensure_context_summary(conversation)

    first = build_context(conversation).to_anthropic()["messages"][0]["content"][0]
    assert first["text"].startswith("[image image/png 800x600 sha256:")
    user.refresh_from_db()
    assert user.blocks_tokens == estimate_tokens(first["text"])


def test_eager_timing_compacts_old_media_after_the_exchange(conversation, settings) -> None:
    settings.ASSISTANT_COMPACTION = {"COMPACTION_TIMING": "eager"}
    finished_turn_with_media(conversation)
    process_exchange(conversation.pk)
    first = build_context(conversation).to_anthropic()["messages"][0]["content"][0]
    assert first["text"].startswith("[image image/png 800x600 sha256:")
