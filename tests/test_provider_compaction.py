"""The providers' own compaction, driven by the real anthropic and openai
clients against the testing kit's fake server: Anthropic's compaction block
(threshold and on-demand, streamed too) and the Responses API's compaction item are
recorded with their message and sent back exactly, the originals stay, the
compaction's iterations are priced, and a failed one falls back to ours."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connections
from django.test import override_settings

from assistant.cost.pricing import conversation_cost, price_of
from assistant.models import CompactionEvent, Conversation, Message
from assistant.post_exchange.pipeline import shift_ahead
from assistant.providers.anthropic.wire import ANTHROPIC, MIN_TRIGGER, anthropic_usage
from assistant.providers.compaction_blocks import validated
from assistant.recall import run_tool_call
from assistant.services import achat_step, add_message, answer_tool_calls, chat_step, pin_message
from assistant.settings.conf import compaction_config
from assistant.testing.fake_compaction import ANTHROPIC_COMPACTION, SUMMARY_TOKENS, signature
from assistant.testing.fake_openai import RESPONSES_COMPACT
from assistant.testing.fake_provider import FakeProvider, ok, overloaded, prompt_tokens, raw

pytestmark = pytest.mark.django_db

MODEL = "claude-sonnet-4-6"
TOOLS = [
    {
        "name": "get_log",
        "description": "A build log by id.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
    }
]
PROVIDER = {"PROVIDER_COMPACTION": "provider"}


def log(number: int, chars: int = 70_000) -> str:
    line = f"build {number}: step ok, artifact sha-{number:04d} written\n"
    return (line * (chars // len(line) + 1))[:chars]


def run_log(name: str, arguments: dict) -> str:
    return log(arguments["id"])


def claude(fake: FakeProvider) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=fake.url, max_retries=0)


def beta_call(client: anthropic.Anthropic):
    def call_model(request):
        return client.beta.messages.create(model=MODEL, max_tokens=1024, **request)

    return call_model


def turn(conversation, call_model, text: str, *, provider: str = "anthropic"):
    """One user request: tool calls answered until the model answers in words."""
    add_message(conversation, "user", text)
    steps = []
    while True:
        step = chat_step(conversation, call_model, provider=provider, tools=TOOLS)
        steps.append(step)
        if not step.tool_calls:
            return steps
        answer_tool_calls(conversation, step.tool_calls, run_log)


def script_logs(fake: FakeProvider, kind: str, ids: list[int], **last) -> None:
    calls = [ok(tool_calls=[{"name": "get_log", "arguments": {"id": i}}]) for i in ids]
    fake.script(kind, *calls, ok("All builds are green.", **last))


def sent(fake: FakeProvider, kind: str = "anthropic.messages") -> list[dict]:
    return [request.body for request in fake.requests_for(kind)]


def carrier_blocks(message: Message) -> list[dict]:
    """What the request sends of the message after the block: its text, its calls."""
    blocks = [{"type": "text", "text": message.content}] if message.content else []
    return blocks + [
        {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
        for c in message.tool_calls or []
    ]


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True)


@override_settings(ASSISTANT_COMPACTION=PROVIDER)
def test_anthropic_threshold_compaction_is_recorded_and_sent_back_verbatim(fake_llm, conversation):
    call_model = beta_call(claude(fake_llm))
    script_logs(fake_llm, "anthropic.messages", [1, 2, 3, 4])
    steps = turn(conversation, call_model, "Check builds 1 to 4")
    fake_llm.script("anthropic.messages", ok("Build 4 wrote sha-0004."))
    turn(conversation, call_model, "Which artifact did build 4 write?")

    bodies = sent(fake_llm)
    edit = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}
    assert all(body["context_management"] == {"edits": [edit]} for body in bodies)
    headers = fake_llm.requests_for("anthropic.messages")[0].headers
    assert "compact-2026-01-12" in headers["anthropic-beta"]
    # The answer that compacted carries the block, stored as the API sent it.
    carrier = next(step for step in steps if step.response.content[0].type == "compaction")
    block = carrier.response.content[0].to_dict()
    stored = Message.objects.get(pk=carrier.message.pk).provider_compaction
    assert canonical(stored["block"]) == canonical(block)
    assert block["signature"] == signature(block["content"])
    assert stored["live"] is True and stored["on_demand"] is False
    # Every later request starts with that answer, the block first, byte for byte: the
    # messages before it are not sent (the server would drop them).
    later = bodies[steps.index(carrier) + 1 :]
    assert later
    for body in later:
        assert body["messages"][0]["role"] == "assistant"
        assert canonical(body["messages"][0]["content"][0]) == canonical(block)
        assert all(b["type"] != "compaction" for m in body["messages"][1:] for b in m["content"])
    # The originals stay, and recall reaches one the request no longer carries.
    first_log = Message.objects.filter(conversation=conversation, role="tool").first()
    assert first_log.content == log(1)
    assert log(1)[:500] in run_tool_call(conversation, "recall", {"handle": f"m{first_log.pk}"})
    # No compaction of ours ran: the provider's is the one event.
    kinds = list(CompactionEvent.objects.filter(conversation=conversation).values_list("kind"))
    assert kinds == [("provider",)]


@override_settings(ASSISTANT_COMPACTION=PROVIDER)
def test_the_compaction_iterations_are_priced_and_the_size_is_the_message_iterations(
    fake_llm, conversation
):
    call_model = beta_call(claude(fake_llm))
    script_logs(fake_llm, "anthropic.messages", [1, 2, 3, 4])
    steps = turn(conversation, call_model, "Check builds 1 to 4")

    carrier = next(step for step in steps if step.response.content[0].type == "compaction")
    compaction, answered = carrier.response.usage.iterations
    assert (compaction.type, answered.type) == ("compaction", "message")
    message = Message.objects.get(pk=carrier.message.pk)
    # The context size is the message iteration's, far below what was compacted.
    assert message.input_tokens == answered.input_tokens < compaction.input_tokens
    event = CompactionEvent.objects.get(conversation=conversation, kind="provider")
    assert event.summarizer_input_tokens == compaction.input_tokens
    assert event.summarizer_output_tokens == compaction.output_tokens == SUMMARY_TOKENS
    assert event.summarizer_model == MODEL
    assert event.details["message_id"] == message.pk
    price = price_of(MODEL)
    expected = (
        compaction.input_tokens * price.input + compaction.output_tokens * price.output
    ) / 1_000_000
    cost, _ = conversation_cost(conversation)
    assert cost.summarizer == pytest.approx(expected)
    assert cost.summarizer_input_tokens == compaction.input_tokens


@override_settings(ASSISTANT_COMPACTION=PROVIDER)
def test_a_failed_provider_compaction_falls_back_to_ours(fake_llm, conversation):
    call_model = beta_call(claude(fake_llm))
    calls = [ok(tool_calls=[{"name": "get_log", "arguments": {"id": i}}]) for i in (1, 2, 3)]
    fake_llm.script(
        "anthropic.messages",
        *calls,
        ok(tool_calls=[{"name": "get_log", "arguments": {"id": 4}}], compaction="failed"),
        ok("All builds are green."),
    )
    turn(conversation, call_model, "Check builds 1 to 4")

    failed = Message.objects.get(conversation=conversation, provider_compaction__isnull=False)
    assert failed.provider_compaction["live"] is False
    assert failed.provider_compaction["block"]["content"] is None
    kinds = list(
        CompactionEvent.objects.filter(conversation=conversation)
        .order_by("id")
        .values_list("kind", flat=True)
    )
    # The next step ran our pre-call hook, which shifted the window past the trigger.
    assert kinds[0] == "provider_failed"
    assert "window_summary" in kinds
    last = sent(fake_llm)[-1]
    assert last["messages"][0]["role"] == "user"
    assert all(b["type"] != "compaction" for m in last["messages"] for b in m["content"])
    assert prompt_tokens(last) < 50_000  # ours brought it under the trigger


@override_settings(ASSISTANT_COMPACTION=PROVIDER)
def test_a_streamed_compaction_is_recorded_from_its_delta(fake_llm, conversation):
    client = claude(fake_llm)

    def call_model(request):
        return client.beta.messages.stream(model=MODEL, max_tokens=1024, **request)

    script_logs(fake_llm, "anthropic.messages", [1, 2, 3, 4])
    texts: list[str] = []
    add_message(conversation, "user", "Check builds 1 to 4")
    while True:
        step = chat_step(conversation, call_model, tools=TOOLS, on_text=texts.append)
        if not step.tool_calls:
            break
        answer_tool_calls(conversation, step.tool_calls, run_log)
    fake_llm.script("anthropic.messages", ok("Done."))
    add_message(conversation, "user", "Thanks")
    chat_step(conversation, call_model, tools=TOOLS)

    carrier = Message.objects.get(conversation=conversation, provider_compaction__isnull=False)
    block = carrier.provider_compaction["block"]
    assert block["content"].startswith("<summary>")
    assert block["signature"] == signature(block["content"])
    # The fake refuses a block whose content does not match its signature: it was sent
    # back as the stream assembled it.
    last = sent(fake_llm)[-1]
    assert canonical(last["messages"][0]["content"][0]) == canonical(block)
    assert "".join(texts).endswith("All builds are green.")


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "PROVIDER_COMPACTION": "auto",
        "CONTEXT_TOKEN_THRESHOLD": 20_000,
        "MAX_RECENT_TOKENS": 8_000,
    }
)
def test_auto_makes_our_window_shift_an_on_demand_compaction(fake_llm, conversation):
    call_model = beta_call(claude(fake_llm))
    for number in range(1, 9):
        fake_llm.script(
            "anthropic.messages",
            ok(tool_calls=[{"name": "get_log", "arguments": {"id": number}}]),
            ok(f"Build {number} is green."),
        )
        turn(conversation, call_model, f"Check build {number}")

    asked = sent(fake_llm, ANTHROPIC_COMPACTION)
    assert asked, "no on-demand compaction was asked for"
    assert asked[0]["compaction"] == {"type": "summarize"}
    assert "context_management" not in asked[0]
    headers = fake_llm.requests_for(ANTHROPIC_COMPACTION)[0].headers
    assert "compact-2026-09-04" in headers["anthropic-beta"]
    carrier = (
        Message.objects.filter(conversation=conversation, provider_compaction__isnull=False)
        .order_by("id")
        .last()
    )
    stored = carrier.provider_compaction
    assert stored["on_demand"] is True and stored["live"] is True
    # The block goes first, in place of what it summarizes; the carrier's own text after.
    every = [request.body for request in fake_llm.requests]
    following = every[every.index(asked[-1]) + 1]
    assert canonical(following["messages"][0]["content"][0]) == canonical(stored["block"])
    assert following["messages"][0]["role"] == carrier.role
    assert following["messages"][0]["content"][1:] == carrier_blocks(carrier)
    events = CompactionEvent.objects.filter(conversation=conversation)
    assert events.filter(kind="provider").count() == len(asked)
    assert not events.filter(kind="window_summary").exists()
    assert events.get(details__message_id=carrier.pk).summarizer_input_tokens > 0
    # Nothing before the carrier was changed.
    assert Message.objects.filter(conversation=conversation, role="tool").first().content == log(1)


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "PROVIDER_COMPACTION": "auto",
        "CONTEXT_TOKEN_THRESHOLD": 20_000,
        "MAX_RECENT_TOKENS": 8_000,
    }
)
def test_auto_falls_back_to_our_shift_when_the_on_demand_compaction_fails(fake_llm, conversation):
    call_model = beta_call(claude(fake_llm))
    # Every compaction request gets a block without a summary.
    fake_llm.script(ANTHROPIC_COMPACTION, ok(compaction="failed"), repeat=True)
    for number in range(1, 9):
        fake_llm.script(
            "anthropic.messages",
            ok(tool_calls=[{"name": "get_log", "arguments": {"id": number}}]),
            ok(f"Build {number} is green."),
        )
        turn(conversation, call_model, f"Check build {number}")

    events = CompactionEvent.objects.filter(conversation=conversation)
    assert events.filter(kind="provider_failed").exists()
    assert events.filter(kind="window_summary").exists()
    assert not Message.objects.filter(
        conversation=conversation, provider_compaction__live=True
    ).exists()


AUTO = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "PROVIDER_COMPACTION": "auto",
    "CONTEXT_TOKEN_THRESHOLD": 20_000,
    "MAX_RECENT_TOKENS": 8_000,
}


def responses_turns(fake: FakeProvider, conversation, builds: int = 8) -> None:
    """`builds` requests on the Responses API through the host's own client."""
    client = openai.OpenAI(api_key="test-key", base_url=fake.openai_url, max_retries=0)

    def call_model(request):
        return client.responses.create(model="gpt-5", **request)

    for number in range(1, builds + 1):
        fake.script(
            "openai.responses",
            ok(tool_calls=[{"name": "get_log", "arguments": {"id": number}}]),
            ok(f"Build {number} is green."),
        )
        turn(conversation, call_model, f"Check build {number}", provider="openai_responses")


