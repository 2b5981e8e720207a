"""The hot context query: fixed query count, no compacted originals loaded."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assistant.history.state_writes import write_state
from assistant.models import Conversation, Message
from assistant.services import add_message


def make_conversation(turns: int) -> Conversation:
    conversation = Conversation.objects.create(title=f"{turns} turns")
    for turn in range(turns):
        add_message(conversation, "user", f"question {turn}")
        add_message(conversation, "assistant", f"answer {turn}")
    return conversation


@pytest.mark.django_db
@pytest.mark.parametrize("turns", [5, 500])
def test_the_model_view_is_one_query_whatever_the_length(turns, django_assert_num_queries):
    conversation = make_conversation(turns)

    with django_assert_num_queries(1):
        rows = list(Message.objects.filter(conversation=conversation).model_view())

    assert len(rows) == 2 * turns
    assert [row.model_content for row in rows[:2]] == ["question 0", "answer 0"]


@pytest.mark.django_db
def test_the_model_view_never_selects_the_original_of_a_compacted_message():
    conversation = make_conversation(2)
    original = "ORIGINAL-" + "x" * 5000
    compacted = conversation.messages.filter(role="assistant").first()
    Message.objects.filter(pk=compacted.pk).update(
        content=original, compacted_content="[truncated]", compaction="truncated"
    )

    with CaptureQueriesContext(connection) as captured:
        rows = list(Message.objects.filter(conversation=conversation).model_view())

    (sql,) = [q["sql"] for q in captured.captured_queries]
    assert 'COALESCE("assistant_message"."compacted_content", "assistant_message"."content")' in sql
    assert sql.count('"assistant_message"."content"') == 1  # only inside COALESCE
    by_id = {row.pk: row for row in rows}
    assert by_id[compacted.pk].model_content == "[truncated]"
    assert "content" not in by_id[compacted.pk].__dict__
    compacted.refresh_from_db()
    assert compacted.content == original  # the original is still there


@pytest.mark.django_db
def test_the_state_accessors_are_typed_and_a_save_keeps_the_stored_state():
    conversation = Conversation.objects.create(metadata={"host": "theirs"})
    stale = Conversation.objects.get(pk=conversation.pk)
    write_state(
        Conversation.objects.filter(pk=conversation.pk),
        {
            "compaction_summary": "## Goal\nx",
            "compaction_through_message_id": 41,
            "fork_message_id": 7,
            "tool_services": ["blog", "sql"],
        },
    )
    # The host saves a copy it loaded before: the state written meanwhile stays.
    stale.title = "renamed"
    stale.save()
    conversation.refresh_from_db()

    assert conversation.compaction_summary == "## Goal\nx"
    assert conversation.compaction_through_message_id == 41
    assert conversation.fork_message_id == 7
    assert conversation.tool_services == ["blog", "sql"]
    assert conversation.parent_conversation_summary is None
    assert (conversation.title, conversation.metadata) == ("renamed", {"host": "theirs"})
    with pytest.raises(KeyError):
        write_state(Conversation.objects.filter(pk=conversation.pk), {"host": "x"})


@pytest.mark.django_db
def test_the_database_refuses_a_tool_message_without_a_call_id():
    from django.db import IntegrityError

    conversation = Conversation.objects.create()
    with pytest.raises(IntegrityError, match="assistant_msg_tool_has_call_id"):
        Message.objects.create(conversation=conversation, role="tool", content="x")
