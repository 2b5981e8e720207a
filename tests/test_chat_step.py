"""The host's side of a model call: `chat_step` and `record_response`
driven by the real anthropic and google-genai clients against the testing kit's
fake server: tool calls round trip, thinking is kept, the whole usage (cache
reads and writes) is recorded, an overflow is recovered, and with prompt
caching on the loop still compacts at the trigger."""

from __future__ import annotations

import anthropic
import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings
from google import genai
from google.genai import types

from assistant.models import CompactionEvent, Message
from assistant.providers.base import ChatResult, Usage
from assistant.services import add_message, chat_step, record_response
from assistant.testing.content import thinking_block
from assistant.testing.fake_provider import FakeProvider, prompt_tokens
from tests.builders import html
from tests.fake_llm import ok, overflow, raw
from tests.scenarios import tool_heavy_conversation

pytestmark = pytest.mark.django_db

TOOLS = [
    {
        "name": "get_blog_post",
        "description": "A post by id, as HTML.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
    }
]
CALL = {"id": "toolu_01", "name": "get_blog_post", "arguments": {"id": 42}}
ANTHROPIC_USAGE = {
    "input_tokens": 12,
    "output_tokens": 30,
    "cache_read_input_tokens": 900,
    "cache_creation_input_tokens": 80,
}


def anthropic_client(fake) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=fake.url, max_retries=0)


def gemini_client(fake) -> genai.Client:
    options = types.HttpOptions(base_url=fake.url, api_version="v1beta")
    return genai.Client(api_key="test-key", http_options=options)


def usage_of(message: Message) -> tuple:
    return (
        message.input_tokens,
        message.cache_read_tokens,
        message.cache_write_tokens,
        message.output_tokens,
    )


def test_an_anthropic_tool_call_round_trips_with_its_whole_usage(fake_llm, conversation):
    client = anthropic_client(fake_llm)
    fake_llm.script_anthropic(ok(tool_calls=[CALL], usage=ANTHROPIC_USAGE), ok("Post 42 fixed."))

    def call_model(request):
        return client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, **request)

    add_message(conversation, "user", "Fix the typo in post 42")
    first = chat_step(conversation, call_model, tools=TOOLS)
    add_message(conversation, "tool", "<h1>Helo</h1>", tool_call_id=first.tool_calls[0]["id"])
    second = chat_step(conversation, call_model, tools=TOOLS)

    assert first.tool_calls == [CALL]
    assert first.text == ""
    assert isinstance(first.response, anthropic.types.Message)
    assert usage_of(first.message) == (12, 900, 80, 30)
    assert first.message.prompt_tokens == 992
    assert (first.message.provider, first.message.model) == ("anthropic", "claude-sonnet-4-6")
    assert second.tool_calls == []
    assert second.text == "Post 42 fixed."
    sent = [r.body for r in fake_llm.requests_for("anthropic.messages")]
    assert [body["model"] for body in sent] == ["claude-sonnet-4-6"] * 2
    assert sent[0]["tools"] == [
        {
            "name": "get_blog_post",
            "description": "A post by id, as HTML.",
            "input_schema": TOOLS[0]["parameters"],
        }
    ]
    assert sent[0]["system"][0]["text"] == "You help."
    assert sent[1]["messages"][1]["content"][0]["type"] == "tool_use"
    result = sent[1]["messages"][2]["content"][0]
    assert (result["type"], result["tool_use_id"], result["content"]) == (
        "tool_result",
        "toolu_01",
        "<h1>Helo</h1>",
    )


def test_thinking_is_recorded_and_sent_back_within_the_turn(fake_llm, conversation):
    client = anthropic_client(fake_llm)
    thinking = "The title misspells Hello."
    fake_llm.script_anthropic(ok(thinking=thinking, tool_calls=[CALL]), ok("Fixed."))

    def call_model(request):
        return client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 2048},
            **request,
        )

    add_message(conversation, "user", "Fix the typo in post 42")
    first = chat_step(conversation, call_model, tools=TOOLS)
    add_message(conversation, "tool", "<h1>Helo</h1>", tool_call_id="toolu_01")
    # The fake server refuses, in the API's words, a turn whose thinking went missing.
    second = chat_step(conversation, call_model, tools=TOOLS)

    assert first.message.blocks == [thinking_block(thinking)]
    assert second.text == "Fixed."
    resent = fake_llm.requests_for("anthropic.messages")[1].body["messages"][1]["content"][0]
    assert resent == thinking_block(thinking)


