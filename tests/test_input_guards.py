"""Every argument of a public entry point is checked before anything is paid
for or written (a model call, a host tool, an enqueue), and every refusal is a coded
ValidationError. Model calls go through the real anthropic SDK to the fake server,
which must have received no request when the call is refused."""

from __future__ import annotations

import math
import time

import anthropic
import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import connections
from google import genai
from google.genai import types

from assistant.models import CompactionEvent, Conversation, Message
from assistant.providers.base import ChatResult, Usage
from assistant.providers.catalog import send_bound, wire_of
from assistant.services import (
    ContextTooLarge,
    IncompleteToolCall,
    achat_step,
    add_message,
    answer_tool_calls,
    build_context,
    call_with_overflow_recovery,
    chat_step,
    record_response,
)
from assistant.testing.fake_provider import prompt_tokens
from assistant.text.tokens import estimate_message_tokens
from tests.fake_llm import ok, overloaded, slow

pytestmark = pytest.mark.django_db

MODEL = "claude-sonnet-4-6"

# (keyword arguments of a step, the refusal's code): each reached the model before.
BAD_STEP_ARGUMENTS = [
    ({"metadata": "x"}, "invalid_metadata"),
    ({"metadata": {"note": "a\x00b"}}, "nul_byte"),
    ({"window_tokens": "x"}, "invalid_window_tokens"),
    ({"window_tokens": 0}, "invalid_window_tokens"),
    ({"on_text": 5}, "invalid_on_text"),
    ({"on_compaction": "print"}, "invalid_on_compaction"),
    ({"colour": "blue"}, "unknown_field"),
    ({"input_tokens": -1}, "invalid_usage"),
    ({"recall": "yes"}, "invalid_recall"),
    ({"compact": "yes"}, "invalid_compact"),
    ({"compact": True, "tools": [{"name": "compact"}]}, "tool_name_taken"),
    ({"model": "m" * 300}, "invalid_model"),
    ({"deadline": "x"}, "invalid_deadline"),
    ({"deadline": 0}, "invalid_deadline"),
    ({"deadline": float("nan")}, "invalid_deadline"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def closing(anyio_backend):
    """sync_to_async's thread's database connection closed, so the test database drops."""
    yield
    await sync_to_async(connections.close_all)()


def anthropic_call(fake):
    client = anthropic.Anthropic(api_key="test-key", base_url=fake.url, max_retries=0)
    return lambda request: client.messages.create(model=MODEL, max_tokens=64, **request)


def async_anthropic_call(fake):
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake.url, max_retries=0)
    return lambda request: client.messages.create(model=MODEL, max_tokens=64, **request)


def with_question() -> Conversation:
    conversation = Conversation.objects.create(title="guards", system_prompt="You help.")
    add_message(conversation, "user", "hi")
    return conversation


@pytest.mark.parametrize(("arguments", "code"), BAD_STEP_ARGUMENTS)
def test_chat_step_refuses_a_bad_argument_before_the_model_is_called(fake_llm, arguments, code):
    fake_llm.script_anthropic(ok("paid for"))
    conversation = with_question()

    with pytest.raises(ValidationError) as raised:
        chat_step(conversation, anthropic_call(fake_llm), **arguments)

    assert raised.value.code == code
    assert fake_llm.count("anthropic.messages") == 0
    assert list(conversation.messages.values_list("role", flat=True)) == ["user"]


def test_chat_step_refuses_a_call_model_that_is_not_a_function(fake_llm):
    conversation = with_question()

    with pytest.raises(ValidationError) as raised:
        chat_step(conversation, "call_claude")

    assert raised.value.code == "invalid_call_model"
    assert conversation.messages.count() == 1


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("arguments", "code"), BAD_STEP_ARGUMENTS)
async def test_achat_step_refuses_a_bad_argument_before_the_model_is_called(
    fake_llm, closing, arguments, code
):
    fake_llm.script_anthropic(ok("paid for"))
    conversation = await sync_to_async(with_question)()

    with pytest.raises(ValidationError) as raised:
        await achat_step(conversation, async_anthropic_call(fake_llm), **arguments)

    assert raised.value.code == code
    assert fake_llm.count("anthropic.messages") == 0
    count = await sync_to_async(Message.objects.filter(conversation=conversation).count)()
    assert count == 1


def test_a_good_step_still_stores_its_fields(fake_llm):
    fake_llm.script_anthropic(ok("answered"))
    conversation = with_question()

    step = chat_step(conversation, anthropic_call(fake_llm), metadata={"turn": 1}, window_tokens=9)

    assert step.message.metadata == {"turn": 1}
    assert fake_llm.count("anthropic.messages") == 1


