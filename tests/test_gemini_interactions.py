"""chat_step(..., provider="gemini_interactions") through the real google-genai SDK's
`client.interactions.create` to the testing kit's fake server, which keeps the
interactions as Google's server does (previous_interaction_id chains)."""

from __future__ import annotations

import pytest
from google import genai
from google.genai import interactions, types
from pydantic import TypeAdapter

from assistant.models import CompactionEvent
from assistant.providers import CachedRequest, ProviderError, get_provider, summarize
from assistant.providers.gemini.interactions import GEMINI_INTERACTIONS
from assistant.services import add_message, chat_step
from assistant.testing.fake_provider import (
    DEFAULT_SUMMARY,
    SUMMARY_REQUEST,
    ok,
    prompt_tokens,
    raw,
)
from tests.builders import html

pytestmark = pytest.mark.django_db

MODEL = "gemini-2.5-flash"
KIND = "gemini.interactions"
TOOLS = [
    {
        "name": "read_file",
        "description": "A file of the repository, by path.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
TRIGGER = 8_000


def client_of(fake) -> genai.Client:
    return genai.Client(
        api_key="test-key-gemini", http_options=types.HttpOptions(base_url=fake.url)
    )


def interactions_call(client):
    def call_model(request):
        return client.interactions.create(
            model=MODEL, generation_config={"max_output_tokens": 256}, **request
        )

    return call_model


def call(index: int) -> dict:
    return {"id": f"call_{index:03d}", "name": "read_file", "arguments": {"path": f"/f{index}.py"}}


@pytest.fixture
def small_trigger(settings):
    settings.ASSISTANT_SUMMARIZER = "offline"
    settings.ASSISTANT_COMPACTION = {"CONTEXT_TOKEN_THRESHOLD": TRIGGER}


def run_agent_turn(fake_llm, conversation, steps: int):
    client = client_of(fake_llm)
    fake_llm.script_gemini_interactions(
        *[ok(tool_calls=[call(i)]) for i in range(steps)], ok("All read.")
    )
    add_message(conversation, "user", "Read every module and report.")
    for index in range(steps):
        step = chat_step(
            conversation, interactions_call(client), provider="gemini_interactions", tools=TOOLS
        )
        assert step.message.tool_calls[0]["id"] == f"call_{index:03d}"
        add_message(
            conversation,
            "tool",
            html(4000, marker=f"module {index} "),
            tool_call_id=call(index)["id"],
        )
    return chat_step(
        conversation, interactions_call(client), provider="gemini_interactions", tools=TOOLS
    )


def test_an_interactions_agent_turn_stays_bounded_with_every_function_call_pair_intact(
    fake_llm, conversation, small_trigger
):
    last = run_agent_turn(fake_llm, conversation, 30)

    assert last.text == "All read."
    requests = fake_llm.requests_for(KIND)
    assert len(requests) == 31
    for request in requests:
        steps = request.body["input"]
        assert steps[0]["type"] == "user_input"
        calls = [s["id"] for s in steps if s["type"] == "function_call"]
        results = [s["call_id"] for s in steps if s["type"] == "function_result"]
        assert calls == results  # each call answered, in order (the fake refuses less)
        assert prompt_tokens(request.body) < 2 * TRIGGER
    sizes = [prompt_tokens(r.body) for r in requests]
    assert max(sizes) < 2 * TRIGGER < sum(sizes) / 4
    assert CompactionEvent.objects.filter(conversation=conversation, kind="window_summary").exists()
    answers = conversation.messages.filter(role="assistant")
    assert set(answers.values_list("provider", "model")) == {("gemini_interactions", MODEL)}
    body = requests[-1].body
    assert body["store"] is False
    assert body["tools"][0] == {"type": "function", **TOOLS[0]}


def test_no_request_after_a_shift_carries_the_servers_uncompacted_history(
    fake_llm, conversation, small_trigger
):
    run_agent_turn(fake_llm, conversation, 30)
    shifts = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert shifts.count() >= 1

    requests = fake_llm.requests_for(KIND)
    for request in requests:
        assert "previous_interaction_id" not in request.body
        assert request.history == []  # the server answered over this input alone
    # What the server keeps: nothing (store=False), so no chain could bring the
    # summarized steps back.
    assert fake_llm.interactions.history("int_unknown") is None
    # The newest request holds the summary, not the first modules' results.
    newest = requests[-1].body
    assert "module 0 " not in str(newest["input"])
    assert "module 29 " in str(newest["input"])


def test_the_fake_keeps_interactions_and_answers_a_chain_over_its_history(fake_llm):
    client = client_of(fake_llm)
    fake_llm.script_gemini_interactions(ok("First."), ok("Second."))
    first = client.interactions.create(model=MODEL, input="module 0 says hello")
    client.interactions.create(model=MODEL, input="And then?", previous_interaction_id=first.id)

    chained = fake_llm.requests_for(KIND)[1]
    assert "module 0 says hello" in str(chained.history)
    assert first.usage.total_input_tokens > 0


# --- The summarizer on the Interactions API ---------------------------------------------

TRANSCRIPT = "[user] Restore post-17 please.\n[assistant] Restored post-17."


def test_a_summary_request_goes_through_interactions_create_unstored_and_unchained(
    fake_llm, settings
):
    fake_llm.use_gemini_interactions(settings, key="test-key-gemini-SECRET")
    settings.SUMMARY_MAX_OUTPUT_TOKENS = 1024
    fake_llm.script_summaries(
        ok(
            usage={"total_input_tokens": 700, "total_cached_tokens": 200, "total_output_tokens": 90}
        ),
        provider="gemini_interactions",
    )

    result = summarize(TRANSCRIPT)

    (request,) = fake_llm.requests
    assert (request.kind, request.path, request.summary) == (KIND, "/v1/interactions", True)
    assert request.headers["x-goog-api-key"] == "test-key-gemini-SECRET"
    body = request.body
    assert body["model"] == "gemini-2.5-flash-lite"  # GEMINI_SUMMARY_MODEL
    assert body["store"] is False
    assert "previous_interaction_id" not in body
    assert "Do not continue the conversation" in body["system_instruction"]
    (step,) = body["input"]
    assert step["type"] == "user_input"
    assert "post-17" in step["content"][0]["text"]
    assert body["generation_config"]["max_output_tokens"] == 1024
    assert fake_llm.interactions.history(None) == []  # nothing kept: store=False
    assert (result.provider, result.model, result.fallback) == (
        "gemini_interactions",
        "gemini-2.5-flash-lite",
        False,
    )
    assert (result.usage.input_tokens, result.usage.cache_read_tokens) == (500, 200)
    assert result.usage.output_tokens == 90


def test_an_unfinished_interaction_with_no_text_is_a_provider_error_not_a_summary(
    fake_llm, settings
):
    fake_llm.use_gemini_interactions(settings)
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    reply = {
        "id": "int_1",
        "status": "incomplete",
        "model": "gemini-2.5-flash-lite",
        "steps": [{"type": "thought", "signature": "c2ln"}],
        "usage": {"total_input_tokens": 40, "total_output_tokens": 1024},
    }
    fake_llm.script_summaries(raw(200, reply), provider="gemini_interactions")

    with pytest.raises(ProviderError) as raised:
        summarize(TRANSCRIPT)

    assert raised.value.provider == "gemini_interactions"
    assert "incomplete" in str(raised.value)


def test_a_cached_suffix_summary_sends_the_chat_request_then_the_instruction(fake_llm, settings):
    fake_llm.use_gemini_interactions(settings)
    messages = [
        {"role": "user", "content": "Show post 7"},
        {"role": "assistant", "content": "", "tool_calls": [call(7)]},
        {
            "role": "tool",
            "content": "Hello",
            "tool_call_id": call(7)["id"],
            "tool_name": "read_file",
        },
    ]
    instruction = f"Summarize this conversation. {SUMMARY_REQUEST}."
    request = CachedRequest(
        system="System prompt",
        summaries=["old summary"],
        messages=messages,
        instruction=instruction,
        transcript=TRANSCRIPT,
        tools=TOOLS,
    )
    chat_body = GEMINI_INTERACTIONS.request("System prompt", ["old summary"], messages, TOOLS)

    result = get_provider().summarize_cached(request)

    (sent,) = fake_llm.requests_for(KIND)
    body = sent.body
    assert body["model"] == "gemini-2.5-flash"  # the chat model: its cache holds the prefix
    assert body["system_instruction"] == chat_body["system_instruction"]
    assert body["tools"] == chat_body["tools"]
    assert body["input"][:-1] == chat_body["input"]  # the chat's steps, unchanged
    assert body["input"][-1] == {
        "type": "user_input",
        "content": [{"type": "text", "text": instruction}],
    }
    assert body["generation_config"]["tool_choice"] == "none"  # a summary, not a call
    assert body["store"] is False and "previous_interaction_id" not in body
    assert (result.provider, result.fallback) == ("gemini_interactions", False)
    assert result.text == DEFAULT_SUMMARY


def test_a_window_shift_is_summarized_through_interactions(fake_llm, conversation, settings):
    fake_llm.use_gemini_interactions(settings)
    settings.ASSISTANT_COMPACTION = {"CONTEXT_TOKEN_THRESHOLD": TRIGGER}

    run_agent_turn(fake_llm, conversation, 12)

    shift = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert shift.exists()
    assert set(shift.values_list("summarizer_model", flat=True)) == {"gemini-2.5-flash-lite"}
    summaries = [r for r in fake_llm.requests_for(KIND) if r.summary]
    assert summaries
    for request in summaries:
        assert request.body["store"] is False
        assert "previous_interaction_id" not in request.body
        assert request.history == []
    # The newest chat request carries the summary the fake's summarizer wrote.
    newest = [r for r in fake_llm.requests_for(KIND) if not r.summary][-1].body
    assert "The fake provider produced this summary." in newest["system_instruction"]


# --- Streams: the answer assembled from the step events ---------------------------------


def test_a_streamed_agent_step_assembles_the_call_from_step_start_and_arguments_delta(
    fake_llm, conversation, small_trigger
):
    client = client_of(fake_llm)
    fake_llm.script_gemini_interactions(ok("Reading it.", tool_calls=[call(1)]), ok("Done."))
    add_message(conversation, "user", "Read /f1.py")
    deltas: list[str] = []

    def streamed(request):
        return client.interactions.create(model=MODEL, stream=True, **request)

    step = chat_step(
        conversation, streamed, provider="gemini_interactions", tools=TOOLS, on_text=deltas.append
    )

    assert deltas == ["Reading ", "it."]
    assert step.message.tool_calls == [call(1)]  # id, name and the arguments' JSON
    add_message(conversation, "tool", "print('one')", tool_call_id=call(1)["id"])
    last = chat_step(conversation, streamed, provider="gemini_interactions", tools=TOOLS)
    assert last.text == "Done."
    second = fake_llm.requests_for(KIND)[1].body
    assert [s["type"] for s in second["input"]] == [
        "user_input",
        "model_output",
        "function_call",
        "function_result",
    ]
    assert second["stream"] is True and second["store"] is False


def sse(*events: dict) -> list:
    """Events as the SDK parses them (its InteractionSSEEvent union)."""
    return [TypeAdapter(interactions.InteractionSSEEvent).validate_python(e) for e in events]


def test_a_stream_of_continuation_hops_is_read_whole_with_the_hops_usage_summed():
    """The SDK's automatic continuation yields hop after hop (google/genai/_gaos/
    google_genai.py's create: each hop's usage its own, requires_continuation not the
    end); shaped as its own fixtures (tests/interactions/test_automatic_continuation.py)."""
    usage = {"total_input_tokens": 100, "total_cached_tokens": 40, "total_output_tokens": 20}
    hop = [
        {"event_type": "interaction.created", "interaction": {"id": "a", "status": "in_progress"}},
        {"event_type": "step.start", "index": 0, "step": {"type": "model_output"}},
        {"event_type": "step.delta", "index": 0, "delta": {"type": "text", "text": "Part 1 "}},
        {"event_type": "step.stop", "index": 0},
    ]
    first_end = {"id": "a", "status": "requires_continuation", "usage": usage}
    last_end = {"id": "b", "status": "completed", "model": MODEL, "usage": usage}
    reader = GEMINI_INTERACTIONS.stream_reader(type("Stream", (), {})())
    events = sse(
        *hop,
        {"event_type": "interaction.completed", "interaction": first_end},
        {**hop[0], "interaction": {"id": "b", "status": "in_progress"}},
        hop[1],
        {**hop[2], "delta": {"type": "text", "text": "Part 2"}},
        {"event_type": "interaction.completed", "interaction": last_end},
    )

    texts = []
    for number, event in enumerate(events):
        texts.append(reader.text(event))
        if number == 4:  # the first hop's end is not the answer's
            assert reader.final() is None

    assert "".join(texts) == "Part 1 Part 2"
    result = reader.final()
    assert (result.text, result.model, result.stop_reason) == ("Part 1 Part 2", MODEL, "completed")
    assert (result.usage.input_tokens, result.usage.cache_read_tokens) == (120, 80)
    assert result.usage.output_tokens == 40