def test_a_streamed_answer_is_recorded_from_its_final_message(fake_llm, conversation):
    client = anthropic_client(fake_llm)
    thinking = "Read the post first."
    fake_llm.script_anthropic(ok(thinking=thinking, tool_calls=[CALL], usage=ANTHROPIC_USAGE))

    def call_model(request):
        with client.messages.stream(model="claude-sonnet-4-6", max_tokens=1024, **request) as s:
            return s.get_final_message()

    add_message(conversation, "user", "Fix the typo in post 42")
    step = chat_step(conversation, call_model, tools=TOOLS)

    assert fake_llm.requests_for("anthropic.messages")[0].body["stream"] is True
    assert step.tool_calls == [CALL]
    assert step.message.blocks == [thinking_block(thinking)]
    assert usage_of(step.message) == (12, 900, 80, 30)


def test_redacted_thinking_is_recorded_verbatim(fake_llm, conversation):
    client = anthropic_client(fake_llm)
    body = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "text", "text": "Done."},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 7,
            "output_tokens": 3,
            "cache_read_input_tokens": None,
            "cache_creation_input_tokens": None,
        },
    }
    fake_llm.script_anthropic(raw(200, body))
    add_message(conversation, "user", "Hello")

    step = chat_step(conversation, lambda r: client.messages.create(model="m", max_tokens=64, **r))

    assert step.message.blocks == [{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}]
    assert step.text == "Done."
    assert usage_of(step.message) == (7, 0, 0, 3)


def test_a_gemini_function_call_without_an_id_round_trips(fake_llm, conversation):
    client = gemini_client(fake_llm)
    usage = {
        "promptTokenCount": 1000,
        "cachedContentTokenCount": 600,
        "candidatesTokenCount": 20,
        "thoughtsTokenCount": 5,
    }
    call = {"name": "get_blog_post", "arguments": {"id": 42}}  # Gemini may send no id
    fake_llm.script_gemini(ok(tool_calls=[call], usage=usage), ok("Post 42 fixed."))

    def call_model(request):
        return client.models.generate_content(model="gemini-2.5-flash", **request)

    add_message(conversation, "user", "Fix the typo in post 42")
    first = chat_step(conversation, call_model, provider="gemini", tools=TOOLS)
    (made_up,) = first.tool_calls
    add_message(conversation, "tool", "<h1>Helo</h1>", tool_call_id=made_up["id"])
    second = chat_step(conversation, call_model, provider="gemini", tools=TOOLS)

    assert isinstance(first.response, types.GenerateContentResponse)
    assert made_up["id"].startswith("call_") and len(made_up["id"]) == 29
    assert (made_up["name"], made_up["arguments"]) == ("get_blog_post", {"id": 42})
    # promptTokenCount includes the cached part: 400 uncached, 600 read; output with thoughts.
    assert usage_of(first.message) == (400, 600, 0, 25)
    assert first.message.prompt_tokens == 1000
    assert (first.message.provider, first.message.model) == ("gemini", "gemini-2.5-flash")
    assert second.text == "Post 42 fixed."
    sent = [r.body for r in fake_llm.requests_for("gemini.generate")]
    assert sent[0]["systemInstruction"]["parts"] == [{"text": "You help."}]
    declared = sent[0]["tools"][0]["functionDeclarations"][0]
    assert (declared["name"], declared["description"]) == (
        "get_blog_post",
        "A post by id, as HTML.",
    )
    response = sent[1]["contents"][2]["parts"][0]["functionResponse"]
    assert (response["id"], response["name"], response["response"]) == (
        made_up["id"],
        "get_blog_post",
        {"result": "<h1>Helo</h1>"},
    )


def thinking_call(client):
    def call_model(request):
        return client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 2048},
            **request,
        )

    return call_model