# --- answer_tool_calls: every id and every result checked before a tool runs or a
# result is stored ---------------------------------------------------------------------

CALLS = [
    {"id": "c1", "name": "read_post", "arguments": {"id": 1}},
    {"id": "c2", "name": "read_post", "arguments": {"id": 2}},
]


def with_calls() -> Conversation:
    conversation = with_question()
    add_message(conversation, "assistant", "", tool_calls=CALLS)
    return conversation


@pytest.mark.parametrize(
    ("calls", "code"),
    [
        ([CALLS[0], {"id": "nope", "name": "read_post", "arguments": {}}], "unknown_tool_call_id"),
        ([CALLS[0], CALLS[0]], "duplicate_tool_result"),
    ],
)
def test_a_bad_call_id_is_refused_before_any_host_tool_runs(calls, code):
    conversation = with_calls()
    ran = []

    with pytest.raises(ValidationError) as raised:
        answer_tool_calls(conversation, calls, lambda name, arguments: ran.append(name) or "ok")

    assert raised.value.code == code
    assert ran == []
    assert not conversation.messages.filter(role="tool").exists()


def test_a_result_too_large_stores_none_and_the_calls_can_be_answered_again():
    conversation = with_calls()
    results = {1: "small", 2: "x" * 6_000_000}

    with pytest.raises(ValidationError) as raised:
        answer_tool_calls(conversation, CALLS, lambda name, arguments: results[arguments["id"]])

    assert raised.value.code == "content_too_large"
    assert "'c2'" in raised.value.message
    assert not conversation.messages.filter(role="tool").exists()
    with pytest.raises(IncompleteToolCall) as incomplete:
        build_context(conversation)
    assert incomplete.value.code == "incomplete_tool_call"
    answered = answer_tool_calls(conversation, CALLS, lambda name, arguments: "fits")
    assert [m.tool_call_id for m in answered] == ["c1", "c2"]


def test_a_run_tool_that_is_not_a_function_is_refused():
    conversation = with_calls()

    with pytest.raises(ValidationError) as raised:
        answer_tool_calls(conversation, CALLS, None)

    assert raised.value.code == "invalid_run_tool"


# --- A request larger than the answering model can take is made to fit before it is sent


def test_a_request_over_the_models_bound_is_made_to_fit_before_it_is_sent(fake_llm, settings):
    settings.ASSISTANT_SUMMARIZER = "offline"
    fake_llm.script_anthropic(ok("Read it."))
    conversation = with_question()
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c1", "name": "read_log", "arguments": {}}],
        provider="anthropic",
        model=MODEL,
    )
    add_message(conversation, "tool", "log line 42 ok\n" * 48_000, tool_call_id="c1")
    add_message(conversation, "assistant", "The log is clean.", provider="anthropic", model=MODEL)
    add_message(conversation, "user", "And now?")
    bound = send_bound(MODEL, "anthropic")
    assert build_context(conversation).tokens.total > bound

    call = anthropic_call(fake_llm)

    # The overflow flow alone (no pre-call hook, which would shift the window first).
    response = call_with_overflow_recovery(
        conversation, lambda context: call(context.request(wire_of("anthropic")))
    )

    (request,) = fake_llm.requests_for("anthropic.messages")
    assert prompt_tokens(request.body) <= bound
    assert response.content[0].text == "Read it."
    kinds = set(
        CompactionEvent.objects.filter(conversation=conversation).values_list("kind", flat=True)
    )
    assert CompactionEvent.Kind.EMERGENCY_1 in kinds


def test_an_oversized_newest_tool_result_is_truncated_to_fit_before_it_is_sent(fake_llm, settings):
    settings.ASSISTANT_SUMMARIZER = "offline"
    fake_llm.script_anthropic(ok("Read it."))
    conversation = with_question()
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c1", "name": "read_log", "arguments": {}}],
        provider="anthropic",
        model=MODEL,
    )
    original = "log line 42 ok\n" * 80_000 + "the error is E4471 in /var/app.log\n"
    result = add_message(conversation, "tool", original, tool_call_id="c1")
    bound = send_bound(MODEL, "anthropic")
    assert build_context(conversation).tokens.total > bound  # the newest step alone

    step = chat_step(conversation, anthropic_call(fake_llm))

    (request,) = fake_llm.requests_for("anthropic.messages")
    assert prompt_tokens(request.body) <= bound
    assert step.text == "Read it."
    sent = request.body["messages"][-1]["content"][0]["content"]
    assert f"ref m{result.pk}" in str(sent)  # the recall handle of the original
    stored = Message.objects.get(pk=result.pk)
    assert stored.content == original  # the original kept
    assert stored.compaction == Message.Compaction.TRUNCATED
    kinds = list(
        CompactionEvent.objects.filter(conversation=conversation).values_list("kind", flat=True)
    )
    assert CompactionEvent.Kind.EMERGENCY_2 in kinds
    assert CompactionEvent.Kind.TOOL_RESULTS in kinds


