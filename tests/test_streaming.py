"""A web chat streams: `chat_step` and `achat_step` take the SDKs' streams
(`on_text` gets each text delta as it arrives, the final message is recorded with its
whole usage) and `achat_step` the SDKs' async clients, with no database call on the
event loop: Django raises SynchronousOnlyOperation if one runs there, and these async
tests run on the loop (anyio's pytest plugin). All through the real SDKs against the
testing kit's fake server, which streams each wire."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import SynchronousOnlyOperation, ValidationError
from django.db import connections
from django.test import override_settings
from google import genai
from google.genai import types

from assistant.models import CompactionEvent, Conversation, Message
from assistant.services import StreamInterrupted, achat_step, add_message, chat_step
from assistant.testing.fake_provider import FakeProvider
from tests.builders import html
from tests.fake_llm import ok, overflow
from tests.scenarios import tool_heavy_conversation
from tests.test_openai import SMALL_TRIGGER, TOOLS, call

ANSWER = "Post 42 is fixed: the typo in its title is gone."
WORDS = 11  # the fake streams text a word at a time


@dataclass(frozen=True)
class Wire:
    """One provider's stream as a host calls it, sync and async, and what the fake
    reports."""

    provider: str
    kind: str
    usage: dict[str, Any]  # the stream's final usage, in the wire's names
    recorded: tuple[int, int, int, int]  # input, cache read, cache write, output
    break_after: int  # events up to the second text delta

    def sync_stream(self, fake: FakeProvider):
        if self.provider == "anthropic":
            client = anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0)
            return lambda r: client.messages.stream(model="claude-sonnet-4-6", max_tokens=99, **r)
        if self.provider == "gemini":
            client = genai.Client(api_key="k", http_options=gemini_options(fake))
            return lambda r: client.models.generate_content_stream(model="gemini-2.5-flash", **r)
        if self.provider == "gemini_interactions":
            client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=fake.url))
            return lambda r: client.interactions.create(model="gemini-2.5-flash", stream=True, **r)
        client = openai.OpenAI(api_key="k", base_url=fake.openai_url, max_retries=0)
        return openai_call(self.provider, client)

    def async_call(self, fake: FakeProvider, opened: list, *, stream: bool = True):
        """The async client's call; the client goes to `opened`, to be closed on the loop
        that used it."""
        if self.provider == "anthropic":
            client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0)
            opened.append(client.close)
            call = client.messages.stream if stream else client.messages.create
            return lambda r: call(model="claude-sonnet-4-6", max_tokens=99, **r)
        if self.provider == "gemini":
            aio = genai.Client(api_key="k", http_options=gemini_options(fake)).aio
            opened.append(aio.aclose)
            call = aio.models.generate_content_stream if stream else aio.models.generate_content
            return lambda r: call(model="gemini-2.5-flash", **r)
        if self.provider == "gemini_interactions":
            aio = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=fake.url)).aio
            opened.append(aio.aclose)
            options = {"stream": True} if stream else {}
            return lambda r: aio.interactions.create(model="gemini-2.5-flash", **options, **r)
        client = openai.AsyncOpenAI(api_key="k", base_url=fake.openai_url, max_retries=0)
        opened.append(client.close)
        return openai_call(self.provider, client, stream=stream)


def gemini_options(fake: FakeProvider) -> types.HttpOptions:
    return types.HttpOptions(base_url=fake.url, api_version="v1beta")


def openai_call(provider: str, client: Any, *, stream: bool = True):
    if provider == "openai":
        options = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        return lambda r: client.chat.completions.create(model="gpt-4.1", **options, **r)
    options = {"stream": True} if stream else {}
    return lambda r: client.responses.create(model="gpt-5", **options, **r)


OPENAI_CACHED = {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}
WIRES = [
    Wire(
        "anthropic",
        "anthropic.messages",
        {
            "input_tokens": 12,
            "output_tokens": 30,
            "cache_read_input_tokens": 900,
            "cache_creation_input_tokens": 80,
        },
        (12, 900, 80, 30),
        4,
    ),
    Wire(
        "openai",
        "openai.chat",
        {**OPENAI_CACHED, "prompt_tokens_details": {"cached_tokens": 600}},
        (400, 600, 0, 20),
        3,
    ),
    Wire(
        "openai_responses",
        "openai.responses",
        {
            "input_tokens": 1000,
            "input_tokens_details": {"cached_tokens": 600},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 1020,
        },
        (400, 600, 0, 20),
        3,
    ),
    Wire(
        "gemini",
        "gemini.generate",
        {"promptTokenCount": 1000, "cachedContentTokenCount": 600, "candidatesTokenCount": 20},
        (400, 600, 0, 20),
        2,
    ),
    Wire(
        "gemini_interactions",
        "gemini.interactions",
        {"total_input_tokens": 1000, "total_cached_tokens": 600, "total_output_tokens": 20},
        (400, 600, 0, 20),
        5,  # interaction.created, status_update, step.start, then the text's deltas
    ),
]
by_provider = pytest.mark.parametrize("wire", WIRES, ids=lambda wire: wire.provider)
async_db = pytest.mark.django_db(transaction=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def opened(anyio_backend) -> AsyncIterator[list]:
    """The async clients a test opened, closed on its loop; then the database
    connection of sync_to_async's thread, so the test database can be dropped."""
    closers: list = []
    yield closers
    for close in closers:
        await close()
    await sync_to_async(connections.close_all)()