def test_an_all_thinking_answer_is_stored_and_the_turns_thinking_still_goes_back(
    fake_llm, conversation
):
    client = anthropic_client(fake_llm)
    fake_llm.script_anthropic(
        ok(thinking="The title misspells Hello.", tool_calls=[CALL]),
        ok(text="", thinking="The fix is in; nothing to say."),
        ok("Post 42 is fixed."),
    )
    add_message(conversation, "user", "Fix the typo in post 42")
    first = chat_step(conversation, thinking_call(client), tools=TOOLS)
    add_message(conversation, "tool", "<h1>Helo</h1>", tool_call_id="toolu_01")

    empty = chat_step(conversation, thinking_call(client), tools=TOOLS)
    # A host that asks again (the turn had no answer): the fake server refuses, in the
    # API's words, an assistant message ending with thinking, and a tool-use turn whose
    # thinking went missing.
    again = chat_step(conversation, thinking_call(client), tools=TOOLS)

    assert (empty.text, empty.tool_calls) == ("", [])
    assert empty.message.blocks == [thinking_block("The fix is in; nothing to say.")]
    assert again.text == "Post 42 is fixed."
    assert list(conversation.messages.values_list("role", "content")) == [
        ("user", "Fix the typo in post 42"),
        ("assistant", ""),
        ("tool", "<h1>Helo</h1>"),
        ("assistant", ""),
        ("assistant", "Post 42 is fixed."),
    ]
    sent = fake_llm.requests_for("anthropic.messages")[2].body["messages"]
    assert [(m["role"], [b["type"] for b in m["content"]]) for m in sent] == [
        ("user", ["text"]),
        ("assistant", ["thinking", "tool_use"]),
        ("user", ["tool_result"]),
    ]
    assert sent[1]["content"][0] == first.message.blocks[0]


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_after_an_empty_answer_the_next_turns_request_is_valid(fake_llm, conversation, provider):
    if provider == "anthropic":
        client = anthropic_client(fake_llm)
        fake_llm.script_anthropic(ok(tool_calls=[CALL]), ok(text=""), ok("Post 43 is fine."))

        def call_model(request):
            return client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, **request)
    else:
        client = gemini_client(fake_llm)
        fake_llm.script_gemini(ok(tool_calls=[CALL]), ok(text=""), ok("Post 43 is fine."))

        def call_model(request):
            return client.models.generate_content(model="gemini-2.5-flash", **request)

    add_message(conversation, "user", "Fix the typo in post 42")
    chat_step(conversation, call_model, provider=provider, tools=TOOLS)
    add_message(conversation, "tool", "<h1>Helo</h1>", tool_call_id="toolu_01")
    empty = chat_step(conversation, call_model, provider=provider, tools=TOOLS)
    add_message(conversation, "user", "And post 43?")
    # The fake server refuses, in each API's words, empty content and a broken alternation.
    last = chat_step(conversation, call_model, provider=provider, tools=TOOLS)

    assert (empty.text, empty.tool_calls, empty.message.blocks) == ("", [], None)
    assert last.text == "Post 43 is fine."
    assert conversation.messages.filter(role="assistant", content="").count() == 2
    if provider == "anthropic":
        sent = fake_llm.requests_for("anthropic.messages")[2].body["messages"]
        shape = [(m["role"], [b["type"] for b in m["content"]]) for m in sent]
        assert shape == [
            ("user", ["text"]),
            ("assistant", ["tool_use"]),
            ("user", ["tool_result", "text"]),
        ]
    else:
        sent = fake_llm.requests_for("gemini.generate")[2].body["contents"]
        shape = [(c["role"], [next(iter(p)) for p in c["parts"]]) for c in sent]
        assert shape == [
            ("user", ["text"]),
            ("model", ["functionCall"]),
            ("user", ["functionResponse", "text"]),
        ]


def test_an_overflow_is_recovered_inside_the_step(fake_llm):
    client = anthropic_client(fake_llm)
    conversation, _ = tool_heavy_conversation()
    add_message(conversation, "user", "And post 43?")
    fake_llm.script_anthropic(overflow(), ok("Post 43 is fine."))

    step = chat_step(conversation, lambda r: client.messages.create(model="m", max_tokens=64, **r))

    assert step.text == "Post 43 is fine."
    events = CompactionEvent.objects.filter(conversation=conversation).order_by("id")
    # Level 1: the tool results compacted, the window summarized, then its own record.
    assert list(events.values_list("kind", flat=True)) == [
        "tool_results",
        "window_summary",
        "emergency_1",
    ]
    sizes = [len(r.body["messages"]) for r in fake_llm.requests_for("anthropic.messages")]
    assert sizes == [21, 7]


