"""With SUMMARY_REQUEST "cached_suffix" a window shift asks the
CHAT model with the conversation's own request (system, tools, messages, cache
breakpoints as the last chat call sent them) and the summary instruction appended,
so the provider reads all but the instruction from its prompt cache. Real anthropic
and google-genai SDKs against the testing kit's fake server with prompt caching."""

from __future__ import annotations

import copy
import json

import anthropic
import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings
from google import genai
from google.genai import types

from assistant.cost.stored_figures import conversation_costs
from assistant.history.state_writes import read_state
from assistant.models import CompactionEvent, Message, MetadataKeys
from assistant.providers.summary_prompt import (
    describe_message,
    suffix_instruction,
    summary_guidance,
)
from assistant.services import add_message, chat_step, remember_chat_tools
from assistant.summary.guidance import guidance_for
from assistant.testing.fake_provider import DEFAULT_SUMMARY, FakeProvider, ok
from assistant.window.context import as_neutral
from tests.builders import html

pytestmark = pytest.mark.django_db

CHAT_MODEL = "claude-chat-under-test"
GEMINI_CHAT = "gemini-chat-under-test"
TOOLS = [
    {
        "name": "get_blog_post",
        "description": "A post by id, as HTML.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
    }
]
SUFFIX = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "CONTEXT_TOKEN_THRESHOLD": 12_000,
    "MAX_RECENT_TOKENS": 4_000,
    "MAX_MESSAGES_BEFORE_SUMMARY": 1_000,
    "SUMMARY_REQUEST": "cached_suffix",
}
LABEL = "Summary of the earlier part of this conversation:\n"


@pytest.fixture
def fake():
    server = FakeProvider(prompt_cache=True).start()
    yield server
    server.stop()


def run_loop(conversation, fake, call_model, script, turns=12):
    """Each turn: a tool call, its 8,000-character result, an answer. The replies are
    scripted as the chat calls them, so a summary request gets the default summary."""
    for turn in range(turns):
        replies = [
            ok(tool_calls=[{"name": "get_blog_post", "arguments": {"id": turn}}]),
            ok(f"Post {turn} read."),
        ]

        def scripted(request, replies=replies):
            script(replies.pop(0))
            return call_model(request)

        add_message(conversation, "user", f"Read post {turn}")
        while True:
            step = chat_step(conversation, scripted, tools=TOOLS, provider=call_model.provider)
            if not step.tool_calls:
                break
            for call in step.tool_calls:
                page = html(8_000, marker=f"post {call['arguments']['id']} ")
                add_message(conversation, "tool", page, tool_call_id=call["id"])


def plain(blocks):
    return [{k: v for k, v in block.items() if k != "cache_control"} for block in blocks]


def expected_instruction(event: CompactionEvent, previous: bool) -> str:
    """The instruction for the split the event recorded: from the first message the
    request carried after the old cutoff to the first one after the new cutoff."""
    through = event.details["through_message_id"]
    rows = list(Message.objects.filter(conversation=event.conversation).order_by("id"))
    before = CompactionEvent.objects.filter(
        conversation=event.conversation, kind="window_summary", id__lt=event.id
    ).last()
    old = before.details["through_message_id"] if before else 0
    first = next(row for row in rows if row.pk > old)
    kept = next(row for row in rows if row.pk > through)
    # Under the conversation's guidance: its language ("Read post 3": English).
    with summary_guidance(guidance_for(event.conversation_id)):
        return suffix_instruction(
            describe_message(as_neutral(first)), describe_message(as_neutral(kept)), previous
        )


def claude_caller(fake):
    """The host's model function: the real anthropic SDK against the fake server."""
    client = anthropic.Anthropic(api_key="test-key", base_url=fake.url, max_retries=0)

    def call_model(request):
        return client.messages.create(model=CHAT_MODEL, max_tokens=1024, **request)

    call_model.provider = "anthropic"
    return call_model


def test_a_shift_sends_the_cached_chat_request_with_the_instruction_appended(
    conversation, fake, settings
):
    # One settings override only (the fixture): mixed with override_settings it leaks.
    settings.ASSISTANT_COMPACTION = SUFFIX
    settings.ANTHROPIC_CHAT_MODEL = CHAT_MODEL
    fake.use_anthropic(settings)
    run_loop(conversation, fake, claude_caller(fake), fake.script_anthropic)

    requests = fake.requests_for("anthropic.messages")
    summaries = [
        i
        for i, r in enumerate(requests)
        if r.body["messages"][-1]["content"][-1].get("text", "").startswith("Stop the conversation")
    ]
    events = list(
        CompactionEvent.objects.filter(conversation=conversation, kind="window_summary").order_by(
            "id"
        )
    )
    assert len(summaries) == len(events) == 2
    for number, (index, event) in enumerate(zip(summaries, events, strict=True)):
        summary, previous = requests[index].body, requests[index - 1].body
        # The chat model, the same system blocks and tools (cache breakpoints included).
        assert summary["model"] == CHAT_MODEL
        assert summary["system"] == previous["system"]
        assert summary["tools"] == previous["tools"]
        # Every message of the previous chat request, then what came since, then the
        # instruction as the last block of the last (user) turn.
        sent = previous["messages"]
        assert [plain(m["content"]) for m in summary["messages"][: len(sent)]] == [
            plain(m["content"]) for m in sent
        ]
        assert summary["messages"][-1]["content"][-1] == {
            "type": "text",
            "text": expected_instruction(event, previous=number > 0),
        }
        # The provider read everything the previous request had cached.
        usage, before = requests[index].usage, requests[index - 1].usage
        read = before["cache_read_input_tokens"] + before["cache_creation_input_tokens"]
        assert usage["cache_read_input_tokens"] == read
        assert event.summarizer_model == CHAT_MODEL
        assert event.summarizer_input_tokens == (
            usage["input_tokens"]
            + usage["cache_read_input_tokens"]
            + usage["cache_creation_input_tokens"]
        )
        assert event.details["summarizer_cache_read_tokens"] == read
        assert (
            event.details["summarizer_cache_write_tokens"] == (usage["cache_creation_input_tokens"])
        )
        # The next chat request carries the stored summary.
        stored = requests[index + 1].body["system"][-1]["text"]
        assert stored.startswith(LABEL + DEFAULT_SUMMARY)
    assert read_state(conversation.pk)[MetadataKeys.COMPACTION_SUMMARY] == (
        requests[-1].body["system"][-1]["text"].removeprefix(LABEL)
    )


