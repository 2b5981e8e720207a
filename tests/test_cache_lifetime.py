"""Each conversation's prompt-cache lifetime (docs/compaction.rst, "Cache lifetimes"):
the fake's cache expiring on the clock the test moves, the lifetime chat_step asks for
(Anthropic's `"ttl": "1h"`, OpenAI's `prompt_cache_key`), the host's fixed choice, and
prepared compaction applied once the lifetime in use has run out."""

from __future__ import annotations

import re
from datetime import timedelta

import anthropic
import openai
import pytest
from django.utils import timezone

from assistant.models import Message
from assistant.services import (
    add_message,
    chat_step,
    ensure_context_summary,
    finish_exchange,
    process_exchange,
)
from assistant.testing.fake_provider import FakeProvider
from assistant.window import request_lifetime
from tests.builders import html
from tests.fake_llm import ok

pytestmark = pytest.mark.django_db

TOOLS = [
    {
        "name": "get_blog_post",
        "description": "A post by id, as HTML.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
    }
]


@pytest.fixture
def fake():
    server = FakeProvider(prompt_cache=True).start()
    yield server
    server.stop()


def anthropic_call(fake):
    client = anthropic.Anthropic(api_key="test-key", base_url=fake.url, max_retries=0)

    def call_model(request):
        return client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, **request)

    return call_model


def breakpoints(body):
    marks = [b["cache_control"] for b in body.get("system") or [] if "cache_control" in b]
    for message in body["messages"]:
        content = message["content"] if isinstance(message["content"], list) else []
        marks += [b["cache_control"] for b in content if "cache_control" in b]
    return marks


def test_the_fakes_cache_expires_after_its_lifetime_on_the_clock_the_test_moves(fake):
    client = anthropic.Anthropic(api_key="test-key", base_url=fake.url, max_retries=0)
    text = "p" * 8000

    def send(ttl=None):
        control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
        block = {"type": "text", "text": text, "cache_control": control}
        message = {"role": "user", "content": [block]}
        usage = client.messages.create(model="m", max_tokens=10, messages=[message]).usage
        return usage.cache_read_input_tokens, usage.cache_creation_input_tokens

    written = send()[1]
    assert written > 0
    fake.advance(299)
    assert send() == (written, 0)  # read, and the read renews the 5 minutes
    fake.advance(301)
    assert send() == (0, written)  # 5 minutes of silence: written again

    send("1h")
    fake.advance(1800)
    assert send("1h") == (written, 0)
    fake.advance(3601)
    assert send("1h") == (0, written)


def gaps_of(conversation, minutes):
    """Every answer so far, `minutes` apart, the newest just now."""
    answers = list(conversation.messages.filter(role="assistant").order_by("pk"))
    for age, answer in enumerate(reversed(answers)):
        Message.objects.filter(pk=answer.pk).update(
            created_at=timezone.now() - timedelta(minutes=minutes * age, seconds=5)
        )


def rhythm(conversation, fake, call_model, turns=4, tokens=8000):
    for turn in range(turns):
        fake.script_anthropic(ok(f"Answer {turn}."))
        add_message(conversation, "user", f"Question {turn} " + "w " * tokens)
        chat_step(conversation, call_model)


def test_anthropic_gets_a_one_hour_ttl_when_the_conversations_gaps_make_it_pay(conversation, fake):
    call_model = anthropic_call(fake)
    rhythm(conversation, fake, call_model)
    # No gap over 5 minutes so far: the default lifetime, no ttl sent.
    assert all("ttl" not in mark for mark in breakpoints(fake.requests[-1].body))
    # Then the user comes back every 20 minutes: each 5-minute cache would have expired.
    gaps_of(conversation, 20)
    fake.script_anthropic(ok("After a pause."))
    add_message(conversation, "user", "Back again.")
    step = chat_step(conversation, call_model)

    marks = breakpoints(fake.requests[-1].body)
    assert marks and all(mark == {"type": "ephemeral", "ttl": "1h"} for mark in marks)
    assert step.message.metadata["cache_lifetime"] == "1h"


@pytest.mark.parametrize(("prompt", "chosen"), [(5_000, "1h"), (20_000, "5m")])
def test_past_the_watermark_a_cold_cache_is_worth_more_than_an_hours_lifetime(
    conversation, prompt, chosen
):
    # One gap in three over 5 minutes. Below the watermark (0.3 of the 50,000 trigger) the
    # hour's premium on the little a request writes is cheaper than the rewrites it
    # saves; past it a cold cache is compacted for free, which the hour would put off.
    for turn in range(4):
        add_message(conversation, "user", f"Question {turn}.")
        add_message(conversation, "assistant", f"Answer {turn}.", input_tokens=prompt - 100)
    answers = list(conversation.messages.filter(role="assistant").order_by("pk"))
    ages = (22, 2, 1, 0)  # minutes before now: gaps of 20, 1 and 1 minutes
    for answer, age in zip(answers, ages, strict=True):
        Message.objects.filter(pk=answer.pk).update(
            created_at=timezone.now() - timedelta(minutes=age, seconds=5)
        )

    assert request_lifetime(conversation.pk, "anthropic", prompt).name == chosen