def test_record_response_refuses_what_is_not_a_provider_response(conversation):
    add_message(conversation, "user", "Hello")

    with pytest.raises(ValidationError) as raised:
        record_response(conversation, {"content": "Hi", "usage": {"input_tokens": 3}})

    assert raised.value.code == "unknown_response"
    assert Message.objects.filter(conversation=conversation).count() == 1


def test_record_response_takes_the_apps_own_chat_result(conversation):
    add_message(conversation, "user", "Hello")
    result = ChatResult(text="Hi.", usage=Usage(5, 2, 100, 10), model="m")

    message = record_response(conversation, result, metadata={"source": "provider.chat"})

    assert (message.content, message.metadata) == ("Hi.", {"source": "provider.chat"})
    assert usage_of(message) == (5, 100, 10, 2)


def test_an_unknown_provider_is_refused_before_any_call(conversation):
    add_message(conversation, "user", "Hello")

    with pytest.raises(ValidationError) as raised:
        chat_step(conversation, lambda request: pytest.fail("called"), provider="mistral")

    assert raised.value.code == "unknown_provider"


# Prompt caching on (the default timing) and no count trigger: only the size
# of the context can make the hook compact.
SMALL_TRIGGER = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "CONTEXT_TOKEN_THRESHOLD": 12_000,
    "MAX_RECENT_TOKENS": 4_000,
    "MAX_MESSAGES_BEFORE_SUMMARY": 1_000,
}


@override_settings(ASSISTANT_COMPACTION=SMALL_TRIGGER)
def test_with_prompt_caching_the_loop_compacts_at_the_trigger(conversation):
    """The provider reports most of each prompt as cache reads and writes (its
    input_tokens is a few tokens): the step records the whole usage, so the
    hook sees the real size and every request stays within the trigger plus
    the newest step."""
    fake = FakeProvider(prompt_cache=True).start()
    try:
        client = anthropic_client(fake)

        def call_model(request):
            return client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, **request)

        for turn in range(12):
            fake.script_anthropic(
                ok(tool_calls=[{"name": "get_blog_post", "arguments": {"id": turn}}]),
                ok(f"Post {turn} read."),
            )
            add_message(conversation, "user", f"Read post {turn}")
            while True:
                step = chat_step(conversation, call_model, tools=TOOLS)
                if not step.tool_calls:
                    break
                for call in step.tool_calls:
                    page = html(8_000, marker=f"post {call['arguments']['id']} ")
                    add_message(conversation, "tool", page, tool_call_id=call["id"])
        requests = fake.requests_for("anthropic.messages")
    finally:
        fake.stop()

    last = Message.objects.filter(conversation=conversation, role="assistant").last()
    # usage.input_tokens alone says nothing of the prompt: the whole usage
    # the server reported for the last call is what was stored.
    reported = requests[-1].usage
    assert usage_of(last) == (
        reported["input_tokens"],
        reported["cache_read_input_tokens"],
        reported["cache_creation_input_tokens"],
        reported["output_tokens"],
    )
    assert reported["input_tokens"] < reported["cache_read_input_tokens"]
    kinds = list(
        CompactionEvent.objects.filter(conversation=conversation)
        .order_by("id")
        .values_list("kind", flat=True)
    )
    assert kinds == [
        "tool_results",
        "tool_results",
        "window_summary",
        "tool_results",
        "tool_results",
        "window_summary",
    ]
    over = [
        (index, prompt_tokens(r.body), newest_step_tokens(r.body))
        for index, r in enumerate(requests)
        if prompt_tokens(r.body)
        > SMALL_TRIGGER["CONTEXT_TOKEN_THRESHOLD"] + newest_step_tokens(r.body)
    ]
    assert over == []


def newest_step_tokens(body: dict) -> int:
    """The last assistant message of a request and the tool results after it."""
    messages = body["messages"]
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    return 0 if last is None else prompt_tokens(messages[last:])