def app_openai_client(settings, fake: FakeProvider, **more) -> None:
    """PROVIDER_COMPACTION "auto", and the app's own OpenAI client (its summarizer's
    settings) pointed at the fake."""
    settings.ASSISTANT_COMPACTION = AUTO
    settings.OPENAI_API_KEY = "test-key-app"
    settings.OPENAI_BASE_URL = fake.openai_url
    for name, value in more.items():
        setattr(settings, name, value)


def test_auto_makes_a_responses_window_shift_a_compact_call(fake_llm, conversation, settings):
    app_openai_client(settings, fake_llm)
    responses_turns(fake_llm, conversation)

    compacts = fake_llm.requests_for(RESPONSES_COMPACT)
    assert compacts, "no responses.compact call was made"
    assert compacts[0].headers["authorization"] == "Bearer test-key-app"
    assert compacts[0].body["model"] == "gpt-5"
    carrier = (
        Message.objects.filter(conversation=conversation, provider_compaction__isnull=False)
        .order_by("id")
        .last()
    )
    stored = carrier.provider_compaction
    assert stored["on_demand"] is True and stored["live"] is True
    assert stored["retained"] and all(i["role"] == "user" for i in stored["retained"])
    # The kept user messages, then the item, exactly as returned, in place of what
    # the compaction stands for; the carrier's own items after them.
    every = [request.body for request in fake_llm.requests]
    following = every[every.index(compacts[-1].body) + 1]
    opening = following["input"][: len(stored["retained"]) + 1]
    assert canonical(opening) == canonical([*stored["retained"], stored["block"]])
    call = following["input"][len(opening)]  # the carrier: the answer that called get_log
    assert carrier.role == "assistant" and call["type"] == "function_call"
    assert json.loads(call["arguments"]) == carrier.tool_calls[0]["arguments"]
    assert all(i.get("type") != "compaction" for i in following["input"][len(opening) :])
    assert all("context_management" not in body for body in sent(fake_llm, "openai.responses"))
    events = CompactionEvent.objects.filter(conversation=conversation)
    assert events.filter(kind="provider").count() == len(compacts)
    assert not events.filter(kind="window_summary").exists()
    event = events.get(details__message_id=carrier.pk)
    assert event.summarizer_input_tokens > 0 and event.summarizer_output_tokens == SUMMARY_TOKENS
    assert Message.objects.filter(conversation=conversation, role="tool").first().content == log(1)


