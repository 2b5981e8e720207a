"""The admin's "Continue in a new conversation" runs on the
worker, as every staff run that calls the summarizer does (docs/admin.rst), and
`staff_action_task` takes its later arguments as trailing optional ones, so a task
queued with the old argument list still runs."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from assistant.history.state_writes import write_state
from assistant.models import CompactionEvent, Conversation
from assistant.services import add_message, queue_staff_action
from assistant.staff.operations import (
    FORK_CONTINUATION,
    FORK_FROM_MESSAGE,
    check_action,
    run_staff_action,
)
from assistant.tasks import staff_action_task
from tests.conftest import wait_until
from tests.fake_llm import ok
from tests.scenarios import staff_user, tool_heavy_conversation

SUMMARY = (
    "## Goal\n- fix post 42\n\n## Constraints\n- none\n\n## Progress\n- none\n\n"
    "## Key decisions\n- none\n\n## Next steps\n- none\n\n## Critical context\n- post 42"
)


def history(conversation):
    entries = LogEntry.objects.filter(object_id=str(conversation.pk)).order_by("id")
    return [(e.action_flag, e.change_message) for e in entries]


def the_fork(parent):
    found = []

    def made():
        found[:] = Conversation.objects.filter(parent_conversation=parent)
        return bool(found) and bool(history(parent))

    assert wait_until(made, timeout=120)
    return found[0]


@pytest.mark.django_db(transaction=True)
def test_the_admins_continuation_is_made_by_the_worker_with_its_summary(
    celery_worker, fake_llm, settings
):
    fake_llm.use_anthropic(settings)
    fake_llm.script_summaries(ok(SUMMARY))
    settings.ASSISTANT_COMPACTION = SUMMARIZED_BRANCH
    staff = staff_user()
    client = Client()
    client.force_login(staff)
    parent, _ = tool_heavy_conversation(title="Blog admin session")
    write_state(Conversation.objects.filter(pk=parent.pk), {"tool_services": ["blog"]})

    client.post(
        reverse("admin:assistant_conversation_changelist"),
        {"action": "continue_in_new_conversation", ACTION_CHECKBOX_NAME: [parent.pk]},
    )

    fork = the_fork(parent)
    assert fork.title == "Blog admin session (cont.)"
    assert fork.tool_services == ["blog"]
    assert fork.parent_conversation_summary.startswith(SUMMARY)
    assert fake_llm.count("anthropic.messages") == 1
    assert history(parent) == [
        (CHANGE, f"Continue in a new conversation: continued in new conversation #{fork.pk}.")
    ]
    assert history(fork) == [(ADDITION, f"Created as the continuation of #{parent.pk}.")]
    event = CompactionEvent.objects.get(conversation=fork)
    assert (event.kind, event.acting_user_id) == (CompactionEvent.Kind.FORK_SUMMARY, staff.pk)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("arguments", ["old", "new"])
def test_a_task_queued_with_the_old_argument_list_still_runs(celery_worker, arguments):
    staff = staff_user()
    parent, _ = tool_heavy_conversation(title="queued before")
    if arguments == "old":  # (action, conversation_id, user_id, instructions), as queued before
        staff_action_task.delay(FORK_CONTINUATION, parent.pk, staff.pk, "")
    else:
        staff_action_task.delay(FORK_CONTINUATION, parent.pk, staff.pk, "", None)

    fork = the_fork(parent)
    assert history(fork) == [(ADDITION, f"Created as the continuation of #{parent.pk}.")]


# A trigger the messages before the branch point do not fit under (docs/chat-loop.rst).
SUMMARIZED_BRANCH = {"CONTEXT_TOKEN_THRESHOLD": 300, "MAX_RECENT_TOKENS": 100}


@pytest.mark.django_db(transaction=True)
def test_a_branch_from_a_message_is_queued_with_its_message_id(celery_worker, settings):
    # Over the trigger: the branch carries a summary of what came before the message.
    settings.ASSISTANT_COMPACTION = SUMMARIZED_BRANCH
    staff = staff_user()
    parent, rows = tool_heavy_conversation(title="branch me")
    chosen = next(m for m in reversed(rows) if m.role == "user")

    queue_staff_action(FORK_FROM_MESSAGE, parent.pk, acting_user=staff, message_id=chosen.pk)

    fork = the_fork(parent)
    assert fork.fork_message_id == chosen.pk
    assert fork.parent_conversation_summary
    assert history(parent) == [(CHANGE, f"Branch from a message: branched into #{fork.pk}.")]
    assert history(fork) == [
        (ADDITION, f"Created as a branch of #{parent.pk} at message #{chosen.pk}.")
    ]


@pytest.mark.parametrize(
    ("action", "message_id"),
    [(FORK_FROM_MESSAGE, None), (FORK_FROM_MESSAGE, "7"), (FORK_CONTINUATION, 7)],
)
def test_a_message_id_goes_with_a_branch_only(action, message_id):
    with pytest.raises(ValidationError) as raised:
        check_action(action, 1, "", message_id=message_id)
    assert raised.value.code == "invalid_message_id"


@pytest.mark.django_db
def test_a_branch_at_another_conversations_message_changes_nothing():
    parent, _ = tool_heavy_conversation(title="one")
    _other, rows = tool_heavy_conversation(title="two")
    before = Conversation.objects.count()

    outcome = run_staff_action(FORK_FROM_MESSAGE, parent.pk, None, "", rows[0].pk)

    assert not outcome.changed
    assert "is not one of this conversation's user messages" in outcome.message
    assert Conversation.objects.count() == before


@pytest.mark.django_db(transaction=True)
def test_the_admins_branch_from_a_message_is_made_by_the_worker(celery_worker, fake_llm, settings):
    """The branch page's confirming POST, through the admin: queued (the request makes
    no fork), then the worker makes it, with its summary, history and the message to
    edit and resend on the fork's page."""
    fake_llm.use_anthropic(settings)
    fake_llm.script_summaries(ok(SUMMARY))
    settings.ASSISTANT_COMPACTION = SUMMARIZED_BRANCH
    staff = staff_user()
    client = Client()
    client.force_login(staff)
    parent, _ = tool_heavy_conversation(title="Blog admin session")
    long_text = "Rewrite the intro of post 42: " + "make it shorter and clearer. " * 40
    chosen = add_message(parent, "user", long_text)
    add_message(parent, "assistant", "Done.")

    response = client.post(
        reverse("admin:assistant_conversation_changelist"),
        {
            "action": "branch_from_message",
            ACTION_CHECKBOX_NAME: [parent.pk],
            "post": "yes",
            "message_id": str(chosen.pk),
        },
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("admin:assistant_conversation_change", args=[parent.pk])
    fork = the_fork(parent)
    assert fork.fork_message_id == chosen.pk
    assert fork.parent_conversation_summary.startswith(SUMMARY)
    assert fake_llm.count("anthropic.messages") == 1
    assert history(parent) == [(CHANGE, f"Branch from a message: branched into #{fork.pk}.")]
    assert history(fork) == [
        (ADDITION, f"Created as a branch of #{parent.pk} at message #{chosen.pk}.")
    ]
    page = client.get(reverse("admin:assistant_conversation_change", args=[fork.pk]))
    assert f"<pre>{long_text}</pre>" in page.content.decode()
    event = CompactionEvent.objects.get(conversation=fork)
    assert (event.kind, event.acting_user_id) == (CompactionEvent.Kind.FORK_SUMMARY, staff.pk)