def test_the_host_fixes_the_lifetime_in_settings(conversation, fake, settings):
    call_model = anthropic_call(fake)
    settings.ASSISTANT_COMPACTION = {"CACHE_LIFETIME": "5m"}
    rhythm(conversation, fake, call_model)
    gaps_of(conversation, 20)
    fake.script_anthropic(ok("After a pause."))
    add_message(conversation, "user", "Back again.")
    chat_step(conversation, call_model)
    assert all("ttl" not in mark for mark in breakpoints(fake.requests[-1].body))

    settings.ASSISTANT_COMPACTION = {"CACHE_LIFETIME": "1h"}
    fake.script_anthropic(ok("Fixed."))
    add_message(conversation, "user", "Once more.")
    chat_step(conversation, call_model)
    assert all(mark.get("ttl") == "1h" for mark in breakpoints(fake.requests[-1].body))


def test_openai_requests_carry_a_prompt_cache_key_that_names_no_id(fake, settings):
    from assistant.models import Conversation

    settings.ASSISTANT_COMPACTION = {"PROMPT_CACHE_KEY_COMPATIBLE": True}  # the fake opts in
    client = openai.OpenAI(api_key="test-key", base_url=fake.openai_url, max_retries=0)

    def call_model(request):
        return client.chat.completions.create(model="gpt-5", **request)

    keys = []
    for title in ("first", "second"):
        conversation = Conversation.objects.create(title=title)
        for turn in range(2):
            add_message(conversation, "user", f"Question {turn}")
            chat_step(conversation, call_model, provider="openai")
            body = fake.requests_for("openai.chat")[-1].body
            keys.append(body["prompt_cache_key"])
            # An HMAC digest under the deployment's secret, not the id in any spelling.
            assert re.fullmatch("[0-9a-f]{40}", body["prompt_cache_key"])
    assert keys[0] == keys[1] != keys[2] == keys[3]
    settings.SECRET_KEY = "another deployment's secret"
    add_message(conversation, "user", "Question 2")
    chat_step(conversation, call_model, provider="openai")
    assert fake.requests_for("openai.chat")[-1].body["prompt_cache_key"] != keys[3]


def test_other_openai_compatible_servers_get_no_prompt_cache_key_unless_opted_in(
    conversation, fake, settings
):
    settings.OPENAI_BASE_URL = fake.openai_url  # not OpenAI's own API
    client = openai.OpenAI(api_key="test-key", base_url=fake.openai_url, max_retries=0)
    add_message(conversation, "user", "Hello")
    chat_step(
        conversation,
        lambda request: client.chat.completions.create(model="gpt-5", **request),
        provider="openai",
    )
    assert "prompt_cache_key" not in fake.requests_for("openai.chat")[-1].body


def test_a_conversation_idle_past_its_lifetime_applies_what_is_pending_at_the_next_call(
    conversation, fake, settings
):
    settings.ASSISTANT_COMPACTION = {"CACHE_LIFETIME": "1h", "COMPACTION_TIMING": "cache_aware"}
    call_model = anthropic_call(fake)
    for turn, version in enumerate(("", "v2")):
        fake.script_anthropic(
            ok(tool_calls=[{"name": "get_blog_post", "arguments": {"id": 7}}]), ok(f"Read {turn}.")
        )
        add_message(conversation, "user", f"read post 7 ({turn})")
        step = chat_step(conversation, call_model, tools=TOOLS)
        add_message(
            conversation, "tool", html(4000, version), tool_call_id=step.tool_calls[0]["id"]
        )
        chat_step(conversation, call_model, tools=TOOLS)
    finish_exchange(conversation)
    process_exchange(conversation.pk)  # what the worker does: prepared, not applied
    assert not conversation.compaction_events.exists()

    # 10 minutes idle: a 5-minute cache would be cold, the hour this one asked for is not.
    fake.advance(600)
    conversation.messages.update(created_at=timezone.now() - timedelta(minutes=10))
    ensure_context_summary(conversation)
    assert not conversation.compaction_events.exists()
    fake.script_anthropic(ok("Still warm."))
    add_message(conversation, "user", "Anything else?")
    chat_step(conversation, call_model, tools=TOOLS)
    assert fake.requests[-1].usage["cache_read_input_tokens"] > 0  # the fake held it too

    # Past the hour: the next call applies the prepared compaction.
    fake.advance(3700)
    conversation.messages.update(created_at=timezone.now() - timedelta(minutes=62))
    fake.script_anthropic(ok("Cold now."))
    add_message(conversation, "user", "And now?")
    chat_step(conversation, call_model, tools=TOOLS)
    assert conversation.compaction_events.filter(kind="dedup").count() == 1
    assert fake.requests[-1].usage["cache_read_input_tokens"] == 0