def test_auto_on_responses_falls_back_to_our_shift_when_compact_fails(
    fake_llm, conversation, settings
):
    app_openai_client(settings, fake_llm, LLM_MAX_RETRIES=0)
    fake_llm.script(RESPONSES_COMPACT, overloaded(), repeat=True)  # OpenAI's 503 body
    responses_turns(fake_llm, conversation)

    assert fake_llm.count(RESPONSES_COMPACT) > 0
    assert CompactionEvent.objects.filter(conversation=conversation, kind="window_summary").exists()
    assert not Message.objects.filter(
        conversation=conversation, provider_compaction__isnull=False
    ).exists()


def test_auto_on_responses_falls_back_to_our_shift_when_compact_returns_no_item(
    fake_llm, conversation, settings
):
    app_openai_client(settings, fake_llm)
    usage = {"input_tokens": 100, "output_tokens": 0, "total_tokens": 100}
    empty = {"id": "resp_1", "object": "response.compaction", "created_at": 0, "output": []}
    fake_llm.script(RESPONSES_COMPACT, raw(200, {**empty, "usage": usage}), repeat=True)
    responses_turns(fake_llm, conversation)

    assert fake_llm.count(RESPONSES_COMPACT) > 0
    assert CompactionEvent.objects.filter(conversation=conversation, kind="window_summary").exists()
    assert not Message.objects.filter(
        conversation=conversation, provider_compaction__isnull=False
    ).exists()


