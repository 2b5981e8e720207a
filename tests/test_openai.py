"""OpenAI through the official `openai` SDK: `chat_step` with
provider="openai" (Chat Completions, what OpenAI-compatible servers speak) and
provider="openai_responses" against the testing kit's fake server, which answers
in both wires with OpenAI's real error bodies."""

from __future__ import annotations

import json

import openai
import pytest
from django.test import override_settings

from assistant.admin.inspector import context_inspector, request_body
from assistant.cost.stored_figures import conversation_costs
from assistant.models import CompactionEvent, Message
from assistant.providers.catalog import model_context_window
from assistant.providers.overflow import context_overflow
from assistant.services import add_message, chat_step, context_status
from tests.builders import html
from tests.fake_llm import ok, overflow, rate_limited
from tests.scenarios import tool_heavy_conversation

pytestmark = pytest.mark.django_db

TOOLS = [
    {
        "name": "get_blog_post",
        "description": "A post by id, as HTML.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
    }
]
SMALL_TRIGGER = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "CONTEXT_TOKEN_THRESHOLD": 20_000,
    "MAX_RECENT_TOKENS": 8_000,
    "TOOL_RESULT_CHAR_THRESHOLD": 1500,
}


def client_of(fake) -> openai.OpenAI:
    return openai.OpenAI(api_key="test-key-openai", base_url=fake.openai_url, max_retries=0)


def chat_call(client, model="gpt-4.1"):
    return lambda request: client.chat.completions.create(model=model, **request)


def responses_call(client, model="gpt-5"):
    return lambda request: client.responses.create(model=model, **request)


def call(index: int) -> dict:
    return {"id": f"call_{index:03d}", "name": "get_blog_post", "arguments": {"id": index}}


def test_a_chat_completions_tool_call_round_trips_with_its_usage_provider_and_model(
    fake_llm, conversation
):
    client = client_of(fake_llm)
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 20,
        "total_tokens": 1020,
        "prompt_tokens_details": {"cached_tokens": 600},
    }
    fake_llm.script_openai(ok(tool_calls=[call(42)], usage=usage), ok("Post 42 fixed."))

    add_message(conversation, "user", "Fix the typo in post 42")
    first = chat_step(conversation, chat_call(client), provider="openai", tools=TOOLS)
    add_message(conversation, "tool", "<h1>Helo</h1>", tool_call_id=first.tool_calls[0]["id"])
    second = chat_step(conversation, chat_call(client), provider="openai", tools=TOOLS)

    assert isinstance(first.response, openai.types.chat.ChatCompletion)
    assert first.tool_calls == [call(42)]
    # prompt_tokens includes cached_tokens: 400 uncached, 600 read from the cache.
    message = first.message
    assert (message.input_tokens, message.cache_read_tokens, message.cache_write_tokens) == (
        400,
        600,
        0,
    )
    assert (message.prompt_tokens, message.output_tokens) == (1000, 20)
    assert second.text == "Post 42 fixed."
    answers = conversation.messages.filter(role="assistant")
    assert list(answers.values_list("provider", "model")) == [("openai", "gpt-4.1")] * 2
    sent = [r.body for r in fake_llm.requests_for("openai.chat")]
    assert sent[0]["messages"][0] == {"role": "system", "content": "You help."}
    assert sent[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_blog_post",
                "description": "A post by id, as HTML.",
                "parameters": TOOLS[0]["parameters"],
            },
        }
    ]
    assert sent[1]["messages"][2]["tool_calls"] == [
        {
            "id": "call_042",
            "type": "function",
            "function": {"name": "get_blog_post", "arguments": '{"id": 42}'},
        }
    ]
    assert sent[1]["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_042",
        "content": "<h1>Helo</h1>",
    }


