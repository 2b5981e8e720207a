"""Undo the last compaction (issue 56): the next request is again exactly the one
sent before it, messages added since stay verbatim after it, one `restore` event
with one start and one end; the restored split waits for the context to grow past
the trigger by UNDO_MARGIN before it shifts again."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client, override_settings

from assistant.models import CompactionEvent, Conversation
from assistant.services import (
    add_message,
    build_context,
    ensure_context_summary,
    model_request,
    summarize_before,
    undo_compaction,
    undo_compaction_preview,
)
from assistant.signals import COMPLETED, compaction_event
from assistant.tasks import staff_action_task
from tests.builders import chat_turns
from tests.scenarios import staff_user
from tests.test_admin import published_tasks, run_action
from tests.test_compaction_events import SMALL_WINDOW, lifecycles


@pytest.fixture
def notices():
    seen: list = []

    def receive(sender, notice, **kwargs):
        seen.append(notice)

    compaction_event.connect(receive, weak=False)
    yield seen
    compaction_event.disconnect(receive)


def request_of(conversation: Conversation) -> dict:
    return model_request(build_context(conversation))


def plain(messages: list[dict]) -> list[dict]:
    """The messages without the cache breakpoints, which move to the newest one."""
    return [
        {
            **m,
            "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]],
        }
        if isinstance(m["content"], list)
        else m
        for m in messages
    ]


def conversation_of(turns: int = 6) -> tuple[Conversation, list]:
    conversation = Conversation.objects.create(title="undo", system_prompt="You help.")
    messages = chat_turns(conversation, turns, size=400)
    messages.append(add_message(conversation, "user", "And now?"))
    return conversation, messages


@pytest.mark.django_db
def test_undo_brings_back_exactly_the_previous_request(notices):
    conversation, messages = conversation_of()
    summarize_before(conversation, messages[4].pk)  # an earlier summary, with its split
    first = request_of(conversation)
    summarize_before(conversation, messages[8].pk)
    assert request_of(conversation) != first
    notices.clear()

    preview = undo_compaction_preview(conversation)
    outcome = undo_compaction(conversation)

    assert outcome.changed, outcome.message
    assert request_of(conversation) == first
    conversation.refresh_from_db()
    assert (preview.through_id, preview.summary) == (
        conversation.compaction_through_message_id,
        conversation.compaction_summary,
    )
    event = CompactionEvent.objects.filter(conversation=conversation).latest("id")
    assert event.kind == "restore" and event.details["undid_event_id"] == preview.event_id
    assert lifecycles(notices) == [("restore", COMPLETED)]


@pytest.mark.django_db
def test_messages_after_the_compaction_stay_verbatim_after_undo():
    conversation, messages = conversation_of()
    before = plain(request_of(conversation)["messages"])
    summarize_before(conversation, messages[6].pk)
    add_message(conversation, "assistant", "Now this.")
    add_message(conversation, "user", "Then that?")

    undo_compaction(conversation)

    after = plain(request_of(conversation)["messages"])
    assert after[: len(before)] == before
    assert "Now this." in str(after[len(before) :]) and "Then that?" in str(after[-1])


@pytest.mark.django_db
def test_undo_refuses_what_it_cannot_undo():
    conversation, messages = conversation_of()
    for refused in (undo_compaction, undo_compaction_preview):
        with pytest.raises(ValidationError) as caught:
            refused(conversation)
        assert caught.value.code == "nothing_to_undo"
    summarize_before(conversation, messages[6].pk)
    undo_compaction(conversation)
    with pytest.raises(ValidationError) as caught:
        undo_compaction(conversation)
    assert caught.value.code == "already_undone"


@pytest.mark.django_db
@override_settings(ASSISTANT_COMPACTION=SMALL_WINDOW)
def test_the_same_shift_waits_until_the_context_grows_past_the_margin():
    conversation = Conversation.objects.create(title="long", system_prompt="You help.")
    chat_turns(conversation, 5, size=400)
    add_message(conversation, "user", "And now?")
    ensure_context_summary(conversation)  # the count trigger (10 messages) shifts it
    conversation.refresh_from_db()
    assert conversation.compaction_through_message_id is not None
    undo_compaction(conversation)

    # 11 messages: over the trigger, under trigger x (1 + UNDO_MARGIN) = 12.1.
    ensure_context_summary(conversation)
    conversation.refresh_from_db()
    assert conversation.compaction_through_message_id is None
    add_message(conversation, "assistant", "a")
    ensure_context_summary(conversation)
    conversation.refresh_from_db()
    assert conversation.compaction_through_message_id is None

    add_message(conversation, "user", "b")  # 13 messages: past the margin
    ensure_context_summary(conversation)
    conversation.refresh_from_db()
    assert conversation.compaction_through_message_id is not None


@pytest.fixture
def staff_client(db):
    client = Client()
    client.force_login(staff_user())
    return client


def test_admin_undoes_the_last_compaction_after_showing_its_preview(staff_client, db):
    conversation, messages = conversation_of()
    first = request_of(conversation)
    summarize_before(conversation, messages[6].pk)

    page = run_action(staff_client, "undo_last_compaction", conversation)

    assert page.status_code == 200
    (row,) = page.context["rows"]
    assert row["preview"] == undo_compaction_preview(conversation)
    assert "event #" in page.content.decode()
    done = run_action(staff_client, "undo_last_compaction", conversation, post="yes")
    assert done.status_code == 302
    assert plain(request_of(conversation)["messages"]) == plain(first["messages"])
    again = run_action(staff_client, "undo_last_compaction", conversation)
    assert "already undone" in again.content.decode()


def test_admin_queues_summarize_before_a_message(
    staff_client, db, django_capture_on_commit_callbacks, monkeypatch
):
    conversation, messages = conversation_of()

    page = run_action(staff_client, "summarize_before_message", conversation)
    assert page.status_code == 200
    assert f'value="{messages[6].pk}"' in page.content.decode()
    with django_capture_on_commit_callbacks() as published:
        done = run_action(
            staff_client,
            "summarize_before_message",
            conversation,
            post="yes",
            message_id=messages[6].pk,
        )

    assert done.status_code == 302
    user_id = int(staff_client.session["_auth_user_id"])
    assert published_tasks(monkeypatch, published) == [
        (
            staff_action_task.name,
            ("summarize_before", conversation.pk, user_id, "", messages[6].pk),
        )
    ]