def test_auto_on_responses_without_the_apps_openai_key_is_ours(
    fake_llm, conversation, monkeypatch, settings
):
    settings.ASSISTANT_COMPACTION = AUTO
    settings.OPENAI_API_KEY = ""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    responses_turns(fake_llm, conversation)

    assert fake_llm.count(RESPONSES_COMPACT) == 0
    assert CompactionEvent.objects.filter(conversation=conversation, kind="window_summary").exists()


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        **PROVIDER,
        "CONTEXT_TOKEN_THRESHOLD": 30_000,
        "MAX_RECENT_TOKENS": 8_000,
    }
)
def test_the_responses_compaction_item_goes_back_first_in_input(fake_llm, conversation):
    client = openai.OpenAI(api_key="test-key", base_url=fake_llm.openai_url, max_retries=0)

    def call_model(request):
        return client.responses.create(model="gpt-5", **request)

    script_logs(fake_llm, "openai.responses", [1, 2, 3])
    steps = turn(conversation, call_model, "Check builds 1 to 3", provider="openai_responses")
    fake_llm.script("openai.responses", ok("sha-0003."))
    turn(conversation, call_model, "Build 3's artifact?", provider="openai_responses")

    bodies = sent(fake_llm, "openai.responses")
    assert all(
        body["context_management"] == [{"type": "compaction", "compact_threshold": 30_000}]
        for body in bodies
    )
    carrier = next(s for s in steps if s.response.output[0].type == "compaction")
    item = carrier.response.output[0].model_dump(exclude_none=True)
    stored = Message.objects.get(pk=carrier.message.pk).provider_compaction
    assert canonical(stored["block"]) == canonical(item)
    for body in bodies[steps.index(carrier) + 1 :]:
        assert canonical(body["input"][0]) == canonical(item)
        assert all(i.get("type") != "compaction" for i in body["input"][1:])
    assert Message.objects.filter(conversation=conversation, role="tool").first().content == log(1)
    assert CompactionEvent.objects.filter(conversation=conversation, kind="provider").count() == 1


