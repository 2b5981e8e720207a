"""What a conversation cost at the providers' cache prices, and what sending
everything would have cost, from the usage recorded on its messages and the
summarizer tokens of its compaction events (assistant/cost.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from assistant.cost import conversation_cost, conversation_costs, price_of, total_cost
from assistant.events import record_compaction
from assistant.models import Conversation, Message
from assistant.services import add_message

M = 1_000_000


def priced_conversation(title: str = "priced") -> tuple[Conversation, list[Message]]:
    """Three recorded calls of claude-sonnet-4-6 (3 / 15 / 0.30 / 3.75 USD per
    million tokens) around one window summary by claude-haiku-4-5 (1 / 5).
    Estimates: the system prompt 3 tokens, each user message 100, each answer 10."""
    conversation = Conversation.objects.create(title=title, system_prompt="You help.")
    calls = []
    for n, (inp, read, write) in enumerate([(120, 0, 0), (20, 100, 110), (5, 0, 60)]):
        add_message(conversation, "user", f"{n}" * 400)
        calls.append(
            add_message(
                conversation,
                "assistant",
                "A" * 40,
                input_tokens=inp,
                cache_read_tokens=read,
                cache_write_tokens=write,
                output_tokens=10,
            )
        )
        if n == 1:
            record_compaction(
                conversation.pk,
                "window_summary",
                tokens_before=230,
                tokens_after=60,
                messages_affected=3,
                duration_ms=5,
                summarizer_model="claude-haiku-4-5",
                summarizer_input_tokens=100,
                summarizer_output_tokens=20,
            )
    return conversation, calls


def test_a_conversation_costs_what_its_recorded_usage_says_at_cache_prices(db):
    conversation, _ = priced_conversation()

    cost, calls = conversation_cost(conversation)

    # Reported: 120 in; 20 in + 100 read + 110 written; 5 in + 60 written; 10 out each.
    assert cost.chat == pytest.approx((510 + 652.5 + 390) / M, rel=1e-12)
    assert cost.summarizer == pytest.approx((100 * 1 + 20 * 5) / M, rel=1e-12)
    # Sending everything: each prompt is the whole history before the call
    # (3 + 100 = 103, then 213, then 323 estimated, never below what was
    # reported: 120, 230, 323), the previous prompt read from the cache.
    assert [call.everything_tokens for call in calls] == [120, 230, 323]
    first = 120 * 3.75 + 150
    second = 120 * 0.3 + 110 * 3.75 + 150
    third = 230 * 0.3 + 93 * 3.75 + 150
    assert cost.everything == pytest.approx((first + second + third) / M, rel=1e-12)
    assert cost.saved_share == pytest.approx(1 - (1552.5 + 200) / (first + second + third))
    assert (cost.calls, cost.summarizer_input_tokens, cost.summarizer_output_tokens) == (3, 100, 20)
    assert cost.unpriced == set()


def test_after_a_pause_longer_than_the_cache_lifetime_sending_everything_writes_it_all(db):
    conversation, calls = priced_conversation()
    later = calls[1].created_at + timedelta(minutes=6)  # CACHE_TTL_SECONDS is 300
    Message.objects.filter(pk=calls[2].pk).update(created_at=later)

    cost, _ = conversation_cost(conversation)

    first = 120 * 3.75 + 150
    second = 120 * 0.3 + 110 * 3.75 + 150
    third = 323 * 3.75 + 150
    assert cost.everything == pytest.approx((first + second + third) / M, rel=1e-12)


def test_a_host_price_replaces_the_default_and_a_call_names_its_own_model(db, settings):
    settings.ASSISTANT_MODEL_PRICES = {
        "house-model": {"input": 2.0, "output": 4.0, "cache_read": 0.5, "cache_write": 2.0}
    }
    conversation = Conversation.objects.create(title="own model")
    add_message(conversation, "user", "hello")
    add_message(
        conversation,
        "assistant",
        "hi",
        input_tokens=1000,
        cache_read_tokens=3000,
        output_tokens=100,
        metadata={"model": "house-model"},
    )
    add_message(conversation, "user", "again")
    add_message(
        conversation,
        "assistant",
        "hi",
        input_tokens=10,
        output_tokens=1,
        metadata={"model": "mystery-1"},
    )

    cost = conversation_costs([conversation.pk])[conversation.pk]

    assert cost.chat == pytest.approx((1000 * 2 + 3000 * 0.5 + 100 * 4) / M, rel=1e-12)
    assert cost.unpriced == {"mystery-1"}
    assert cost.calls == 2


def test_prices_follow_the_providers_published_multipliers():
    sonnet = price_of("claude-sonnet-4-6")
    assert (sonnet.input, sonnet.output, sonnet.cache_read, sonnet.cache_write) == (
        3.0,
        15.0,
        0.3,
        3.75,
    )
    assert price_of("claude-haiku-4-5-20251001") == price_of("claude-haiku-4-5")
    flash = price_of("gemini-2.5-flash")
    assert (flash.cache_read, flash.cache_write) == (0.03, flash.input)  # no write premium
    assert price_of("models/gemini-2.5-flash-lite").input == 0.1
    assert price_of("some-other-model") is None


def test_totals_count_the_calls_and_summaries_of_the_period_only(db):
    old, _ = priced_conversation("old")
    Message.objects.filter(conversation=old).update(created_at=timezone.now() - timedelta(days=10))
    old.compaction_events.update(created_at=timezone.now() - timedelta(days=10))
    recent, _ = priced_conversation("recent")

    all_time = total_cost()
    week = total_cost(timezone.now() - timedelta(days=7))

    one, _ = conversation_cost(recent)
    assert week.calls == 3
    assert week.chat == pytest.approx(one.chat, rel=1e-12)
    assert week.summarizer == pytest.approx(one.summarizer, rel=1e-12)
    assert week.everything == pytest.approx(one.everything, rel=1e-12)
    assert all_time.calls == 6
    assert all_time.chat == pytest.approx(2 * one.chat, rel=1e-12)
    assert all_time.summarizer_input_tokens == 200
