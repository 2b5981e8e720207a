"""Choosing where to cut (issue 56): summarize everything before a message, keep it
and all after it verbatim; refused for a message the summary already covers; its
preview names what it does; a compaction with one start and one end."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from assistant.models import Conversation, SummaryVersion
from assistant.services import (
    add_message,
    build_context,
    model_request,
    run_staff_action,
    summarize_before,
    summarize_before_preview,
)
from assistant.signals import COMPLETED, compaction_event
from tests.builders import chat_turns, tool_turn
from tests.scenarios import staff_user
from tests.test_compaction_events import lifecycles


@pytest.fixture
def notices():
    seen: list = []

    def receive(sender, notice, **kwargs):
        seen.append(notice)

    compaction_event.connect(receive, weak=False)
    yield seen
    compaction_event.disconnect(receive)


def conversation_of(turns: int = 6) -> tuple[Conversation, list]:
    conversation = Conversation.objects.create(title="cut", system_prompt="You help.")
    messages = chat_turns(conversation, turns, size=400)
    messages.append(add_message(conversation, "user", "And now?"))
    return conversation, messages


def request_of(conversation: Conversation) -> dict:
    return model_request(build_context(conversation))


@pytest.mark.django_db
def test_summarize_before_keeps_the_message_and_all_after_it_verbatim(notices):
    conversation, messages = conversation_of()
    cut = messages[6]  # the fourth turn's user message
    before = request_of(conversation)["messages"]

    outcome = summarize_before(conversation, cut.pk, instructions="Keep the numbers.")

    assert outcome.changed, outcome.message
    after = request_of(conversation)["messages"]
    # The messages from the cut on are sent exactly as they were sent before it.
    tail = len(messages) - 6
    assert after[-tail:] == before[-tail:]
    text = str(after[:-tail])
    assert "q0 " not in text and "q2 " not in text
    assert conversation.__class__.objects.get(pk=conversation.pk).compaction_through_message_id == (
        messages[5].pk
    )
    version = SummaryVersion.objects.filter(conversation=conversation).latest("id")
    assert version.through_message_id == messages[5].pk
    assert lifecycles(notices) == [("window_summary", COMPLETED)]


@pytest.mark.django_db
def test_summarize_before_preview_equals_the_result():
    conversation, messages = conversation_of()
    cut = messages[7]  # an answer: the cut goes back to its turn's user message

    preview = summarize_before_preview(conversation, cut.pk)
    outcome = summarize_before(conversation, cut.pk)

    assert outcome.changed
    assert preview.summarized == tuple(m.pk for m in messages[:6])
    assert preview.verbatim == tuple(m.pk for m in messages[6:])
    assert build_context(conversation).message_ids[-len(preview.verbatim) :] == list(
        preview.verbatim
    )


@pytest.mark.django_db
def test_a_message_already_summarized_is_refused():
    conversation, messages = conversation_of()
    summarize_before(conversation, messages[6].pk)

    for refused in (summarize_before, summarize_before_preview):
        with pytest.raises(ValidationError) as caught:
            refused(conversation, messages[2].pk)
        assert caught.value.code == "already_summarized"
    other, _ = conversation_of(1)
    with pytest.raises(ValidationError) as caught:
        summarize_before(conversation, other.messages.first().pk)
    assert caught.value.code == "message_not_found"


@pytest.mark.django_db
def test_the_cut_keeps_a_tool_call_with_its_results():
    conversation = Conversation.objects.create(title="tools", system_prompt="You help.")
    chat_turns(conversation, 2, size=400)
    first, call, result, _answer = tool_turn(
        conversation, "look it up " + "z" * 400, [("search", {"q": "x"}, "r" * 400)], "found it"
    )
    add_message(conversation, "user", "and now?")

    preview = summarize_before_preview(conversation, result.pk)

    # Asked to cut between a call and its result, it cuts at their turn's start.
    assert preview.verbatim[0] == first.pk
    assert call.pk in preview.verbatim and result.pk in preview.verbatim


@pytest.mark.django_db
def test_the_staff_action_summarizes_before_a_message(notices):
    conversation, messages = conversation_of()
    staff = staff_user()

    outcome = run_staff_action(
        "summarize_before", conversation.pk, staff.pk, message_id=messages[6].pk
    )

    assert outcome.changed, outcome.message
    assert lifecycles(notices) == [("window_summary", COMPLETED)]
    assert notices[0].acting_user_id == staff.pk
    refused = run_staff_action(
        "summarize_before", conversation.pk, staff.pk, message_id=messages[2].pk
    )
    assert not refused.changed and "already summarized" in refused.message