def usage_of(message: Message) -> tuple[int, int, int, int]:
    return (
        message.input_tokens,
        message.cache_read_tokens,
        message.cache_write_tokens,
        message.output_tokens,
    )


def answers(conversation: Conversation) -> list[Message]:
    return list(conversation.messages.filter(role="assistant").order_by("id"))


def new_conversation(text: str = "Fix the typo in post 42") -> Conversation:
    conversation = Conversation.objects.create(title="Stream", system_prompt="You help.")
    add_message(conversation, "user", text)
    return conversation


@pytest.mark.django_db
@by_provider
def test_a_streamed_answer_hands_on_its_deltas_and_records_its_final_usage(wire, fake_llm):
    fake_llm.script(wire.kind, ok(ANSWER, usage=wire.usage))
    conversation = new_conversation()
    deltas: list[str] = []

    step = chat_step(
        conversation, wire.sync_stream(fake_llm), provider=wire.provider, on_text=deltas.append
    )

    assert len(deltas) == WORDS
    assert "".join(deltas) == ANSWER == step.text
    assert usage_of(step.message) == wire.recorded
    assert step.message.provider == wire.provider
    assert fake_llm.count(wire.kind) == 1


@pytest.mark.anyio
@async_db
@by_provider
async def test_an_async_stream_hands_on_its_deltas_and_records_its_final_usage(
    wire, fake_llm, opened
):
    fake_llm.script(wire.kind, ok(ANSWER, usage=wire.usage))
    conversation = await sync_to_async(new_conversation)()
    deltas: list[str] = []

    async def on_text(delta: str) -> None:  # a coroutine function, as a websocket send
        deltas.append(delta)

    step = await achat_step(
        conversation, wire.async_call(fake_llm, opened), provider=wire.provider, on_text=on_text
    )

    assert len(deltas) == WORDS
    assert "".join(deltas) == ANSWER == step.text
    stored = await sync_to_async(answers)(conversation)
    assert [(m.content, usage_of(m)) for m in stored] == [(ANSWER, wire.recorded)]


@pytest.mark.anyio
@async_db
@by_provider
async def test_an_async_client_answer_whole_is_recorded_and_handed_on_at_once(
    wire, fake_llm, opened
):
    fake_llm.script(wire.kind, ok(ANSWER, usage=wire.usage))
    conversation = await sync_to_async(new_conversation)()
    deltas: list[str] = []

    step = await achat_step(
        conversation,
        wire.async_call(fake_llm, opened, stream=False),
        provider=wire.provider,
        on_text=deltas.append,
    )

    assert deltas == [ANSWER]
    assert usage_of(step.message) == wire.recorded
    assert "stream" not in (fake_llm.requests_for(wire.kind)[0].body or {})


@pytest.mark.anyio
@async_db
async def test_the_database_is_never_touched_on_the_event_loop(fake_llm, opened):
    """The guard these async tests rely on is on: the sync step on the loop fails."""
    conversation = await sync_to_async(new_conversation)()
    call = WIRES[0].async_call(fake_llm, opened)

    with pytest.raises(SynchronousOnlyOperation):
        chat_step(conversation, call)

    step = await achat_step(conversation, call)
    assert step.text == "This is the fake provider's answer."


@pytest.mark.anyio
@async_db
@by_provider
async def test_an_overflow_before_any_delta_is_recovered_inside_the_async_step(
    wire, fake_llm, opened
):
    """OpenAI's overflow arrives as an error event after the stream began; Anthropic's
    and Gemini's as a 400 to the stream's request, as theirs do."""
    conversation, _ = await sync_to_async(tool_heavy_conversation)()
    await sync_to_async(add_message)(conversation, "user", "And post 43?")
    fake_llm.script(wire.kind, overflow(), ok(ANSWER, usage=wire.usage))
    deltas: list[str] = []

    step = await achat_step(
        conversation,
        wire.async_call(fake_llm, opened),
        provider=wire.provider,
        on_text=deltas.append,
    )

    assert "".join(deltas) == ANSWER == step.text
    assert usage_of(step.message) == wire.recorded
    events = CompactionEvent.objects.filter(conversation=conversation, kind="emergency_1")
    assert await events.acount() == 1
    assert fake_llm.count(wire.kind) == 2


@pytest.mark.django_db
@by_provider
def test_an_overflow_before_any_delta_is_recovered_inside_the_sync_step(wire, fake_llm):
    conversation, _ = tool_heavy_conversation()
    add_message(conversation, "user", "And post 43?")
    fake_llm.script(wire.kind, overflow(), ok(ANSWER, usage=wire.usage))
    deltas: list[str] = []

    step = chat_step(
        conversation, wire.sync_stream(fake_llm), provider=wire.provider, on_text=deltas.append
    )

    assert "".join(deltas) == ANSWER == step.text
    assert usage_of(step.message) == wire.recorded
    kinds = CompactionEvent.objects.filter(conversation=conversation).order_by("id")
    assert list(kinds.values_list("kind", flat=True)) == [
        "tool_results",
        "window_summary",
        "emergency_1",
    ]
    assert fake_llm.count(wire.kind) == 2


