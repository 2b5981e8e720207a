"""A confirmation's preview is what the action then does: each preview is
taken, the action run as staff run it (`run_staff_action`), and the two
compared figure by figure."""

from __future__ import annotations

import pytest

from assistant.models import CompactionEvent, Message
from assistant.services import (
    add_message,
    compact_tool_results,
    emergency_preview,
    regenerate_preview,
    regenerate_window_summary,
    restore_preview,
    run_staff_action,
)
from assistant.staff.operations import (
    COMPACT_TOOL_RESULTS,
    EMERGENCY_1,
    EMERGENCY_2,
    REGENERATE_SUMMARY,
    RESTORE_ORIGINALS,
)
from assistant.window import load_window
from tests.builders import html
from tests.scenarios import staff_user, tool_heavy_conversation

EMERGENCIES = {1: EMERGENCY_1, 2: EMERGENCY_2}
SMALL = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "MIN_RECENT_MESSAGES": 2,
    "CONTEXT_TOKEN_THRESHOLD": 1000,
    "MAX_RECENT_TOKENS": 500,
}


def compacted_conversation():
    """Tool results compacted, a window summary, then more turns, one with a
    large result and the provider's count of its prompt (so the size before
    the restore is the provider's, after it our estimates)."""
    conversation, _ = tool_heavy_conversation()
    compact_tool_results(conversation)
    regenerate_window_summary(conversation)
    add_message(conversation, "user", "Read the feed again.")
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c3", "name": "fetch_url", "arguments": {"url": "feed.xml"}}],
    )
    add_message(conversation, "tool", html(6000, "feed"), tool_call_id="c3")
    add_message(conversation, "assistant", "Same feed.", input_tokens=2400, output_tokens=5)
    add_message(conversation, "user", "Thanks.")
    add_message(conversation, "assistant", "You are welcome.", input_tokens=2450, output_tokens=5)
    compact_tool_results(conversation)
    return conversation


@pytest.mark.django_db(transaction=True)
def test_the_restore_preview_is_what_the_restore_does(settings):
    settings.ASSISTANT_COMPACTION = SMALL
    staff = staff_user()
    conversation = compacted_conversation()
    compacted = list(
        Message.objects.filter(conversation=conversation).exclude(compaction="").order_by("id")
    )
    assert len(compacted) == 2

    preview = restore_preview(conversation)
    outcome = run_staff_action(RESTORE_ORIGINALS, conversation.pk, staff.pk)

    (event,) = CompactionEvent.objects.filter(kind=CompactionEvent.Kind.RESTORE)
    after = load_window(conversation.pk).context_tokens()
    (part,) = event.details["parts"]
    assert (event.messages_affected, part["message_ids"]) == (
        preview.messages,
        [m.pk for m in compacted],
    )
    assert (event.tokens_before, event.tokens_after) == (
        preview.context_tokens,
        preview.next_request_tokens,
    )
    assert after == preview.next_request_tokens
    assert outcome.message == (
        f"{preview.messages} original(s) restored; the next request is "
        f"{preview.next_request_tokens:,} tokens"
    )


@pytest.mark.django_db(transaction=True)
def test_the_regenerate_preview_names_the_split_the_summary_then_covers(settings):
    settings.ASSISTANT_COMPACTION = SMALL
    staff = staff_user()
    conversation, rows = tool_heavy_conversation()
    compact_tool_results(conversation)

    preview = regenerate_preview(conversation)
    outcome = run_staff_action(REGENERATE_SUMMARY, conversation.pk, staff.pk)

    state = load_window(conversation.pk)
    summarized = [row for row in rows if row.pk <= state.through_id]
    assert outcome.changed is True
    assert preview.changes == [
        f"messages #{summarized[0].pk} to #{summarized[-1].pk} ({len(summarized)}) go into "
        f"the window summary; {len(state.verbatim)} stay verbatim"
    ]


@pytest.mark.django_db(transaction=True)
def test_one_staff_action_writes_one_event_listing_what_it_touched(settings):
    settings.ASSISTANT_COMPACTION = SMALL
    staff = staff_user()
    conversation, _ = tool_heavy_conversation()
    # Two more large results, and a copy of the first call (stubbed as a duplicate).
    for n, arguments in enumerate(({"id": 7}, {"id": 8}, {"id": 42})):
        add_message(conversation, "user", f"And post {arguments['id']}?")
        add_message(
            conversation,
            "assistant",
            "",
            tool_calls=[{"id": f"d{n}", "name": "read_post", "arguments": arguments}],
        )
        add_message(conversation, "tool", html(4000, f"post {n}"), tool_call_id=f"d{n}")
        add_message(conversation, "assistant", "Read.")
    add_message(conversation, "user", "Thanks.")
    add_message(conversation, "assistant", "Welcome.")
    before = load_window(conversation.pk).context_tokens()

    outcome = run_staff_action(COMPACT_TOOL_RESULTS, conversation.pk, staff.pk)

    (event,) = CompactionEvent.objects.filter(conversation=conversation)
    touched = list(
        Message.objects.filter(conversation=conversation).exclude(compaction="").order_by("id")
    )
    assert outcome.changed is True
    assert (event.kind, event.acting_user_id, event.messages_affected) == (
        CompactionEvent.Kind.TOOL_RESULTS,
        staff.pk,
        len(touched),
    )
    assert (event.tokens_before, event.tokens_after) == (
        before,
        load_window(conversation.pk).context_tokens(),
    )
    listed = sorted(
        [part["message_id"] for part in event.details["parts"] if "message_id" in part]
        + [pk for part in event.details["parts"] for pk in part.get("message_ids", [])]
    )
    assert listed == [m.pk for m in touched]


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.django_db(transaction=True)
def test_the_emergency_preview_is_what_the_level_does(settings, level):
    settings.ASSISTANT_COMPACTION = SMALL
    staff = staff_user()
    conversation, rows = tool_heavy_conversation()

    preview = emergency_preview(conversation, level)
    outcome = run_staff_action(EMERGENCIES[level], conversation.pk, staff.pk)

    state = load_window(conversation.pk)
    summarized = [row for row in rows if row.pk <= state.through_id]
    # The 3 KB result; the 20-character one would not shrink, and stays as it is.
    (compacted,) = Message.objects.filter(
        conversation=conversation, role=Message.Role.TOOL
    ).exclude(compaction="")
    assert compacted.pk == rows[2].pk
    assert preview.changes == [
        "1 tool result(s) compacted, whatever their size",
        f"messages #{summarized[0].pk} to #{summarized[-1].pk} ({len(summarized)}) go into "
        f"the window summary; {len(state.verbatim)} stay verbatim (kept only if the context "
        "shrinks)",
    ]
    assert "(1 tool result(s) compacted, window summary regenerated)" in outcome.message
    (event,) = CompactionEvent.objects.filter(conversation=conversation)
    summary_part = [p for p in event.details["parts"] if p["kind"] == "window_summary"]
    assert (event.kind, event.messages_affected) == (
        f"emergency_{level}",
        1 + sum(part["messages_affected"] for part in summary_part),
    )
