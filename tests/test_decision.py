"""decide(state, config, now): the plan the pre-call hook executes, pure."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from assistant.conf import compaction_config
from assistant.window import AT_TRIGGER, COLD_CACHE, COUNT_TRIGGER, decide, load_window
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