def test_the_issues_five_million_character_newest_result_is_made_to_fit_in_time(fake_llm, settings):
    settings.ASSISTANT_SUMMARIZER = "offline"
    fake_llm.script_anthropic(ok("Read it."))
    conversation = with_question()
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c1", "name": "export", "arguments": {}}],
        provider="anthropic",
        model=MODEL,
    )
    rows = "".join(f"row {i} id=A{i:07d} at /srv/out/{i}.json\n" for i in range(140_000))
    add_message(conversation, "tool", rows[:5_000_000], tool_call_id="c1")
    started = time.monotonic()

    step = chat_step(conversation, anthropic_call(fake_llm))

    assert time.monotonic() - started < 60  # the whole result scanned: minutes
    (request,) = fake_llm.requests_for("anthropic.messages")
    assert prompt_tokens(request.body) <= send_bound(MODEL, "anthropic")
    assert step.text == "Read it."


def test_a_request_that_cannot_be_made_to_fit_is_never_sent(fake_llm, settings):
    settings.ASSISTANT_SUMMARIZER = "offline"
    conversation = Conversation.objects.create(title="huge", system_prompt="You help.")
    add_message(conversation, "user", "word " * 1_000_000)  # a user message is kept verbatim

    with pytest.raises(ContextTooLarge):
        chat_step(conversation, anthropic_call(fake_llm))

    assert fake_llm.count("anthropic.messages") == 0


# --- deadline=: the step's model call is bounded ------------------------------------


def test_a_step_with_a_deadline_gives_up_on_a_provider_that_never_answers(fake_llm):
    fake_llm.script_anthropic(slow(20, ok("too late")))
    conversation = with_question()
    started = time.monotonic()

    with pytest.raises(anthropic.APITimeoutError):
        chat_step(conversation, anthropic_call(fake_llm), deadline=1)

    assert time.monotonic() - started < 15  # far below the fake's 20 s: the bound held
    (request,) = fake_llm.requests_for("anthropic.messages")  # max_retries=0: one attempt
    assert 0 < float(request.headers["x-stainless-timeout"]) <= 1
    assert list(conversation.messages.values_list("role", flat=True)) == ["user"]


def test_a_gemini_step_carries_its_deadline_in_its_http_options(fake_llm):
    fake_llm.script_gemini(slow(20, ok("too late")))
    conversation = with_question()
    options = types.HttpOptions(base_url=fake_llm.url, api_version="v1beta")
    client = genai.Client(api_key="test-key", http_options=options)
    started = time.monotonic()

    with pytest.raises(Exception) as raised:
        chat_step(
            conversation,
            lambda request: client.models.generate_content(model="gemini-2.5-flash", **request),
            provider="gemini",
            deadline=1,
        )

    assert "timeout" in type(raised.value).__name__.lower() + str(raised.value).lower()
    assert time.monotonic() - started < 15
    assert conversation.messages.count() == 1


def retrying_call(fake, retries):
    client = anthropic.Anthropic(api_key="test-key", base_url=fake.url, max_retries=retries)
    return lambda request: client.messages.create(model=MODEL, max_tokens=64, **request)


def async_retrying_call(fake, retries):
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake.url, max_retries=retries)
    return lambda request: client.messages.create(model=MODEL, max_tokens=64, **request)


# The SDK's retries: 529s whose retry-after (3 s) it sleeps out, 4 retries (15 s and more
# before the bound), or a hanging provider whose every attempt gets the request's timeout.
RETRIED = {
    "overloaded": ([overloaded(retry_after=3) for _ in range(5)], 4),
    "hanging": ([slow(20, ok("too late")) for _ in range(4)], 3),
}


