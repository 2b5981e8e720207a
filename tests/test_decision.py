"""decide(state, config, now): the plan the pre-call hook executes, pure."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from assistant.models import CompactionEvent, MetadataKeys
from assistant.services import ensure_context_summary
from assistant.settings.conf import compaction_config
from assistant.strategies.prebuild import prebuild_window_summary
from assistant.strategies.shift import shift_window
from assistant.window import (
    AT_TRIGGER,
    COLD_CACHE,
    COUNT_TRIGGER,
    decide,
    load_window,
    worker_split,
)
from assistant.window.ledger import Outlook
from tests.builders import chat_turns

pytestmark = pytest.mark.django_db


@override_settings(ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": 1000, "MAX_RECENT_TOKENS": 400})
def test_past_the_trigger_the_plan_is_a_forced_shift_decided_without_a_query(
    conversation, django_assert_num_queries
):
    chat_turns(conversation, 6, size=400)  # 12 messages of ~101 tokens: past 1,000
    state, config = load_window(conversation.pk), compaction_config()

    with django_assert_num_queries(0):
        plan = decide(state, config, timezone.now())

    assert plan.tokens == state.context_tokens()
    assert (plan.shift.kind, plan.shift.share, plan.at_trigger) == ("forced", 1.0, True)
    assert plan.shift.start == 10  # the newest turn stays verbatim: two pass 400 tokens
    assert AT_TRIGGER in plan.reasons


@override_settings(ASSISTANT_COMPACTION={"MAX_MESSAGES_BEFORE_SUMMARY": 10})
def test_the_count_trigger_waits_for_a_cold_cache_and_now_is_the_callers(conversation):
    chat_turns(conversation, 5)  # 10 messages, far below the token trigger
    state, config = load_window(conversation.pk), compaction_config()
    last = state.last_request_at()

    warm = decide(state, config, last + timedelta(seconds=config.CACHE_TTL_SECONDS))
    cold = decide(state, config, last + timedelta(seconds=config.CACHE_TTL_SECONDS + 1))

    assert (warm.cold, warm.shift) == (False, None)
    assert (cold.cold, cold.shift.kind, cold.shift.count) == (True, "forced", True)
    assert {COLD_CACHE, COUNT_TRIGGER} <= set(cold.reasons)


@override_settings(ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": 1000, "MAX_RECENT_TOKENS": 400})
def test_under_the_lease_a_plans_shift_is_dropped_once_another_caller_made_it(conversation):
    chat_turns(conversation, 6, size=400)
    config = compaction_config()
    stale = decide(load_window(conversation.pk), config, timezone.now()).shift
    summary = ensure_context_summary(conversation)  # another caller shifts first

    again = shift_window(conversation.pk, config, stale)

    assert not stale.still_due(load_window(conversation.pk), config)
    assert again == summary
    assert CompactionEvent.objects.filter(kind="window_summary").count() == 1


@override_settings(ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": 1000, "MAX_RECENT_TOKENS": 400})
def test_the_worker_builds_below_the_soft_watermark_only_when_the_hook_asks(conversation):
    rows = chat_turns(conversation, 3, size=400)  # ~606 tokens: under 80% of the trigger
    state, config = load_window(conversation.pk), compaction_config()

    assert worker_split(state, config, requested=False) is None
    assert not prebuild_window_summary(conversation)
    assert worker_split(state, config, requested=True) == 4  # an early shift's budget
    assert prebuild_window_summary(conversation, requested=True)
    metadata = load_window(conversation.pk).metadata
    assert metadata[MetadataKeys.PENDING_THROUGH_MESSAGE_ID] == rows[3].pk


def test_what_a_step_is_expected_to_save_grows_with_how_long_the_conversation_has_run():
    # 20,000 tokens, 1,000 more a call: the trigger is 30 calls away.
    young = Outlook(
        tokens=20_000, per_call=1_000, trigger=50_000, shift_cost=57_500, kept=22_000, calls=5
    )
    old = replace(young, calls=300)

    # Five calls in, the trigger is unlikely to be reached: freeing 10,000
    # tokens saves about five calls' reads of them, and little of the shift.
    assert young.saves(10_000) < 0.1 * 10_000 * 5 + 0.01 * 57_500
    # Three hundred calls in, nearly all 30 calls' reads, and the forced
    # shift (57,500) coming 10,000 of its 28,000 tokens of growth later.
    assert old.saves(10_000) > 0.9 * (0.1 * 10_000 * 30 + 57_500 * 10_000 / 28_000)
    assert young.saves(0) == old.saves(0) == 0


def test_the_summarizer_input_a_long_conversation_pays_anyway_is_not_an_early_shifts_own():
    # Every message is summarized once, whenever the shift comes: an early shift adds
    # only what the conversation would not pay at the forced one, which it reaches
    # (`reached`) the surer the longer it has run and the nearer the trigger is.
    near = Outlook(
        tokens=45_000, per_call=1_000, trigger=50_000, shift_cost=57_500, kept=22_000, calls=200
    )
    far_and_young = replace(near, tokens=10_000, calls=5)

    assert near.reached > 0.97
    assert far_and_young.reached < 0.001
    assert replace(near, calls=0).reached == 0
