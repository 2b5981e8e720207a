"""The compact tool (issue 52): the model asks for room itself. Its call is answered by
answer_tool_calls with a shift of the window, the next request carries the summary;
at most once per turn, refused with a text when too little would be freed, its name
refused as a host tool's only when offered; through the real SDKs to the testing
kit's fake server, on every wire of the provider matrix (anthropic, openai,
openai_responses, gemini, gemini_interactions); Bedrock and Vertex speak Anthropic's."""

from __future__ import annotations

import json

import anthropic as anthropic_sdk
import openai
import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import connections
from google import genai
from google.genai import types

from assistant.models import CompactionEvent, Conversation
from assistant.providers import CHAT_PROVIDERS
from assistant.recall import tool_definitions
from assistant.services import achat_step, add_message, answer_tool_calls, chat_step
from assistant.signals import compaction_event
from tests.fake_llm import DEFAULT_SUMMARY, ok

pytestmark = pytest.mark.django_db

PROVIDERS = list(CHAT_PROVIDERS)
KIND = {
    "anthropic": "anthropic.messages",
    "openai": "openai.chat",
    "openai_responses": "openai.responses",
    "gemini": "gemini.generate",
    "gemini_interactions": "gemini.interactions",
}
FOCUS = "Keep the ticket number TKT-4242 and the open refund."
# A loaded machine must not push a summary to the offline fallback (no request then).
SETTINGS = {"SUMMARY_CHAT_DEADLINE_SECONDS": 300}
OLD_MARKER = "OLD-TURN-DETAIL"


def sdk_call(provider: str, fake_llm):
    if provider == "anthropic":
        client = anthropic_sdk.Anthropic(api_key="k", base_url=fake_llm.url, max_retries=0)
        return lambda request: client.messages.create(
            model="claude-sonnet-4-6", max_tokens=512, **request
        )
    if provider.startswith("gemini"):
        options = types.HttpOptions(base_url=fake_llm.url, api_version="v1beta")
        google = genai.Client(api_key="k", http_options=options)
        if provider == "gemini":
            return lambda request: google.models.generate_content(
                model="gemini-2.5-flash", **request
            )
        return lambda request: google.interactions.create(model="gemini-2.5-flash", **request)
    chat = openai.OpenAI(api_key="k", base_url=fake_llm.openai_url, max_retries=0)
    if provider == "openai_responses":
        return lambda request: chat.responses.create(model="gpt-5", **request)
    return lambda request: chat.chat.completions.create(model="gpt-4.1", **request)


def long_conversation() -> Conversation:
    """Five finished turns of about 2,000 tokens each, then the turn under way."""
    conversation = Conversation.objects.create(title="Refunds", system_prompt="You help.")
    for n in range(5):
        add_message(conversation, "user", f"Step {n}: check the refunds of week {n}.")
        add_message(conversation, "assistant", f"{OLD_MARKER} {n}: " + "refund line. " * 640)
    add_message(conversation, "user", "Now write the report of the open refunds.")
    return conversation


def compact_call(call_id: str = "call_compact", focus: str | None = FOCUS) -> dict:
    arguments = {"focus": focus} if focus is not None else {}
    return {"id": call_id, "name": "compact", "arguments": arguments}


def no_host_tool(name, arguments):
    pytest.fail(f"the host was asked to run {name}")


def chat_requests(fake_llm, provider: str) -> list[dict]:
    return [r.body for r in fake_llm.requests_for(KIND[provider]) if not r.summary]


def summary_requests(fake_llm) -> list[dict]:
    return [r.body for r in fake_llm.requests if r.summary]


def declared(tools: list[dict]) -> list[dict]:
    """Each tool's own declaration: Gemini's function_declarations (functionDeclarations
    on the wire) opened, Chat Completions' function unwrapped."""
    found = []
    for tool in tools:
        group = tool.get("function_declarations") or tool.get("functionDeclarations")
        found += group if group else [tool.get("function", tool)]
    return found


def tool_names(provider: str, body: dict) -> list[str]:
    return [t["name"] for t in declared(body["tools"])]