@pytest.mark.parametrize("fault", sorted(RETRIED))
def test_a_deadline_bounds_the_sdks_retries_too(fake_llm, fault):
    replies, retries = RETRIED[fault]
    fake_llm.script_anthropic(*replies)
    conversation = with_question()
    started = time.monotonic()

    with pytest.raises((TimeoutError, anthropic.APITimeoutError)):
        chat_step(conversation, retrying_call(fake_llm, retries), deadline=2)

    assert time.monotonic() - started < 5  # 2 s and the grace; unbounded: 8 s and more
    assert list(conversation.messages.values_list("role", flat=True)) == ["user"]


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", sorted(RETRIED))
async def test_an_async_deadline_bounds_the_sdks_retries_too(fake_llm, closing, fault):
    replies, retries = RETRIED[fault]
    fake_llm.script_anthropic(*replies)
    conversation = await sync_to_async(with_question)()
    started = time.monotonic()

    with pytest.raises((TimeoutError, anthropic.APITimeoutError)):
        await achat_step(conversation, async_retrying_call(fake_llm, retries), deadline=2)

    assert time.monotonic() - started < 5
    count = await sync_to_async(Message.objects.filter(conversation=conversation).count)()
    assert count == 1


def test_a_step_within_its_deadline_is_recorded(fake_llm):
    fake_llm.script_anthropic(ok("in time"))
    conversation = with_question()

    step = chat_step(conversation, anthropic_call(fake_llm), deadline=30)

    assert step.text == "in time"


# --- Stored arguments read back equal in value and type, or are refused -------------


@pytest.mark.parametrize("value", [1e308, 1e16, -0.0, -2.5e20])
def test_a_number_jsonb_would_change_is_refused(value):
    conversation = with_question()
    call = {"id": "c1", "name": "set", "arguments": {"v": value}}

    with pytest.raises(ValidationError) as raised:
        add_message(conversation, "assistant", "", tool_calls=[call])
    with pytest.raises(ValidationError) as in_metadata:
        add_message(conversation, "user", "x", metadata={"v": value})

    assert raised.value.code == "invalid_tool_arguments"
    assert in_metadata.value.code == "invalid_metadata"
    assert conversation.messages.count() == 1


# What the host's add_message refuses, the model's own answer is stored with.
MODELS_NUMBERS = {"v": 1e16, "w": -0.0, "x": 1e308, "y": -2.5e20, "z": [0.5, {"n": 3e17}]}


def test_a_models_tool_call_with_a_number_jsonb_would_change_is_stored_not_lost(fake_llm):
    fake_llm.script_anthropic(
        ok("", tool_calls=[{"id": "t1", "name": "set", "arguments": MODELS_NUMBERS}])
    )
    conversation = with_question()

    step = chat_step(conversation, anthropic_call(fake_llm))

    (call,) = step.tool_calls
    assert call["arguments"] == MODELS_NUMBERS  # the model's, as it sent them
    assert math.copysign(1.0, call["arguments"]["w"]) < 0
    assert type(call["arguments"]["x"]) is float
    stored = Message.objects.get(pk=step.message.pk)
    assert stored.tool_calls[0]["arguments"] == MODELS_NUMBERS  # reads back equal
    assert stored.original_token_estimate == estimate_message_tokens("", stored.tool_calls)
    assert fake_llm.count("anthropic.messages") == 1


def test_a_models_arguments_as_json_text_with_such_a_number_are_stored():
    conversation = with_question()
    call = {"id": "t1", "name": "set", "arguments": '{"v": 1e+16, "w": -0.0}'}
    answer = ChatResult(text="", usage=Usage(), model=MODEL, tool_calls=[call])

    message = record_response(conversation, answer, provider="openai")

    assert message.tool_calls[0]["arguments"] == {"v": 1e16, "w": -0.0}
    assert Message.objects.get(pk=message.pk).tool_calls[0]["arguments"] == {"v": 1e16, "w": 0}


def test_stored_arguments_read_back_equal_and_their_estimate_is_of_what_is_stored():
    conversation = with_question()
    arguments = {"a": 1.5, "b": 1e-7, "c": 2.0, "d": 10**40, "e": 0.1 + 0.2, "f": 1e15}
    call = {"id": "c1", "name": "set", "arguments": arguments}

    add_message(conversation, "assistant", "", tool_calls=[call])

    stored = Message.objects.get(conversation=conversation, role="assistant")
    back = stored.tool_calls[0]["arguments"]
    assert back == arguments
    assert {k: type(v) for k, v in back.items()} == {k: type(v) for k, v in arguments.items()}
    assert stored.original_token_estimate == estimate_message_tokens("", stored.tool_calls)
