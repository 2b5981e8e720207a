"""The cache checked against the provider's usage (docs/compaction.rst, "Cache breaks"):
a recorded answer that read less from the cache than its unchanged prefix is a
`cache_break` event, in the admin beside the compactions and in none of their figures."""

from __future__ import annotations

from datetime import timedelta

import anthropic
import openai
import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone
from openai.types.chat import ChatCompletion

from assistant.cost.pricing import conversation_cost
from assistant.history import EXPECTED_KEY, cache_hits
from assistant.models import CompactionEvent, Conversation, Message
from assistant.services import (
    add_message,
    chat_step,
    context_status,
    record_response,
    undo_compaction,
)
from assistant.signals import context_compacted
from assistant.testing.fake_provider import FakeProvider
from tests.fake_llm import ok
from tests.scenarios import staff_user
from tests.test_cache_lifetime import anthropic_call
from tests.test_cache_lifetime import fake as fake  # the fixture: a fake with its prompt cache

pytestmark = pytest.mark.django_db

BREAK = CompactionEvent.Kind.CACHE_BREAK


def turn(conversation, fake, call_model, number, words=3000):
    fake.script_anthropic(ok(f"Answer {number}."))
    add_message(conversation, "user", f"Question {number} " + "w " * words)
    return chat_step(conversation, call_model).message


def breaks(conversation):
    return list(CompactionEvent.objects.filter(conversation=conversation, kind=BREAK))


def test_a_changed_system_prompt_is_recorded_as_a_cache_break_and_nothing_else(
    conversation, fake, client
):
    call_model = anthropic_call(fake)
    first = turn(conversation, fake, call_model, 1)
    second = turn(conversation, fake, call_model, 2)
    # The second request read the first's prompt from the cache, as expected (all of it
    # up to the first request's last breakpoint).
    assert second.metadata[EXPECTED_KEY] == first.prompt_tokens
    assert second.cache_read_tokens >= 0.95 * first.prompt_tokens
    assert breaks(conversation) == []

    # The host puts the time into its system prompt: the whole prefix changes.
    Conversation.objects.filter(pk=conversation.pk).update(system_prompt="You help. It is 10:42.")
    compacted = []
    context_compacted.connect(receiver := lambda **kwargs: compacted.append(kwargs))
    try:
        third = turn(conversation, fake, call_model, 3)
    finally:
        context_compacted.disconnect(receiver)

    assert third.cache_read_tokens == 0
    [event] = breaks(conversation)
    assert event.details["expected_cache_read_tokens"] == second.prompt_tokens
    assert event.details["reported_cache_read_tokens"] == 0
    assert event.details["message_id"] == third.pk
    assert compacted == []
    # It is no compaction: not counted, not undone, not in the cost figures.
    assert context_status(conversation).compactions == 0
    with pytest.raises(ValidationError) as refused:
        undo_compaction(conversation)
    assert refused.value.code == "nothing_to_undo"
    cost, calls = conversation_cost(conversation)
    event.delete()
    assert conversation_cost(conversation) == (cost, calls)
    event.save()

    hits = cache_hits(conversation.pk)
    assert (hits.calls, hits.reported_tokens) == (2, second.cache_read_tokens)
    assert hits.expected_tokens == first.prompt_tokens + second.prompt_tokens
    client.force_login(staff_user())
    page = client.get(reverse("admin:assistant_conversation_change", args=[conversation.pk]))
    text = page.content.decode()
    assert "Cache hit rate over 2 checked call(s)" in text
    assert f"{hits.expected_rate} expected, {hits.reported_rate} reported" in text
    assert "1 cache break(s)" in text
    assert "The provider&#x27;s cache missed an unchanged prefix" in text


def test_a_cache_expired_by_its_lifetime_or_rewritten_by_a_shift_is_no_break(conversation, fake):
    call_model = anthropic_call(fake)
    turn(conversation, fake, call_model, 1)
    second = turn(conversation, fake, call_model, 2)
    # Six minutes of silence: the 5-minute cache has expired, at the fake as in our clock.
    Message.objects.filter(pk=second.pk).update(created_at=timezone.now() - timedelta(minutes=6))
    fake.advance(360)
    third = turn(conversation, fake, call_model, 3)
    assert third.cache_read_tokens == 0
    assert third.metadata[EXPECTED_KEY] == 0

    # A compaction since the previous answer rewrote the request: nothing is expected.
    Conversation.objects.filter(pk=conversation.pk).update(context_epoch_message_id=third.pk)
    Conversation.objects.filter(pk=conversation.pk).update(system_prompt="Another prompt.")
    fourth = turn(conversation, fake, call_model, 4)
    assert fourth.metadata[EXPECTED_KEY] == 0
    assert breaks(conversation) == []


def chat_completion(prompt, cached):
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-5-mini",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "Done."},
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": 5,
                "total_tokens": prompt + 5,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    )