def schema(tool: dict) -> dict:
    return tool.get("input_schema") or tool["parameters"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_models_compact_call_shrinks_the_next_request_and_it_carries_the_summary(
    provider, fake_llm, settings
):
    fake_llm.use_anthropic(settings)  # the summarizer
    settings.ASSISTANT_COMPACTION = SETTINGS
    conversation = long_conversation()
    fake_llm.script(KIND[provider], ok(tool_calls=[compact_call()]), ok(text="The report."))
    call_model = sdk_call(provider, fake_llm)
    notices = []

    def receiver(sender, notice, **kwargs):
        notices.append(notice)

    compaction_event.connect(receiver)
    try:
        step = chat_step(conversation, call_model, provider=provider, recall=True, compact=True)
        answered = answer_tool_calls(conversation, step.tool_calls, no_host_tool)
        last = chat_step(conversation, call_model, provider=provider, recall=True, compact=True)
    finally:
        compaction_event.disconnect(receiver)

    assert last.text == "The report."
    assert answered[0].content.startswith("Compacted: the messages through ref m")
    first, second = chat_requests(fake_llm, provider)
    assert tool_names(provider, first) == ["recall", "search_history", "compact"]
    assert OLD_MARKER in json.dumps(first)
    sent = json.dumps(second, ensure_ascii=False)
    assert OLD_MARKER not in sent
    assert "Summarize the conversation (fake server)." in sent  # DEFAULT_SUMMARY
    assert DEFAULT_SUMMARY.splitlines()[1] in sent
    assert len(sent) < len(json.dumps(first, ensure_ascii=False)) / 2
    # The focus reached the summarizer's prompt as that call's instructions.
    summaries = summary_requests(fake_llm)
    assert summaries and all(FOCUS in json.dumps(body) for body in summaries)
    # Priced and recorded as any shift, requested by the model; its lifecycle fired.
    event = CompactionEvent.objects.get(conversation=conversation)
    assert event.kind == CompactionEvent.Kind.WINDOW_SUMMARY
    assert event.details["requested_by"] == "model"
    assert event.summarizer_input_tokens > 0 and event.tokens_after < event.tokens_before
    assert [(n.phase, n.status) for n in notices][-1] == ("ended", "completed")
    assert notices[-1].event_id == event.pk


@pytest.mark.parametrize("provider", PROVIDERS)
def test_compact_is_made_at_most_once_per_turn(provider, fake_llm, settings):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = SETTINGS
    conversation = long_conversation()
    fake_llm.script(
        KIND[provider],
        ok(tool_calls=[compact_call("c1", focus=None)]),
        ok(tool_calls=[compact_call("c2", focus=None)]),
        ok(text="Done."),
    )
    call_model = sdk_call(provider, fake_llm)

    first = chat_step(conversation, call_model, provider=provider, compact=True)
    made = answer_tool_calls(conversation, first.tool_calls, no_host_tool)
    second = chat_step(conversation, call_model, provider=provider, compact=True)
    refused = answer_tool_calls(conversation, second.tool_calls, no_host_tool)
    assert chat_step(conversation, call_model, provider=provider, compact=True).text == "Done."

    assert made[0].content.startswith("Compacted:")
    assert refused[0].content.startswith("Error: compact was already made in this turn")
    assert CompactionEvent.objects.filter(conversation=conversation).count() == 1
    # A new turn may compact again (not enough left to free here: refused for that).
    add_message(conversation, "user", "And the closed ones?")
    fake_llm.script(KIND[provider], ok(tool_calls=[compact_call("c3")]), ok(text="Ok."))
    third = chat_step(conversation, call_model, provider=provider, compact=True)
    again = answer_tool_calls(conversation, third.tool_calls, no_host_tool)
    assert "already made in this turn" not in again[0].content


@pytest.mark.parametrize("provider", PROVIDERS)
def test_compact_is_refused_with_a_text_when_it_would_free_too_little(provider, fake_llm, settings):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {**SETTINGS, "COMPACT_MIN_FREE_TOKENS": 3000}
    conversation = Conversation.objects.create(title="Short", system_prompt="You help.")
    add_message(conversation, "user", "Hello.")
    add_message(conversation, "assistant", f"{OLD_MARKER}: hi.")
    add_message(conversation, "user", "Make room, please.")
    fake_llm.script(KIND[provider], ok(tool_calls=[compact_call()]), ok(text="Fine."))
    call_model = sdk_call(provider, fake_llm)

    step = chat_step(conversation, call_model, provider=provider, recall=True, compact=True)
    answered = answer_tool_calls(conversation, step.tool_calls, no_host_tool)
    chat_step(conversation, call_model, provider=provider, recall=True, compact=True)

    assert answered[0].content.startswith("Error: compacting now would free about ")
    assert "less than the 3000 it must free" in answered[0].content
    assert not CompactionEvent.objects.filter(conversation=conversation).exists()
    assert summary_requests(fake_llm) == []
    assert len(chat_requests(fake_llm, provider)) == 2
    assert OLD_MARKER in json.dumps(chat_requests(fake_llm, provider)[-1])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_host_tool_named_compact_is_refused_only_when_compact_is_offered(provider, fake_llm):
    conversation = long_conversation()
    tools = [{"name": "compact", "description": "The host's own.", "parameters": None}]
    refused = lambda r: pytest.fail("called")  # noqa: E731

    with pytest.raises(ValidationError) as raised:
        chat_step(conversation, refused, provider=provider, tools=tools, compact=True)
    assert raised.value.code == "tool_name_taken"
    with pytest.raises(ValidationError) as flag:
        chat_step(conversation, refused, provider=provider, compact="yes")
    assert conversation.messages.count() == 11  # nothing written, no model paid

    # Offered without compact=True, the host's own tool is the host's to run.
    call = {"id": "h1", "name": "compact", "arguments": {"level": 1}}
    fake_llm.script(KIND[provider], ok(tool_calls=[call]), ok(text="Ok."))
    call_model = sdk_call(provider, fake_llm)
    step = chat_step(conversation, call_model, provider=provider, tools=tools, recall=True)
    ran = []
    answer_tool_calls(
        conversation, step.tool_calls, lambda n, a: ran.append((n, a)) or "ran", compact=False
    )
    assert ran == [("compact", {"level": 1})]
    assert flag.value.code and tool_names(provider, fake_llm.requests[0].body) == [
        "compact",
        "recall",
        "search_history",
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_definitions_offers_compact_beside_the_recall_tools(provider):
    plain = declared(tool_definitions(provider))
    assert [t["name"] for t in plain] == ["recall", "search_history"]
    offered = declared(tool_definitions(provider, compact=True))
    assert [t["name"] for t in offered] == ["recall", "search_history", "compact"]
    assert "focus" in schema(offered[2])["properties"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def async_sdk_call(provider: str, fake_llm, opened: list):
    """The async client's call (not streamed); its close goes to `opened`, awaited on
    the loop that used it."""
    if provider == "anthropic":
        client = anthropic_sdk.AsyncAnthropic(api_key="k", base_url=fake_llm.url, max_retries=0)
        opened.append(client.close)
        return lambda request: client.messages.create(
            model="claude-sonnet-4-6", max_tokens=512, **request
        )
    if provider.startswith("gemini"):
        options = types.HttpOptions(base_url=fake_llm.url, api_version="v1beta")
        aio = genai.Client(api_key="k", http_options=options).aio
        opened.append(aio.aclose)
        if provider == "gemini":
            return lambda request: aio.models.generate_content(model="gemini-2.5-flash", **request)
        return lambda request: aio.interactions.create(model="gemini-2.5-flash", **request)
    chat = openai.AsyncOpenAI(api_key="k", base_url=fake_llm.openai_url, max_retries=0)
    opened.append(chat.close)
    if provider == "openai_responses":
        return lambda request: chat.responses.create(model="gpt-5", **request)
    return lambda request: chat.chat.completions.create(model="gpt-4.1", **request)


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_achat_step_offers_compact_and_the_next_request_carries_the_summary(
    provider, fake_llm, settings
):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = SETTINGS
    conversation = await sync_to_async(long_conversation)()
    fake_llm.script(KIND[provider], ok(tool_calls=[compact_call()]), ok(text="The report."))
    opened: list = []
    call_model = async_sdk_call(provider, fake_llm, opened)
    offered = {"provider": provider, "recall": True, "compact": True}

    try:
        step = await achat_step(conversation, call_model, **offered)
        answered = await sync_to_async(answer_tool_calls)(
            conversation, step.tool_calls, no_host_tool
        )
        last = await achat_step(conversation, call_model, **offered)
    finally:
        for close in opened:
            await close()
        await sync_to_async(connections.close_all)()

    assert answered[0].content.startswith("Compacted:")
    assert last.text == "The report."
    first, second = chat_requests(fake_llm, provider)
    assert OLD_MARKER in json.dumps(first) and OLD_MARKER not in json.dumps(second)
