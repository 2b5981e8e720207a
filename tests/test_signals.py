"""What a host app can tell its users: the signals sent once a compaction
commits, and context_status for a /status command."""

from __future__ import annotations

import pytest
from django.db import transaction

from assistant.models import CompactionEvent, Message
from assistant.services import (
    compact_tool_results,
    context_status,
    emergency_compact,
    regenerate_window_summary,
)
from assistant.signals import context_compacted, emergency_compaction
from assistant.window import load_window
from assistant.window.limits import current_limits
from tests.scenarios import staff_user, tool_heavy_conversation


@pytest.fixture
def received():
    """Every signal sent during the test, as (signal name, keyword arguments)."""
    seen: list[tuple[str, dict]] = []

    def on_compacted(sender, **kwargs):
        seen.append(("context_compacted", kwargs))

    def on_emergency(sender, **kwargs):
        seen.append(("emergency_compaction", kwargs))

    context_compacted.connect(on_compacted)
    emergency_compaction.connect(on_emergency)
    yield seen
    context_compacted.disconnect(on_compacted)
    emergency_compaction.disconnect(on_emergency)


def short(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k" if tokens >= 1000 else str(tokens)


def notice(kind: str, tokens_before: int, tokens_after: int, window: int, **_) -> str:
    """The client notice of docs/operations.rst (Signals), word for word."""
    share = round(100 * tokens_after / window)
    return (
        f"Compacted ({short(tokens_before)} -> {short(tokens_after)}) · {kind} · "
        f"Total: {short(tokens_after)}/{short(window)} ({share}%)"
    )


def test_a_compaction_is_announced_once_its_transaction_commits(
    db, received, django_capture_on_commit_callbacks
):
    conversation, _ = tool_heavy_conversation()
    staff = staff_user()

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        assert compact_tool_results(conversation, acting_user=staff) == 1
        assert received == []  # not before the commit

    event = CompactionEvent.objects.get(conversation=conversation)
    window = current_limits().window
    assert received == [
        (
            "context_compacted",
            {
                "signal": context_compacted,
                "conversation_id": conversation.pk,
                "event_id": event.pk,
                "kind": "tool_results",
                "tokens_before": event.tokens_before,
                "tokens_after": event.tokens_after,
                "window": window,
                "share_of_window": event.tokens_after / window,
                "acting_user_id": staff.pk,
            },
        )
    ]
    assert event.tokens_before > event.tokens_after
    assert notice(**received[0][1]) == (
        f"Compacted ({short(event.tokens_before)} -> {short(event.tokens_after)}) · "
        f"tool_results · Total: {short(event.tokens_after)}/200.0k "
        f"({round(100 * event.tokens_after / 200_000)}%)"
    )


def test_a_rolled_back_compaction_is_never_announced(
    db, received, django_capture_on_commit_callbacks
):
    conversation, _ = tool_heavy_conversation()

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        compact_tool_results(conversation)
        raise RuntimeError("the host's view failed")

    assert received == []
    assert not CompactionEvent.objects.filter(conversation=conversation).exists()


def test_an_emergency_level_is_announced_with_its_level(
    db, received, settings, django_capture_on_commit_callbacks
):
    settings.ASSISTANT_COMPACTION = {"VERBATIM_AFTER_SHIFT": "recent", "MIN_RECENT_MESSAGES": 2}
    conversation, _ = tool_heavy_conversation()
    staff = staff_user()

    with django_capture_on_commit_callbacks(execute=True):
        assert emergency_compact(conversation, level=1, acting_user=staff) is True

    event = CompactionEvent.objects.get(conversation=conversation, kind="emergency_1")
    emergencies = [kwargs for name, kwargs in received if name == "emergency_compaction"]
    assert emergencies == [
        {
            "signal": emergency_compaction,
            "conversation_id": conversation.pk,
            "event_id": event.pk,
            "level": 1,
            "tokens_before": event.tokens_before,
            "tokens_after": event.tokens_after,
            "acting_user_id": staff.pk,
        }
    ]
    compacted = [kwargs["kind"] for name, kwargs in received if name == "context_compacted"]
    assert compacted == ["tool_results", "window_summary", "emergency_1"]


def test_context_status_shows_what_a_status_command_prints(db, settings):
    settings.ASSISTANT_COMPACTION = {"VERBATIM_AFTER_SHIFT": "recent", "MIN_RECENT_MESSAGES": 2}
    conversation, _ = tool_heavy_conversation()
    fresh = context_status(conversation)
    assert fresh.last_compaction is None
    assert (fresh.compactions, fresh.summaries) == (0, 0)

    assert regenerate_window_summary(conversation) is True
    status = context_status(conversation)

    event = CompactionEvent.objects.get(conversation=conversation)
    assert status.tokens == load_window(conversation.pk).context_tokens()
    assert (status.window, status.trigger, status.model) == (200_000, 50_000, "claude-sonnet-4-6")
    assert status.share_of_window == status.tokens / 200_000
    assert status.has_window_summary is True
    assert status.has_parent_summary is False
    assert status.summaries == 1
    assert status.summarized_through_message_id == event.details["through_message_id"]
    assert status.compactions == 1
    assert status.last_compaction.kind == "window_summary"
    assert status.last_compaction.label == "Window summary"
    assert (status.last_compaction.tokens_before, status.last_compaction.tokens_after) == (
        event.tokens_before,
        event.tokens_after,
    )


def test_a_failing_receiver_never_fails_the_compaction(
    db, caplog, django_capture_on_commit_callbacks
):
    conversation, _ = tool_heavy_conversation()

    def broken(sender, **kwargs):
        raise KeyError("the host's bug")

    context_compacted.connect(broken)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert compact_tool_results(conversation) == 1
    finally:
        context_compacted.disconnect(broken)

    assert CompactionEvent.objects.filter(conversation=conversation).count() == 1
    assert "event=signal_receiver_failed" in caplog.text
    assert "error=KeyError" in caplog.text


def test_the_share_of_the_window_is_of_the_conversations_own_models_window(
    db, received, django_capture_on_commit_callbacks
):
    """A conversation gets the window of the model that answered it: gpt-4.1's was once
    given 200,000 (the configured model's)."""
    conversation, _ = tool_heavy_conversation()
    Message.objects.filter(conversation=conversation, role="assistant").update(
        provider="openai", model="gpt-4.1"
    )

    with django_capture_on_commit_callbacks(execute=True):
        assert compact_tool_results(conversation) == 1

    ((name, sent),) = received
    event = CompactionEvent.objects.get(conversation=conversation)
    assert (name, sent["window"]) == ("context_compacted", 1_047_576)
    assert sent["share_of_window"] == event.tokens_after / 1_047_576
