"""Summarize after a message (issue 56): the messages after the chosen one, up to the
newest step, become a summarized segment; those up to it and the newest step are sent
as they were; undo brings back exactly the previous request; the preview equals the
result; bad input is refused with a code and nothing changes."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from assistant.models import CompactionEvent, Conversation, SummaryVersion
from assistant.services import (
    add_message,
    build_context,
    compact_tool_results,
    context_tokens,
    pin_message,
    run_staff_action,
    summarize_after,
    summarize_after_preview,
    summarize_before,
    undo_compaction,
    undo_compaction_preview,
)
from assistant.signals import COMPLETED
from assistant.tasks import staff_action_task
from tests.builders import chat_turns, tool_turn
from tests.scenarios import staff_user, tool_heavy_conversation
from tests.test_admin import flashed, published_tasks, run_action
from tests.test_compaction_events import lifecycles
from tests.test_cut import conversation_of, request_of
from tests.test_cut import notices as notices  # the fixture: every compaction notice
from tests.test_undo_compaction import plain


def text_of(message: dict) -> str:
    content = message["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


@pytest.mark.django_db
def test_summarize_after_keeps_the_earlier_messages_and_the_newest_step(notices):
    conversation, messages = conversation_of()
    before = plain(request_of(conversation)["messages"])
    size = context_tokens(conversation)

    outcome = summarize_after(conversation, messages[3].pk, instructions="Keep the numbers.")

    assert outcome.changed, outcome.message
    after = plain(request_of(conversation)["messages"])
    # q0 a0 q1 a1 are sent exactly as before; then the segment, then the newest step.
    assert after[:4] == before[:4]
    tail = text_of(after[-1])
    assert "Summary of this conversation's messages after" in tail
    assert tail.endswith("And now?")
    sent = str(after)
    for gone in messages[4:12]:  # the segment's messages are not sent whole
        assert gone.content not in sent
    assert context_tokens(conversation) < size
    version = SummaryVersion.objects.filter(conversation=conversation).latest("id")
    assert (version.after_message_id, version.through_message_id) == (
        messages[3].pk,
        messages[11].pk,
    )
    assert lifecycles(notices) == [("window_summary", COMPLETED)]
    # The messages that come next are sent verbatim after the newest step.
    add_message(conversation, "assistant", "Here it is.")
    add_message(conversation, "user", "Thanks, and then?")
    grown = plain(request_of(conversation)["messages"])
    assert grown[:4] == before[:4] and text_of(grown[-1]) == "Thanks, and then?"


@pytest.mark.django_db
def test_summarize_after_preview_equals_the_result():
    conversation, messages = conversation_of()

    preview = summarize_after_preview(conversation, messages[2].pk)  # a question
    outcome = summarize_after(conversation, messages[2].pk)

    assert outcome.changed
    # The cut falls after its answer (the next turn starts the segment).
    assert preview.summarized == tuple(m.pk for m in messages[4:12])
    assert preview.verbatim == tuple(m.pk for m in [*messages[:4], messages[12]])
    assert build_context(conversation).message_ids == list(preview.verbatim)


@pytest.mark.django_db
def test_undo_brings_back_exactly_the_request_before_summarize_after():
    conversation, messages = conversation_of()
    summarize_before(conversation, messages[4].pk)  # a window summary, which stays
    first = plain(request_of(conversation)["messages"])
    size = context_tokens(conversation)
    summarize_after(conversation, messages[7].pk)
    assert plain(request_of(conversation)["messages"]) != first

    outcome = undo_compaction(conversation)

    assert outcome.changed, outcome.message
    assert plain(request_of(conversation)["messages"]) == first
    assert context_tokens(conversation) == size
    restore = CompactionEvent.objects.filter(conversation=conversation).latest("id")
    assert restore.kind == CompactionEvent.Kind.RESTORE
    conversation.refresh_from_db()
    assert conversation.segment_summary is None
    with pytest.raises(ValidationError) as caught:
        undo_compaction(conversation)
    assert caught.value.code == "already_undone"


@pytest.mark.django_db
def test_a_tool_call_stays_with_its_results():
    conversation = Conversation.objects.create(title="tools", system_prompt="You help.")
    early = chat_turns(conversation, 1, size=400)
    first, call, result, answer = tool_turn(
        conversation, "look it up " + "z" * 400, [("search", {"q": "x"}, "r" * 400)], "found it"
    )
    chat_turns(conversation, 2, size=400)
    newest = add_message(conversation, "user", "and now?")

    preview = summarize_after_preview(conversation, call.pk)

    # Asked to cut after a call, the segment starts after its results and answer.
    assert {first.pk, call.pk, result.pk, answer.pk} <= set(preview.verbatim)
    assert preview.summarized[0] == answer.pk + 1
    assert preview.verbatim[-1] == newest.pk and early[0].pk in preview.verbatim
    assert summarize_after(conversation, call.pk).changed
    assert build_context(conversation).message_ids == list(preview.verbatim)


@pytest.mark.django_db
def test_a_pinned_message_of_the_segment_stays_in_force():
    conversation, messages = conversation_of()
    pin_message(conversation, messages[6].pk)

    assert summarize_after(conversation, messages[1].pk).changed

    context = build_context(conversation)
    assert context.pinned is not None and "q3 " in context.pinned
    assert messages[6].pk not in context.message_ids


@pytest.mark.django_db
def test_bad_input_is_refused_with_a_code_and_nothing_changes():
    conversation, messages = conversation_of()
    other, _ = conversation_of(1)
    before = request_of(conversation)

    cases = [
        (other.messages.first().pk, "message_not_found"),
        (messages[11].pk, "nothing_after"),  # only the newest step follows it
        (messages[12].pk, "nothing_after"),  # the newest step itself
        ("7", "invalid_message_id"),
    ]
    for message_id, code in cases:
        for refused in (summarize_after, summarize_after_preview):
            with pytest.raises(ValidationError) as caught:
                refused(conversation, message_id)
            assert caught.value.code == code, (message_id, caught.value)
    assert request_of(conversation) == before
    assert not CompactionEvent.objects.filter(conversation=conversation).exists()

    summarize_before(conversation, messages[4].pk)
    with pytest.raises(ValidationError) as caught:
        summarize_after(conversation, messages[1].pk)
    assert caught.value.code == "already_summarized"
    summarize_after(conversation, messages[5].pk)
    with pytest.raises(ValidationError) as caught:
        summarize_after(conversation, messages[4].pk)
    assert caught.value.code == "segment_exists"


@pytest.mark.django_db
def test_a_shift_past_the_segment_folds_it_into_the_window_summary():
    conversation, messages = conversation_of()
    summarize_after(conversation, messages[1].pk)
    later = []
    for turn in range(4):
        later.append(add_message(conversation, "assistant", f"later answer {turn} " + "w" * 400))
        later.append(add_message(conversation, "user", f"later question {turn} " + "v" * 400))

    assert summarize_before(conversation, later[5].pk).changed

    conversation.refresh_from_db()
    assert conversation.compaction_through_message_id > messages[1].pk
    assert conversation.segment_summary is None
    ids = build_context(conversation).message_ids
    assert not {m.pk for m in messages[:12]} & set(ids)


@pytest.mark.django_db
def test_the_staff_action_summarizes_after_a_message(notices):
    conversation, messages = conversation_of()
    staff = staff_user()

    outcome = run_staff_action(
        "summarize_after", conversation.pk, staff.pk, message_id=messages[3].pk
    )

    assert outcome.changed, outcome.message
    assert lifecycles(notices) == [("window_summary", COMPLETED)]
    assert notices[0].acting_user_id == staff.pk
    refused = run_staff_action(
        "summarize_after", conversation.pk, staff.pk, message_id=messages[11].pk
    )
    assert not refused.changed and "segment" in refused.message


@pytest.fixture
def staff_client(db):
    client = Client()
    client.force_login(staff_user())
    return client


@pytest.mark.django_db
def test_admin_queues_summarize_after_a_message_and_refuses_a_bad_one(
    staff_client, django_capture_on_commit_callbacks, monkeypatch
):
    conversation, messages = conversation_of()

    page = run_action(staff_client, "summarize_after_message", conversation)
    assert page.status_code == 200
    assert "Summarize after this message" in page.content.decode()
    with django_capture_on_commit_callbacks() as published:
        done = run_action(
            staff_client,
            "summarize_after_message",
            conversation,
            post="yes",
            message_id=messages[2].pk,
        )
    assert done.status_code == 302
    user_id = int(staff_client.session["_auth_user_id"])
    assert published_tasks(monkeypatch, published) == [
        (staff_action_task.name, ("summarize_after", conversation.pk, user_id, "", messages[2].pk))
    ]
    with django_capture_on_commit_callbacks() as refused:
        again = run_action(
            staff_client,
            "summarize_after_message",
            conversation,
            post="yes",
            message_id=messages[12].pk,
            follow=True,
        )
    assert not refused
    assert any("only the newest step follows it" in m for m in flashed(again))


@pytest.mark.django_db
def test_the_change_page_offers_the_undo_with_its_preview(staff_client):
    conversation, messages = conversation_of()
    page = reverse("admin:assistant_conversation_change", args=[conversation.pk])
    assert "Nothing to undo: The conversation was never compacted." in (
        staff_client.get(page).content.decode()
    )
    summarize_after(conversation, messages[3].pk)

    shown = staff_client.get(page).content.decode()

    assert 'id="undo-last-compaction"' in shown
    assert undo_compaction_preview(conversation).changes[0] in shown


@pytest.mark.django_db
def test_undo_puts_back_the_tool_results_a_compaction_compacted():
    conversation, _rows = tool_heavy_conversation()
    first = plain(request_of(conversation)["messages"])
    size = context_tokens(conversation)
    assert compact_tool_results(conversation) > 0
    assert plain(request_of(conversation)["messages"]) != first

    preview = undo_compaction_preview(conversation)
    outcome = undo_compaction(conversation)

    assert outcome.changed, outcome.message
    assert "sent whole again" in preview.changes[0]
    assert plain(request_of(conversation)["messages"]) == first
    assert context_tokens(conversation) == size
    restore = CompactionEvent.objects.filter(conversation=conversation).latest("id")
    assert restore.kind == CompactionEvent.Kind.RESTORE and restore.details["message_ids"]
    # Kept whole from now on: the same compaction is not made again.
    assert compact_tool_results(conversation) == 0
    with pytest.raises(ValidationError) as caught:
        undo_compaction(conversation)
    assert caught.value.code == "already_undone"
