"""The demo's overflow-and-fork scene, run against the test database."""

import io

import pytest
from django.core.management.base import OutputWrapper

from assistant.models import CompactionEvent, Conversation
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