def test_ours_is_the_default_and_a_bad_setting_is_refused():
    assert compaction_config().PROVIDER_COMPACTION == "ours"
    with (
        override_settings(ASSISTANT_COMPACTION={"PROVIDER_COMPACTION": "server"}),
        pytest.raises(ImproperlyConfigured, match="PROVIDER_COMPACTION"),
    ):
        compaction_config()


def test_under_ours_no_compaction_is_asked_of_the_provider(fake_llm, conversation):
    call_model = beta_call(claude(fake_llm))
    script_logs(fake_llm, "anthropic.messages", [1])
    turn(conversation, call_model, "Check build 1")
    assert all(
        "context_management" not in body and "compaction" not in body for body in sent(fake_llm)
    )


def test_the_threshold_trigger_is_never_below_the_apis_minimum():
    edit = ANTHROPIC.threshold_compaction(20_000)["context_management"]["edits"][0]
    assert edit["trigger"]["value"] == MIN_TRIGGER


def test_a_malformed_provider_compaction_is_refused_with_a_code(conversation):
    with pytest.raises(ValidationError) as refused:
        add_message(conversation, "assistant", "hi", provider_compaction={"block": "x"})
    assert refused.value.code == "invalid_provider_compaction"
    assert validated(None) is None
    assert not Message.objects.filter(conversation=conversation).exists()


def test_usage_without_iterations_is_the_top_level_usage():
    usage = anthropic.types.Usage(
        input_tokens=10, output_tokens=5, cache_read_input_tokens=90, cache_creation_input_tokens=0
    )
    answer, compaction = anthropic_usage(usage)
    assert (answer.prompt_tokens, answer.output_tokens, compaction) == (100, 5, None)


@override_settings(ASSISTANT_COMPACTION=PROVIDER)
def test_the_admin_shows_where_the_provider_compacted_and_its_cost(
    fake_llm, conversation, admin_client
):
    call_model = beta_call(claude(fake_llm))
    script_logs(fake_llm, "anthropic.messages", [1, 2, 3, 4])
    turn(conversation, call_model, "Check builds 1 to 4")
    carrier = Message.objects.get(conversation=conversation, provider_compaction__isnull=False)

    page = admin_client.get(f"/admin/assistant/conversation/{conversation.pk}/change/")
    html = page.content.decode()
    assert page.status_code == 200
    assert f'Compacted by the provider <span class="at-message">at #{carrier.pk}</span>' in html
    # The inspector's first message is the carrier, its block shown with it.
    assert html.index(carrier.provider_compaction["block"]["signature"]) > 0
    cost, _ = conversation_cost(conversation)
    assert cost.summarizer > 0
    events = admin_client.get(
        f"/admin/assistant/compactionevent/?conversation__exact={conversation.pk}"
    )
    assert "Compacted by the provider" in events.content.decode()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def async_turn_script(fake: FakeProvider, number: int) -> None:
    fake.script(
        "anthropic.messages",
        ok(tool_calls=[{"name": "get_log", "arguments": {"id": number}}]),
        ok(f"Build {number} is green."),
    )


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "PROVIDER_COMPACTION": "auto",
        "CONTEXT_TOKEN_THRESHOLD": 20_000,
        "MAX_RECENT_TOKENS": 8_000,
    }
)
async def test_achat_step_makes_the_on_demand_compaction_with_the_async_client(
    fake_llm, anyio_backend
):
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake_llm.url, max_retries=0)

    def call_model(request):  # an awaitable, as achat_step's call_model returns
        return client.beta.messages.create(model=MODEL, max_tokens=1024, **request)

    conversation = await sync_to_async(Conversation.objects.create)(title="async")
    try:
        for number in range(1, 9):
            async_turn_script(fake_llm, number)
            await sync_to_async(add_message)(conversation, "user", f"Check build {number}")
            while True:
                step = await achat_step(conversation, call_model, tools=TOOLS)
                if not step.tool_calls:
                    break
                await sync_to_async(answer_tool_calls)(conversation, step.tool_calls, run_log)
    finally:
        await client.close()

    carriers = await sync_to_async(list)(
        Message.objects.filter(conversation=conversation, provider_compaction__live=True)
    )
    assert carriers and fake_llm.count(ANTHROPIC_COMPACTION) == len(carriers)
    last = sent(fake_llm)[-1]
    assert canonical(last["messages"][0]["content"][0]) == canonical(
        carriers[-1].provider_compaction["block"]
    )
    await sync_to_async(connections.close_all)()