@override_settings(ASSISTANT_COMPACTION=SMALL_TRIGGER)
def test_an_openai_agent_turn_of_30_tool_calls_stays_under_the_trigger_plus_the_newest_step(
    fake_llm, conversation
):
    client = client_of(fake_llm)
    fake_llm.script_openai(*(ok(tool_calls=[call(i)]) for i in range(30)), ok("All 30 done."))
    add_message(conversation, "user", "Check the 30 posts")

    newest_step = []
    step = chat_step(conversation, chat_call(client), provider="openai", tools=TOOLS)
    for index in range(30):
        (made,) = step.tool_calls
        result = html(6000, f"post {index}")
        newest_step.append(len(json.dumps(result)) // 4 + 100)
        add_message(conversation, "tool", result, tool_call_id=made["id"])
        step = chat_step(conversation, chat_call(client), provider="openai", tools=TOOLS)

    assert step.text == "All 30 done."
    sent = [r.body for r in fake_llm.requests_for("openai.chat")]
    trigger = SMALL_TRIGGER["CONTEXT_TOKEN_THRESHOLD"]
    sizes = [len(json.dumps(body["messages"])) // 4 for body in sent]
    assert all(size <= trigger + step for size, step in zip(sizes[1:], newest_step, strict=True)), (
        sizes
    )
    assert CompactionEvent.objects.filter(conversation=conversation).exists()
    for body in sent:  # every call answered by its result right after it (the fake checks)
        calls = [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        assert calls == results


def test_openais_overflow_error_is_recovered_inside_the_step(fake_llm):
    client = client_of(fake_llm)
    conversation, _ = tool_heavy_conversation()
    add_message(conversation, "user", "And post 43?")
    fake_llm.script_openai(overflow(), ok("Post 43 is fine."))

    step = chat_step(conversation, chat_call(client), provider="openai")

    assert step.text == "Post 43 is fine."
    kinds = CompactionEvent.objects.filter(conversation=conversation).order_by("id")
    assert list(kinds.values_list("kind", flat=True)) == [
        "tool_results",
        "window_summary",
        "emergency_1",
    ]
    assert fake_llm.count("openai.chat") == 2


def test_the_overflow_is_matched_on_its_code_in_both_apis_and_a_token_rate_limit_is_not(
    fake_llm,
):
    client = client_of(fake_llm)
    fake_llm.script_openai(overflow(), rate_limited())
    fake_llm.script_openai_responses(overflow())
    errors = []
    for create in (
        lambda: client.chat.completions.create(model="gpt-4.1", messages=[]),
        lambda: client.chat.completions.create(model="gpt-4.1", messages=[]),
        lambda: client.responses.create(model="gpt-5", input=[]),
    ):
        with pytest.raises(openai.APIError) as raised:
            create()
        errors.append(raised.value)

    assert [e.code for e in errors] == [
        "context_length_exceeded",
        "rate_limit_exceeded",
        "context_length_exceeded",
    ]
    assert [context_overflow(e) for e in errors] == [True, False, True]


def test_a_responses_api_agent_turn_keeps_its_function_call_pairs_and_reasoning(
    fake_llm, conversation
):
    client = client_of(fake_llm)
    fake_llm.script_openai_responses(
        ok(tool_calls=[call(1)], thinking="Read post 1 first."),
        ok(tool_calls=[call(2)]),
        ok("Both fixed."),
    )
    add_message(conversation, "user", "Fix posts 1 and 2")

    step = chat_step(conversation, responses_call(client), provider="openai_responses", tools=TOOLS)
    reasoning = step.message.blocks[0]["item"]
    add_message(conversation, "tool", "<h1>One</h1>", tool_call_id="call_001")
    step = chat_step(conversation, responses_call(client), provider="openai_responses", tools=TOOLS)
    add_message(conversation, "tool", "<h1>Two</h1>", tool_call_id="call_002")
    last = chat_step(conversation, responses_call(client), provider="openai_responses", tools=TOOLS)

    assert last.text == "Both fixed."
    sent = fake_llm.requests_for("openai.responses")[2].body
    assert sent["store"] is False
    assert sent["instructions"] == "You help."
    assert [item.get("type", item.get("role")) for item in sent["input"]] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
    ]
    assert sent["input"][1] == reasoning  # sent back as received
    assert reasoning["encrypted_content"].startswith("enc_")
    pairs = [(i["type"], i["call_id"]) for i in sent["input"] if "call_id" in i]
    assert pairs == [
        ("function_call", "call_001"),
        ("function_call_output", "call_001"),
        ("function_call", "call_002"),
        ("function_call_output", "call_002"),
    ]
    assert sent["tools"][0] == {
        "type": "function",
        "name": "get_blog_post",
        "description": "A post by id, as HTML.",
        "parameters": TOOLS[0]["parameters"],
        "strict": False,
    }
    answers = conversation.messages.filter(role="assistant")
    assert set(answers.values_list("provider", "model")) == {("openai_responses", "gpt-5")}


def test_a_conversation_that_changes_model_is_priced_per_message(fake_llm, conversation):
    client = client_of(fake_llm)
    usage = {"prompt_tokens": 100_000, "completion_tokens": 0, "total_tokens": 100_000}
    fake_llm.script_openai(ok("One.", usage=usage), ok("Two.", usage=usage))
    add_message(conversation, "user", "Hello")
    chat_step(conversation, chat_call(client, "gpt-4.1"), provider="openai")
    add_message(conversation, "user", "Again")
    chat_step(conversation, chat_call(client, "gpt-4o-mini"), provider="openai")

    cost = conversation_costs([conversation.pk])[conversation.pk]

    # 100,000 uncached input tokens at gpt-4.1's $2.00 a million, then at gpt-4o-mini's $0.15.
    assert round(cost.chat, 6) == 0.215
    assert model_context_window("gpt-4o-mini-2024-07-18") == 128_000
    assert Message.objects.filter(role="assistant").latest("id").model == "gpt-4o-mini"
    # The conversation's page: the window of the model that answered last, and the next
    # request in its provider's shape.
    inspector = context_inspector(conversation)
    assert (inspector["limits"].model, inspector["limits"].window) == ("gpt-4o-mini", 128_000)
    status = context_status(conversation)  # a /status command's figures, too
    assert (status.model, status.window) == ("gpt-4o-mini", 128_000)
    body = request_body(conversation)
    assert body["messages"][0] == {"role": "system", "content": "You help."}
    assert body["messages"][-1] == {"role": "assistant", "content": "Two."}