@pytest.mark.django_db
@by_provider
def test_a_stream_that_breaks_midway_records_nothing_and_says_so(wire, fake_llm):
    fake_llm.script(wire.kind, ok(ANSWER, usage=wire.usage, break_after=wire.break_after))
    conversation = new_conversation()
    deltas: list[str] = []

    with pytest.raises(StreamInterrupted) as raised:
        chat_step(
            conversation, wire.sync_stream(fake_llm), provider=wire.provider, on_text=deltas.append
        )

    assert deltas == ["Post ", "42 "]
    assert raised.value.partial_text == "Post 42 "
    assert str(raised.value).startswith("The model's answer broke off after 8 characters (")
    assert answers(conversation) == []
    assert fake_llm.count(wire.kind) == 1  # not retried: the host showed part of it


@pytest.mark.anyio
@async_db
@by_provider
async def test_an_async_stream_that_breaks_midway_records_nothing(wire, fake_llm, opened):
    fake_llm.script(wire.kind, ok(ANSWER, usage=wire.usage, break_after=wire.break_after))
    conversation = await sync_to_async(new_conversation)()
    deltas: list[str] = []

    with pytest.raises(StreamInterrupted) as raised:
        await achat_step(
            conversation,
            wire.async_call(fake_llm, opened),
            provider=wire.provider,
            on_text=deltas.append,
        )

    assert deltas == ["Post ", "42 "] and raised.value.partial_text == "Post 42 "
    assert await sync_to_async(answers)(conversation) == []


@pytest.mark.django_db
def test_a_sync_step_refuses_an_async_stream_and_an_async_step_a_sync_one(fake_llm):
    conversation = new_conversation()
    async_call, sync_call = WIRES[1].async_call(fake_llm, []), WIRES[1].sync_stream(fake_llm)

    with pytest.raises(ValidationError) as in_sync:
        chat_step(conversation, async_call, provider="openai")
    assert in_sync.value.code == "async_answer"

    with pytest.raises(ValidationError) as in_async:
        run_to_end(achat_step(conversation, sync_call, provider="openai"))
    assert in_async.value.code == "sync_answer"
    assert answers(conversation) == []


def run_to_end(coroutine: Any) -> Any:
    """Run a coroutine to its end from sync code, its database calls in this thread."""

    async def awaited() -> Any:
        return await coroutine

    return async_to_sync(awaited)()


@pytest.mark.django_db
def test_a_chat_stream_without_its_usage_chunk_is_refused_with_the_fix(fake_llm):
    client = openai.OpenAI(api_key="k", base_url=fake_llm.openai_url, max_retries=0)
    conversation = new_conversation()

    with pytest.raises(ValidationError) as raised:
        chat_step(
            conversation,
            lambda r: client.chat.completions.create(model="gpt-4.1", stream=True, **r),
            provider="openai",
        )

    assert raised.value.code == "stream_without_usage"
    assert "include_usage" in raised.value.message
    assert answers(conversation) == []


@pytest.mark.anyio
@async_db
@override_settings(ASSISTANT_COMPACTION=SMALL_TRIGGER)
async def test_a_streamed_async_agent_turn_of_30_steps_stays_under_the_trigger_plus_the_newest(
    fake_llm, opened
):
    fake_llm.script_openai(*(ok(tool_calls=[call(i)]) for i in range(30)), ok("All 30 done."))
    conversation = await sync_to_async(new_conversation)("Check the 30 posts")
    stream = WIRES[1].async_call(fake_llm, opened)
    deltas: list[str] = []

    newest_step = []
    step = await achat_step(
        conversation, stream, provider="openai", tools=TOOLS, on_text=deltas.append
    )
    for index in range(30):
        (made,) = step.tool_calls
        result = html(6000, f"post {index}")
        newest_step.append(len(json.dumps(result)) // 4 + 100)
        await sync_to_async(add_message)(conversation, "tool", result, tool_call_id=made["id"])
        step = await achat_step(
            conversation, stream, provider="openai", tools=TOOLS, on_text=deltas.append
        )

    assert step.text == "All 30 done." == "".join(deltas)
    sent = [r.body for r in fake_llm.requests_for("openai.chat")]
    assert all(body["stream"] is True for body in sent)
    trigger = SMALL_TRIGGER["CONTEXT_TOKEN_THRESHOLD"]
    sizes = [len(json.dumps(body["messages"])) // 4 for body in sent]
    assert all(size <= trigger + step for size, step in zip(sizes[1:], newest_step, strict=True)), (
        sizes
    )
    assert await CompactionEvent.objects.filter(conversation=conversation).aexists()
    for body in sent:  # every call answered by its result right after it (the fake checks)
        calls = [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        assert calls == results
