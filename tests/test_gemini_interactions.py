"""chat_step(..., provider="gemini_interactions") through the real google-genai SDK's
`client.interactions.create` to the testing kit's fake server, which keeps the
interactions as Google's server does (previous_interaction_id chains)."""

from __future__ import annotations

import pytest
from google import genai
from google.genai import types

from assistant.models import CompactionEvent
from assistant.services import add_message, chat_step
from assistant.testing.fake_provider import ok, prompt_tokens
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