def test_openais_reported_cache_reads_are_checked_and_a_small_shortfall_is_not_a_break(
    conversation,
):
    add_message(conversation, "user", "Hello.")
    record_response(conversation, chat_completion(20_000, 0), provider="openai")
    add_message(conversation, "user", "More.")
    # OpenAI caches in steps of 128 tokens: 600 short of 20,000 is within the bound.
    second = record_response(conversation, chat_completion(21_000, 19_400), provider="openai")
    add_message(conversation, "user", "Again.")
    third = record_response(conversation, chat_completion(22_000, 0), provider="openai")

    # The first answer recorded no cache use at all: the second is not judged yet.
    assert EXPECTED_KEY not in (second.metadata or {})
    assert third.metadata[EXPECTED_KEY] == 21_000
    [event] = breaks(conversation)
    assert event.details == {
        "expected_cache_read_tokens": 21_000,
        "reported_cache_read_tokens": 0,
        "message_id": third.pk,
        "provider": "openai",
        "model": "gpt-5-mini",
    }

    add_message(conversation, "user", "Once more.")
    fourth = record_response(conversation, chat_completion(23_000, 21_500), provider="openai")
    assert fourth.metadata[EXPECTED_KEY] == 22_000
    assert len(breaks(conversation)) == 1  # 500 short: within 1,024 tokens


def anthropic_message(read, written, diagnostics=None):
    return anthropic.types.Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [{"type": "text", "text": "Done."}],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 50,
                "output_tokens": 5,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written,
            },
            **({"diagnostics": diagnostics} if diagnostics else {}),
        }
    )


def test_the_providers_diagnosis_is_kept_with_the_break(conversation):
    add_message(conversation, "user", "Hello.")
    record_response(conversation, anthropic_message(0, 9_000))
    add_message(conversation, "user", "More.")
    reason = {"type": "tools_changed", "cache_missed_input_tokens": 8_900}
    record_response(conversation, anthropic_message(0, 9_100, {"cache_miss_reason": reason}))
    [event] = breaks(conversation)
    assert event.details["diagnosis"] == reason
    assert event.details["expected_cache_read_tokens"] == 9_050


def test_a_host_with_its_own_metadata_keeps_it_and_a_bad_one_is_refused_whole(conversation):
    add_message(conversation, "user", "Hello.")
    record_response(conversation, anthropic_message(0, 9_000))
    add_message(conversation, "user", "More.")
    kept = record_response(conversation, anthropic_message(9_000, 100), metadata={"trace": "t1"})
    assert kept.metadata == {"trace": "t1", EXPECTED_KEY: 9_050}
    with pytest.raises(ValidationError) as refused:
        record_response(conversation, anthropic_message(9_100, 50), metadata="x")
    assert refused.value.code == "invalid_metadata"
    assert conversation.messages.count() == 4


def test_a_server_that_reports_no_cache_is_never_judged(conversation):
    fake = FakeProvider().start()  # no prompt cache: usage without cached tokens
    try:
        client = openai.OpenAI(api_key="test-key", base_url=f"{fake.url}/v1", max_retries=0)

        def call_model(request):
            return client.chat.completions.create(model="gpt-5-mini", **request)

        for number in range(3):
            fake.script_openai(ok(f"Answer {number}."))
            add_message(conversation, "user", f"Question {number} " + "w " * 2000)
            message = chat_step(conversation, call_model, provider="openai").message
            assert EXPECTED_KEY not in (message.metadata or {})
    finally:
        fake.stop()
    assert breaks(conversation) == []
    assert cache_hits(conversation.pk) is None


def responses_api_response(prompt, cached, diagnostics=None):
    return openai.types.responses.Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "gpt-5.6",
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + 5,
            },
            **({"prompt_cache_diagnostics": diagnostics} if diagnostics else {}),
        }
    )


def test_the_responses_apis_diagnosis_of_a_miss_is_kept_with_the_break(conversation):
    add_message(conversation, "user", "Hello.")
    record_response(conversation, responses_api_response(9_000, 1_000), provider="openai_responses")
    add_message(conversation, "user", "More.")
    miss = {
        "type": "cache_miss",
        "reason": "tools_changed",
        "cache_missed_tokens": 8_900,
        "comparison_reusable_tokens": 9_000,
    }
    record_response(
        conversation, responses_api_response(9_100, 0, miss), provider="openai_responses"
    )
    [event] = breaks(conversation)
    assert event.details["diagnosis"] == {
        "type": "tools_changed",
        "cache_missed_tokens": 8_900,
        "comparison_reusable_tokens": 9_000,
    }
    assert event.details["expected_cache_read_tokens"] == 9_000
    assert event.details["reported_cache_read_tokens"] == 0


def test_a_responses_api_diagnosis_that_names_no_miss_is_not_kept(conversation):
    add_message(conversation, "user", "Hello.")
    record_response(conversation, responses_api_response(9_000, 1_000), provider="openai_responses")
    add_message(conversation, "user", "More.")
    unavailable = {"type": "unavailable"}
    record_response(
        conversation, responses_api_response(9_100, 0, unavailable), provider="openai_responses"
    )
    [event] = breaks(conversation)
    assert "diagnosis" not in event.details
    assert event.details["reported_cache_read_tokens"] == 0
