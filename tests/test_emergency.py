"""Emergency compaction levels and overflow recovery (strategy 3)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from assistant.emergency import levels as emergency
from assistant.emergency import retry as overflow
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.providers.overflow import overflow_token_counts
from assistant.services import emergency_compact
from assistant.tool_results.compaction import restore_originals
from assistant.window.context import build_context, context_tokens
from tests.scenarios import BIG_RESULT, SMALL_RESULT, tool_heavy_conversation

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def small_windows(settings):
    # The known conversation has 20 short messages: let a window of 2 count.
    settings.ASSISTANT_COMPACTION = {"VERBATIM_AFTER_SHIFT": "recent", "MIN_RECENT_MESSAGES": 2}


def originals(conversation: Conversation) -> list[tuple[int, str]]:
    return list(
        Message.objects.filter(conversation=conversation)
        .order_by("id")
        .values_list("id", "content")
    )


def compacted_ids(conversation: Conversation) -> list[int]:
    return list(
        Message.objects.filter(conversation=conversation)
        .exclude(compaction="")
        .order_by("id")
        .values_list("id", flat=True)
    )


def test_level_1_compacts_every_tool_result_and_tightens_the_window():
    conversation, rows = tool_heavy_conversation()
    before_originals = originals(conversation)
    tokens_before = context_tokens(conversation)

    assert emergency_compact(conversation, level=1) is True

    conversation.refresh_from_db()
    # Every tool result that gets shorter; the 20-character one would only grow.
    assert compacted_ids(conversation) == [rows[2].pk]
    # 20% of 20 messages is 4, snapped back to the start of that user turn.
    assert conversation.compaction_through_message_id == rows[13].pk
    assert build_context(conversation).message_ids == [m.pk for m in rows[14:]]
    event = CompactionEvent.objects.get(kind=CompactionEvent.Kind.EMERGENCY_1)
    assert (event.tokens_before, event.tokens_after) == (
        tokens_before,
        context_tokens(conversation),
    )
    assert event.tokens_after < event.tokens_before
    assert event.messages_affected == 1
    assert event.details == {"level": 1, "summary_regenerated": True}
    assert originals(conversation) == before_originals


def test_level_2_keeps_only_the_turns_user_message_and_the_newest_step():
    conversation, rows = tool_heavy_conversation()
    before_originals = originals(conversation)

    assert emergency_compact(conversation, level=2) is True

    conversation.refresh_from_db()
    assert conversation.compaction_through_message_id == rows[17].pk
    assert build_context(conversation).message_ids == [rows[18].pk, rows[19].pk]
    assert compacted_ids(conversation) == [rows[2].pk]
    event = CompactionEvent.objects.get(kind=CompactionEvent.Kind.EMERGENCY_2)
    assert event.details == {"level": 2, "summary_regenerated": True}
    assert originals(conversation) == before_originals


def test_level_2_never_splits_a_tool_call_from_its_result():
    conversation, rows = tool_heavy_conversation()
    # The last two messages are now a tool call and its result.
    from assistant.services import add_message

    add_message(conversation, "user", "Fetch it again")
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c3", "name": "fetch_url", "arguments": {"url": "feed.xml"}}],
    )
    add_message(conversation, "tool", SMALL_RESULT, tool_call_id="c3")

    assert emergency_compact(conversation, level=2) is True

    kept = build_context(conversation).message_ids
    assert kept == list(
        Message.objects.filter(conversation=conversation, id__gt=rows[19].pk).values_list(
            "id", flat=True
        )
    )


def test_a_level_that_cannot_shrink_returns_false_and_records_nothing():
    conversation, _ = tool_heavy_conversation()
    assert emergency_compact(conversation, level=2) is True

    assert emergency_compact(conversation, level=2) is False
    assert CompactionEvent.objects.filter(kind=CompactionEvent.Kind.EMERGENCY_2).count() == 1


def test_every_original_can_be_restored_after_both_levels():
    conversation, rows = tool_heavy_conversation()
    emergency_compact(conversation, level=1)
    emergency_compact(conversation, level=2)

    assert restore_originals(conversation) == 1

    assert compacted_ids(conversation) == []
    contents = dict(originals(conversation))
    assert contents[rows[2].pk] == BIG_RESULT
    assert contents[rows[16].pk] == SMALL_RESULT


def test_a_failure_returns_false_and_loses_nothing(monkeypatch):
    conversation, _rows = tool_heavy_conversation()
    before = originals(conversation)
    metadata_before = held_state(Conversation.objects.get(pk=conversation.pk))

    def broken(*args, **kwargs):
        raise RuntimeError("summarizer exploded")

    monkeypatch.setattr("assistant.emergency.levels.regenerate_window_summary", broken)

    assert emergency_compact(conversation, level=2) is False
    assert originals(conversation) == before
    assert held_state(Conversation.objects.get(pk=conversation.pk)) == metadata_before
    assert not CompactionEvent.objects.filter(kind__startswith="emergency").exists()


def test_an_unknown_level_is_refused():
    conversation, _ = tool_heavy_conversation()
    with pytest.raises(ValidationError, match="level must be 1 or 2") as refused:
        emergency_compact(conversation, level=3)
    assert refused.value.code == "invalid_level"


def test_a_response_over_the_window_marks_the_conversation_and_the_next_hook_compacts():
    conversation, _rows = tool_heavy_conversation()

    class Usage:
        prompt_tokens = 210_000

    class Response:
        usage = Usage()
        stop_reason = "end_turn"

    assert emergency.note_response(conversation, Response(), window_tokens=200_000) is True
    stored = held_state(Conversation.objects.get(pk=conversation.pk))
    assert stored[MetadataKeys.NEEDS_EMERGENCY_COMPACTION] is True

    assert emergency.compact_if_flagged(conversation) is True

    stored = held_state(Conversation.objects.get(pk=conversation.pk))
    assert MetadataKeys.NEEDS_EMERGENCY_COMPACTION not in stored
    assert CompactionEvent.objects.filter(kind=CompactionEvent.Kind.EMERGENCY_1).count() == 1
    assert emergency.compact_if_flagged(conversation) is False


def test_a_response_within_the_window_marks_nothing():
    conversation, _ = tool_heavy_conversation()

    class Usage:
        prompt_tokens = 199_999

    class Response:
        usage = Usage()
        stop_reason = "end_turn"

    assert emergency.note_response(conversation, Response(), window_tokens=200_000) is False
    assert MetadataKeys.NEEDS_EMERGENCY_COMPACTION not in (
        held_state(Conversation.objects.get(pk=conversation.pk))
    )


@pytest.mark.parametrize(
    ("message", "counts"),
    [
        ("prompt is too long: 208310 tokens > 200000 maximum", (208310, 200000)),
        (
            "The input token count (1200293) exceeds the maximum number of tokens allowed "
            "(1048576).",
            (1200293, 1048576),
        ),
        (
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens. Please reduce the length of the messages.",
            (9000, 8192),
        ),
        ("Rate limit reached for tokens per min", None),
    ],
)
def test_overflow_token_counts_reads_each_providers_wording(message, counts):
    assert overflow_token_counts(RuntimeError(message)) == counts


def test_a_retry_is_only_worth_it_when_the_smaller_context_fits():
    error = RuntimeError("prompt is too long: 208310 tokens > 200000 maximum")

    assert overflow.retry_can_fit(error, tokens_before=1000, tokens_after=960) is True
    assert overflow.retry_can_fit(error, tokens_before=1000, tokens_after=961) is False
    assert overflow.retry_can_fit(RuntimeError("too long"), 1000, 999) is True


def test_shrank_compares_estimates_never_a_provider_count_with_estimates():
    conversation = Conversation.objects.create(title="tiny", system_prompt="You help.")
    from assistant.services import add_message

    add_message(conversation, "user", "hi")
    # The provider counted a far larger prompt than our estimates (another tokenizer).
    add_message(conversation, "assistant", "hello", input_tokens=100_000)

    assert emergency_compact(conversation, level=1) is False
    assert not CompactionEvent.objects.filter(kind__startswith="emergency").exists()


def test_a_level_never_stores_a_summary_that_makes_the_context_larger():
    conversation, _ = tool_heavy_conversation()
    metadata = held_state(Conversation.objects.get(pk=conversation.pk))

    # Tiny messages: any summary of them is longer than they are.
    Message.objects.filter(conversation=conversation).update(token_estimate=1)
    emergency_compact(conversation, level=2)

    stored = held_state(Conversation.objects.get(pk=conversation.pk))
    assert "compaction_summary" not in stored
    assert {k: v for k, v in stored.items() if k != "summary_failure"} == metadata