def test_the_worker_builds_no_summary_ahead_while_the_provider_compacts(fake_llm, conversation):
    call_model = beta_call(claude(fake_llm))
    keys = {"CONTEXT_TOKEN_THRESHOLD": 60_000}
    with override_settings(ASSISTANT_COMPACTION={**keys, **PROVIDER}):
        script_logs(fake_llm, "anthropic.messages", [1, 2, 3])
        turn(conversation, call_model, "Check builds 1 to 3")
        assert not Message.objects.filter(provider_compaction__isnull=False).exists()
        assert shift_ahead(conversation.pk, compaction_config()) is False
    with override_settings(ASSISTANT_COMPACTION=keys):
        assert shift_ahead(conversation.pk, compaction_config()) is True


@override_settings(ASSISTANT_COMPACTION=PROVIDER)
def test_a_pinned_message_outlives_the_providers_compaction(fake_llm, conversation):
    """Pins beside the provider's compaction: the messages before the provider's compaction block
    are no longer sent, but a pinned one among them rides in the pinned section."""
    call_model = beta_call(claude(fake_llm))
    rule = add_message(conversation, "user", "Never deploy on a Friday; sign-off code owl-5.")
    add_message(conversation, "assistant", "Noted.")
    pin_message(conversation, rule.pk)
    script_logs(fake_llm, "anthropic.messages", [1, 2, 3, 4])
    steps = turn(conversation, call_model, "Check builds 1 to 4")
    fake_llm.script("anthropic.messages", ok("Build 4 wrote sha-0004."))
    turn(conversation, call_model, "Which artifact did build 4 write?")

    bodies = sent(fake_llm)
    carrier = next(step for step in steps if step.response.content[0].type == "compaction")
    later = bodies[steps.index(carrier) + 1 :]
    assert later
    assert all("owl-5" in json.dumps(body["system"]) for body in later)
    assert all("owl-5" in json.dumps(body) for body in bodies)


@override_settings(ASSISTANT_COMPACTION=PROVIDER)
def test_the_providers_compaction_starts_and_ends_once_and_a_failed_one_ends_failed(
    fake_llm, conversation
):
    from assistant.signals import ENDED, STARTED, compaction_event

    seen = []

    def receive(sender, notice, **kwargs):
        seen.append(notice)

    call_model = beta_call(claude(fake_llm))
    calls = [ok(tool_calls=[{"name": "get_log", "arguments": {"id": i}}]) for i in (1, 2, 3)]
    fake_llm.script(
        "anthropic.messages",
        *calls,
        ok(tool_calls=[{"name": "get_log", "arguments": {"id": 4}}], compaction="failed"),
        ok("All builds are green."),
    )
    compaction_event.connect(receive)
    try:
        turn(conversation, call_model, "Check builds 1 to 4")
    finally:
        compaction_event.disconnect(receive)

    provider = [n for n in seen if n.kind == "provider_failed"]
    start, end = provider
    assert (start.phase, end.phase) == (STARTED, ENDED)
    assert start.compaction_id == end.compaction_id
    event = CompactionEvent.objects.get(conversation=conversation, kind="provider_failed")
    assert (end.status, end.event_id, end.error) == (
        "failed",
        event.pk,
        "the provider's compaction failed",
    )
    # Ours that followed each had its own start and end.
    assert len(seen) == 2 * CompactionEvent.objects.filter(conversation=conversation).count()