def test_a_gemini_shift_repeats_the_chat_request_so_implicit_caching_reads_it(
    conversation, fake, settings
):
    settings.ASSISTANT_COMPACTION = SUFFIX
    settings.GEMINI_CHAT_MODEL = GEMINI_CHAT
    fake.use_gemini(settings)
    options = types.HttpOptions(base_url=fake.url, api_version="v1beta")
    client = genai.Client(api_key="test-key", http_options=options)

    def call_model(request):
        return client.models.generate_content(model=GEMINI_CHAT, **request)

    call_model.provider = "gemini"
    run_loop(conversation, fake, call_model, fake.script_gemini)

    requests = fake.requests_for("gemini.generate")
    summaries = [
        i
        for i, r in enumerate(requests)
        if r.body["contents"][-1]["parts"][-1].get("text", "").startswith("Stop the conversation")
    ]
    assert len(summaries) == 2
    for index in summaries:
        summary, previous = requests[index], requests[index - 1]
        assert summary.path.endswith(f"/models/{GEMINI_CHAT}:generateContent")
        assert summary.body["systemInstruction"] == previous.body["systemInstruction"]
        assert summary.body["tools"] == previous.body["tools"]
        sent = previous.body["contents"]
        assert summary.body["contents"][: len(sent) - 1] == sent[:-1]
        # Implicit caching read all of the previous request back.
        assert summary.usage["cachedContentTokenCount"] == segment_tokens(previous.body)
    events = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert [e.summarizer_model for e in events] == [GEMINI_CHAT, GEMINI_CHAT]


def segment_tokens(body: dict) -> int:
    """A request's whole prefix as the fake's implicit cache counts it: its system
    instruction and tools, then each content (a token per four characters of JSON)."""
    config = {k: body[k] for k in ("systemInstruction", "tools") if body.get(k)}
    return sum(len(json.dumps(segment)) // 4 for segment in [config, *body["contents"]])


@override_settings(ASSISTANT_COMPACTION=SUFFIX, ASSISTANT_SUMMARIZER="auto")
def test_with_no_key_the_offline_transcript_summarizer_is_used(conversation, fake):
    run_loop(conversation, fake, claude_caller(fake), fake.script_anthropic)

    requests = fake.requests_for("anthropic.messages")
    assert len(requests) == 24  # the chat calls only: two per turn
    events = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert [e.summarizer_model for e in events] == ["offline-summarizer", "offline-summarizer"]
    assert [e.details.get("summarizer_cache_read_tokens") for e in events] == [None, None]


@override_settings(ASSISTANT_COMPACTION=SUFFIX)
def test_the_chat_tools_are_kept_as_sent_and_bad_ones_refused(conversation):
    tools = copy.deepcopy(TOOLS)
    tools[0]["parameters"] = {"type": "object", "required": ["id"], "properties": {}}
    remember_chat_tools(conversation, tools)
    stored = read_state(conversation.pk)[MetadataKeys.CHAT_TOOLS]
    # JSON text, keys in the host's order (jsonb would sort them).
    assert stored == (
        '[{"name": "get_blog_post", "description": "A post by id, as HTML.", '
        '"parameters": {"type": "object", "required": ["id"], "properties": {}}}]'
    )
    with pytest.raises(ValidationError) as refused:
        remember_chat_tools(conversation, [{"description": "no name"}])
    assert refused.value.code == "invalid_tools"
    remember_chat_tools(conversation, None)
    assert read_state(conversation.pk)[MetadataKeys.CHAT_TOOLS] is None


def test_in_transcript_mode_no_tools_are_stored(conversation):
    remember_chat_tools(conversation, TOOLS)
    assert read_state(conversation.pk)[MetadataKeys.CHAT_TOOLS] is None


@override_settings(
    ASSISTANT_MODEL_PRICES={
        "claude-chat-under-test": {
            "input": 3.0,
            "output": 15.0,
            "cache_read": 0.3,
            "cache_write": 3.75,
        }
    }
)
def test_cost_prices_the_summarizers_cache_reads_at_the_cache_price(conversation):
    CompactionEvent.objects.create(
        conversation=conversation,
        kind="window_summary",
        tokens_before=20_000,
        tokens_after=5_000,
        messages_affected=10,
        summarizer_model=CHAT_MODEL,
        summarizer_input_tokens=1_000_000,
        summarizer_output_tokens=0,
        details={
            "summarizer_cache_read_tokens": 900_000,
            "summarizer_cache_write_tokens": 50_000,
        },
    )
    cost = conversation_costs([conversation.pk])[conversation.pk]
    # 50k uncached at 3.0, 900k read at 0.3, 50k written at 3.75 (per million).
    assert cost.summarizer == pytest.approx(0.15 + 0.27 + 0.1875)
