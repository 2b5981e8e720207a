"""The demo's overflow-and-fork scene, run against the test database."""

import io

import pytest
from django.core.management.base import OutputWrapper

from assistant.models import CompactionEvent, Conversation
from demo.management.commands.demo import step_lines
from demo.scenes import DEMO_WINDOW_TOKENS, run_overflow_and_fork_demo

pytestmark = pytest.mark.django_db


def test_the_demo_recovers_from_a_real_sdk_overflow_error_and_forks():
    out = io.StringIO()

    figures = run_overflow_and_fork_demo(OutputWrapper(out))

    first, second = figures["attempts"]
    assert first.startswith("BadRequestError 400: prompt is too long: ")
    assert first.endswith(f" tokens > {DEMO_WINDOW_TOKENS} maximum")
    assert second.startswith("200 OK, ")
    assert figures["emergency_levels"] == [CompactionEvent.Kind.EMERGENCY_1]
    assert figures["tokens_after"] < figures["tokens_before"]
    fork = Conversation.objects.get(pk=figures["fork_id"])
    branch = Conversation.objects.get(pk=figures["branch_id"])
    assert (
        fork.parent_conversation_id == branch.parent_conversation_id == figures["conversation_id"]
    )
    assert fork.parent_conversation_summary
    assert "attempt 1: BadRequestError 400: prompt is too long" in out.getvalue()
    assert f"branch {branch.pk}: “{branch.title}”" in out.getvalue()
    # The model read a handle in a compacted result and recalled the original.
    assert figures["recall_answer"] == "The original says its title is “Pricing”."
    assert figures["recall_count"] == 1


def test_each_demo_figure_says_what_it_measures_and_two_shifts_are_never_summed():
    """A scene's line says one step's own figures: "47,396 -> 9,444 tokens … context
    2,292" once was two shifts' contexts added up beside a context no step produced."""
    kinds = CompactionEvent.Kind
    events = [
        CompactionEvent(kind=kinds.WINDOW_SUMMARY, tokens_before=23_828, tokens_after=11_098,
                        messages_affected=16),
        CompactionEvent(kind=kinds.TOOL_RESULTS, tokens_before=5_000, tokens_after=231,
                        messages_affected=1),
        CompactionEvent(kind=kinds.WINDOW_SUMMARY, tokens_before=23_568, tokens_after=2_292,
                        messages_affected=9),
        CompactionEvent(kind=kinds.TOOL_RESULTS, tokens_before=3_405, tokens_after=232,
                        messages_affected=1),
    ]  # fmt: skip

    lines = step_lines(77, events, 2_292, 200_000)

    assert lines == [
        "turn  77  window summary                     16 message(s)  "
        "the request: 23,828 → 11,098 tokens",
        "turn  77  window summary                      9 message(s)  "
        "the request: 23,568 → 2,292 tokens",
        "turn  77  tool results compacted              2 message(s)  "
        "the messages compacted: 8,405 → 463 tokens",
        "turn  77  the next request                                  "
        "2,292 tokens, 1.1% of the model's window of 200,000 tokens",
    ]
