"""What a conversation cost at the providers' cache prices, and what sending
everything would have cost, from the usage recorded on its messages and the
summarizer tokens of its compaction events (assistant/cost/pricing.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assistant.cost.pricing import conversation_cost, costs_since, price_of
from assistant.cost.stored_figures import conversation_costs, cost_from_json, store_costs
from assistant.history.events import record_compaction
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
    # The app's estimate of each prompt: 3 + 100 = 103, then 213; after the
    # summary (60 tokens after it) 60 + 100 = 160, where the whole history is 323.
    assert [call.sent_tokens for call in calls] == [103, 213, 160]
    assert [call.removed_tokens for call in calls] == [0, 0, 163]
    assert [call.everything_tokens for call in calls] == [120, 230, 228]
    # Sending everything: the same calls, the third one also writing the 163
    # tokens the summary took out (none of them was in the previous prompt).
    assert cost.everything == pytest.approx((1552.5 + 163 * 3.75) / M, rel=1e-12)
    assert cost.saved_share == pytest.approx(1 - (1552.5 + 200) / (1552.5 + 163 * 3.75))
    assert (cost.calls, cost.summarizer_input_tokens, cost.summarizer_output_tokens) == (3, 100, 20)
    assert (cost.unpriced, cost.estimated) == (set(), None)


def test_what_compaction_removed_is_read_from_the_cache_only_while_it_is_warm(db):
    conversation, calls = priced_conversation()
    add_message(conversation, "user", "4" * 400)
    fourth = add_message(
        conversation,
        "assistant",
        "A" * 40,
        input_tokens=100,
        cache_read_tokens=65,
        output_tokens=10,
    )
    warm = conversation_cost(conversation)[0].everything
    later = calls[2].created_at + timedelta(minutes=6)  # CACHE_TTL_SECONDS is 300
    Message.objects.filter(pk=fourth.pk).update(created_at=later)

    cold = conversation_cost(conversation)[0].everything

    chat = (510 + 652.5 + 390 + 100 * 3 + 65 * 0.3 + 150) / M
    # The fourth call's history is 433 against 270 sent: the same 163 removed.
    assert warm == pytest.approx(chat + (163 * 3.75 + 163 * 0.3) / M, rel=1e-12)
    assert cold == pytest.approx(chat + (163 * 3.75 + 163 * 3.75) / M, rel=1e-12)


def two_turns(title: str, usage: list[dict[str, int]]) -> Conversation:
    conversation = Conversation.objects.create(title=title, system_prompt="You help.")
    for n, counts in enumerate(usage):
        add_message(conversation, "user", f"{n}" * 4000)
        add_message(conversation, "assistant", "A" * 400, output_tokens=100, **counts)
    return conversation


def test_an_uncompacted_conversation_saves_nothing_whatever_its_provider_cached(db):
    uncached = two_turns("no cache", [{"input_tokens": 1003}, {"input_tokens": 2103}])
    cached = two_turns(
        "cache",
        [
            {"input_tokens": 3, "cache_read_tokens": 1000},
            {"input_tokens": 1100, "cache_read_tokens": 1003},
        ],
    )

    costs = conversation_costs([uncached.pk, cached.pk])

    assert [costs[pk].saved_share for pk in (uncached.pk, cached.pk)] == [0.0, 0.0]
    assert costs[uncached.pk].chat == pytest.approx((3106 * 3 + 200 * 15) / M, rel=1e-12)


def test_implausible_usage_is_priced_at_the_apps_count_and_says_so(db):
    # input_tokens alone under prompt caching: 3 and 100, where the app counts 1003 and 2103.
    conversation = two_turns("input only", [{"input_tokens": 3}, {"input_tokens": 100}])

    cost, calls = conversation_cost(conversation)

    assert [call.implausible for call in calls] == [True, True]
    # Priced at the estimates: the first written, the second reading the first from the cache.
    first = 1003 * 3.75 + 100 * 15
    second = 1003 * 0.3 + 1100 * 3.75 + 100 * 15
    assert cost.chat == pytest.approx((first + second) / M, rel=1e-12)
    assert cost.saved_share == 0.0
    assert cost.estimated == (
        f"estimated from the app's count: message #{calls[0].message_id} records a prompt of "
        "3 tokens where the app counts 1,003 (its usage leaves out part of the prompt, "
        "typically the cache reads and writes)"
    )


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

    totals = costs_since({"week": timezone.now() - timedelta(days=7), "all time": None})
    all_time, week = totals["all time"], totals["week"]

    one, _ = conversation_cost(recent)
    assert week.calls == 3
    assert week.chat == pytest.approx(one.chat, rel=1e-12)
    assert week.summarizer == pytest.approx(one.summarizer, rel=1e-12)
    assert week.everything == pytest.approx(one.everything, rel=1e-12)
    assert all_time.calls == 6
    assert all_time.chat == pytest.approx(2 * one.chat, rel=1e-12)
    assert all_time.summarizer_input_tokens == 200


def test_stored_figures_continued_after_each_exchange_equal_all_the_calls_priced_again(db):
    clock = [timezone.now()]
    with mock.patch("django.utils.timezone.now", lambda: clock[0]):
        conversation, _ = priced_conversation("continued")
        store_costs([conversation.pk])
        exchanges: list[dict[str, Any]] = [
            {"input_tokens": 50, "cache_read_tokens": 200, "output_tokens": 10},
            {"input_tokens": 3, "output_tokens": 5},  # implausible after its long question
            {"input_tokens": 40, "cache_write_tokens": 300, "model": "claude-haiku-4-5"},
            {"input_tokens": 40, "output_tokens": 10, "model": "a-model-with-no-price"},
            {"input_tokens": 60, "cache_read_tokens": 250, "output_tokens": 10},
            {"input_tokens": 70, "cache_read_tokens": 260, "output_tokens": 12},
        ]
        for n, usage in enumerate(exchanges):
            # One gap past CACHE_TTL_SECONDS (300): that call reads nothing from the cache.
            clock[0] += timedelta(minutes=6 if n == 4 else 1)
            add_message(conversation, "user", f"{n}" * (4000 if n == 1 else 400 + 40 * n))
            add_message(conversation, "assistant", "A" * 40, **usage)
            if n in (1, 3):  # a summary and a tool-result compaction after the exchange
                clock[0] += timedelta(seconds=1)
                record_compaction(
                    conversation.pk,
                    "window_summary" if n == 1 else "tool_result",
                    tokens_before=400,
                    tokens_after=150 + n,
                    messages_affected=2,
                    duration_ms=5,
                    summarizer_model="claude-haiku-4-5" if n == 1 else "",
                    summarizer_input_tokens=300 if n == 1 else 0,
                    summarizer_output_tokens=30 if n == 1 else 0,
                )
            newest = conversation.messages.order_by("-id")[0].pk
            with CaptureQueriesContext(connection) as queries:
                store_costs([conversation.pk])
            stored = Conversation.objects.get(pk=conversation.pk).cost_figures
            assert cost_from_json(stored["cost"]) == conversation_cost(conversation)[0], n
            # Continued: the usage read from the newest message walked on, no earlier.
            usage_reads = [
                q["sql"]
                for q in queries
                if 'FROM "assistant_message"' in q["sql"] and '"input_tokens"' in q["sql"]
            ]
            assert len(usage_reads) == 1 and f'"id" >= {newest - 2}' in usage_reads[0], n

        # An event for a time the walk has passed (a clock behind): all priced again.
        clock[0] -= timedelta(minutes=3)
        record_compaction(
            conversation.pk,
            "tool_result",
            tokens_before=500,
            tokens_after=90,
            messages_affected=1,
            duration_ms=5,
        )
        store_costs([conversation.pk])
    stored = Conversation.objects.get(pk=conversation.pk).cost_figures
    full, _ = conversation_cost(conversation)
    assert cost_from_json(stored["cost"]) == full
    assert full.calls == 3 + len(exchanges) and full.unpriced == {"a-model-with-no-price"}
    assert full.estimated is not None
