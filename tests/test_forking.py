"""Fork and branch: what a fork carries, what it refuses, and the deferred
parent summary (strategy 4)."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection

import assistant.fork.branching
from assistant.fork import branching as forking
from assistant.history.state_writes import write_state
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.services import (
    add_message,
    context_tokens,
    fork_continuation,
    fork_from_message,
    generate_parent_summary,
)
from assistant.text.tokens import estimate_tokens
from tests.conftest import wait_until
from tests.scenarios import tool_heavy_conversation

pytestmark = pytest.mark.django_db


@pytest.fixture
def summarizer_spy(monkeypatch):
    """Records what each summarize_messages call read; the real one answers."""
    calls: list[dict] = []
    real = assistant.fork.branching.summarize_messages

    def spy(messages, *, previous_summary=None):
        calls.append({"ids": [m.pk for m in messages], "previous_summary": previous_summary})
        return real(messages, previous_summary=previous_summary)

    monkeypatch.setattr(assistant.fork.branching, "summarize_messages", spy)
    return calls


@pytest.fixture
def over_the_trigger(settings):
    """A trigger the parent's messages before any branch point past its first tool
    turn do not fit under: the branch carries their summary, not the messages."""
    settings.ASSISTANT_COMPACTION = {"CONTEXT_TOKEN_THRESHOLD": 300, "MAX_RECENT_TOKENS": 100}


def test_fork_continuation_carries_owner_title_summary_tools_and_first_message(
    summarizer_spy,
):
    owner = User.objects.create_user("owner")
    parent, rows = tool_heavy_conversation(
        title="Migrating the blog from WordPress to Django, part two", user=owner
    )

    fork = fork_continuation(
        parent, pending_user_message="And the comments?", tool_services=["blog", "sql"]
    )

    fork.refresh_from_db()
    assert fork.title == "Migrating the blog from WordPress to Django, (cont.)"
    assert fork.user == owner
    assert fork.parent_conversation == parent
    assert fork.tool_services == ["blog", "sql"]
    assert fork.system_prompt == "You help."
    assert summarizer_spy == [{"ids": [m.pk for m in rows], "previous_summary": None}]
    assert fork.parent_conversation_summary
    assert "42" in fork.parent_conversation_summary
    assert list(fork.messages.values_list("role", "content")) == [("user", "And the comments?")]
    event = CompactionEvent.objects.get(conversation=fork)
    assert (event.kind, event.messages_affected, event.details) == (
        CompactionEvent.Kind.FORK_SUMMARY,
        20,
        {"parent_id": parent.pk, "deferred": False},
    )
    # The parent's context the summary stands for, then the fork's request (not "0 → 0").
    summarized = estimate_tokens("You help.") + sum(m.token_estimate for m in parent.messages.all())
    assert (event.tokens_before, event.tokens_after) == (summarized, context_tokens(fork))
    assert event.tokens_before > event.tokens_after > 0


def test_forks_do_not_copy_or_change_the_parent(summarizer_spy, over_the_trigger):
    parent, rows = tool_heavy_conversation()
    before = Conversation.objects.get(pk=parent.pk)

    fork_continuation(parent, pending_user_message="next")
    fork_from_message(parent, rows[4].pk)

    parent.refresh_from_db()
    assert (parent.metadata, held_state(parent)) == (before.metadata, held_state(before))
    assert list(parent.messages.values_list("id", flat=True)) == [m.pk for m in rows]
    assert Message.objects.count() == 21  # the parent's 20 and the one pending message


def test_the_continuation_summary_reads_only_the_messages_after_the_parents_cutoff(
    summarizer_spy,
):
    parent, rows = tool_heavy_conversation()
    write_state(
        Conversation.objects.filter(pk=parent.pk),
        {
            MetadataKeys.COMPACTION_SUMMARY: "## Goal\n- fix post 42",
            MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: rows[13].pk,
        },
    )

    fork = fork_continuation(parent)

    assert summarizer_spy == [
        {"ids": [m.pk for m in rows[14:]], "previous_summary": "## Goal\n- fix post 42"}
    ]
    assert "fix post 42" in fork.parent_conversation_summary


def test_a_fork_of_a_fork_carries_the_grandparents_summary_forward(summarizer_spy):
    parent, _ = tool_heavy_conversation()
    child = fork_continuation(parent, pending_user_message="Now the comments.")
    summarizer_spy.clear()

    fork_continuation(child)

    assert summarizer_spy == [
        {
            "ids": list(child.messages.values_list("id", flat=True)),
            "previous_summary": child.parent_conversation_summary,
        }
    ]


def test_the_fourth_fork_is_refused_and_creates_nothing():
    root = Conversation.objects.create(title="root")
    add_message(root, "user", "hello")
    first = fork_continuation(root, pending_user_message="one")
    second = fork_continuation(first, pending_user_message="two")
    third = fork_continuation(second, pending_user_message="three")
    conversations, messages = Conversation.objects.count(), Message.objects.count()

    assert fork_continuation(third, pending_user_message="four") is None
    assert fork_from_message(third, third.messages.get().pk) is None

    assert [forking.fork_depth(c) for c in (root, first, second, third)] == [0, 1, 2, 3]
    assert (Conversation.objects.count(), Message.objects.count()) == (conversations, messages)
    assert not CompactionEvent.objects.filter(conversation__parent_conversation=third).exists()


def test_fork_from_message_branches_before_the_chosen_user_message(
    summarizer_spy, over_the_trigger
):
    parent, rows = tool_heavy_conversation(title="Blog admin session")

    fork, text = fork_from_message(parent, rows[14].pk)

    fork.refresh_from_db()
    assert text == "Check the URL https://example.org/feed.xml"
    assert fork.title == "Blog admin session (fork)"
    assert fork.fork_message_id == rows[14].pk
    assert fork.parent_conversation == parent
    assert summarizer_spy == [{"ids": [m.pk for m in rows[:14]], "previous_summary": None}]
    assert fork.messages.count() == 0


def test_branching_before_the_cutoff_does_not_use_the_window_summary(
    summarizer_spy, over_the_trigger
):
    parent, rows = tool_heavy_conversation()
    write_state(
        Conversation.objects.filter(pk=parent.pk),
        {
            MetadataKeys.COMPACTION_SUMMARY: "Covers messages up to the 14th.",
            MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: rows[13].pk,
        },
    )

    fork_from_message(parent, rows[4].pk)

    assert summarizer_spy == [{"ids": [m.pk for m in rows[:4]], "previous_summary": None}]


def test_branching_at_the_first_message_needs_no_summary(summarizer_spy):
    parent, rows = tool_heavy_conversation()

    fork, text = fork_from_message(parent, rows[0].pk)

    assert text == "Fix post 42, its title is wrong."
    assert fork.parent_conversation_summary is None
    assert summarizer_spy == []
    assert not CompactionEvent.objects.filter(conversation=fork).exists()


@pytest.mark.parametrize(
    "pick",
    [
        pytest.param(lambda rows, other: other.pk, id="another conversation's user message"),
        pytest.param(lambda rows, other: rows[3].pk, id="an assistant message"),
        pytest.param(lambda rows, other: rows[2].pk, id="a tool message"),
        pytest.param(lambda rows, other: 10**12, id="a missing id"),
        pytest.param(lambda rows, other: "not-a-number", id="not an id"),
    ],
)
def test_fork_from_message_refuses_anything_but_its_own_user_message(pick, summarizer_spy):
    parent, rows = tool_heavy_conversation()
    other = Conversation.objects.create(title="someone else")
    other_message = add_message(other, "user", "their secret question")
    before = Conversation.objects.count()

    assert fork_from_message(parent, pick(rows, other_message)) is None

    assert Conversation.objects.count() == before
    assert summarizer_spy == []


def test_generate_parent_summary_is_a_no_op_when_the_fork_has_one(summarizer_spy):
    parent, _ = tool_heavy_conversation()
    fork = fork_continuation(parent)
    summarizer_spy.clear()

    assert generate_parent_summary(fork) == fork.parent_conversation_summary
    assert summarizer_spy == []
    assert CompactionEvent.objects.filter(conversation=fork).count() == 1


def test_generate_parent_summary_of_a_root_conversation_is_none(summarizer_spy):
    root, _ = tool_heavy_conversation()

    assert generate_parent_summary(root) is None
    assert summarizer_spy == []


def test_a_deferred_branch_summary_covers_what_came_before_the_message(
    summarizer_spy, django_capture_on_commit_callbacks, over_the_trigger
):
    parent, rows = tool_heavy_conversation()
    with django_capture_on_commit_callbacks() as callbacks:
        fork, _ = fork_from_message(parent, rows[14].pk, summarize=False)
    assert len(callbacks) == 1  # the task, published on commit
    assert summarizer_spy == []
    assert fork.summary_deferred is True

    summary = generate_parent_summary(fork)

    fork.refresh_from_db()
    assert summarizer_spy == [{"ids": [m.pk for m in rows[:14]], "previous_summary": None}]
    assert fork.parent_conversation_summary == summary
    assert fork.summary_deferred is False
    assert fork.fork_message_id == rows[14].pk
    event = CompactionEvent.objects.get(conversation=fork)
    assert (event.kind, event.messages_affected, event.details) == (
        CompactionEvent.Kind.FORK_SUMMARY,
        14,
        {"parent_id": parent.pk, "deferred": True},
    )
    summarized = estimate_tokens("You help.") + sum(m.token_estimate for m in rows[:14])
    assert (event.tokens_before, event.tokens_after) == (summarized, context_tokens(fork))


def test_a_deferred_continuation_ignores_messages_the_parent_gained_since(summarizer_spy):
    parent, rows = tool_heavy_conversation()
    fork = fork_continuation(parent, pending_user_message="next", summarize=False)
    add_message(parent, "user", "a message after the fork was made")

    generate_parent_summary(fork)

    assert summarizer_spy == [{"ids": [m.pk for m in rows], "previous_summary": None}]


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_writes_the_deferred_summary(celery_worker):
    parent, _ = tool_heavy_conversation()

    fork = fork_continuation(parent, pending_user_message="next", summarize=False)

    def summarized():
        fork.refresh_from_db()
        return fork.parent_conversation_summary is not None

    assert wait_until(summarized)
    assert fork.summary_deferred is False
    assert (
        CompactionEvent.objects.filter(
            conversation=fork, kind=CompactionEvent.Kind.FORK_SUMMARY
        ).count()
        == 1
    )


@pytest.mark.django_db(transaction=True)
def test_generate_parent_summary_racing_a_metadata_update_keeps_both(monkeypatch):
    """While the summarizer runs, the host writes its own metadata key (a
    read-modify-save of the whole row). The summary is written to its column
    alone, and a save leaves the state columns alone, so both survive."""
    parent, _ = tool_heavy_conversation()
    fork = fork_continuation(parent, pending_user_message="next", summarize=False)
    real = assistant.fork.branching.summarize_messages

    def concurrent_write():
        try:
            other = Conversation.objects.get(pk=fork.pk)  # its own connection
            other.metadata["pinned"] = True
            other.save()  # the whole row, as loaded before the summary was written
        finally:
            connection.close()

    def summarize_while_another_process_writes(messages, *, previous_summary=None):
        writer = threading.Thread(target=concurrent_write)
        writer.start()
        writer.join()
        return real(messages, previous_summary=previous_summary)

    monkeypatch.setattr(
        assistant.fork.branching, "summarize_messages", summarize_while_another_process_writes
    )

    summary = generate_parent_summary(fork)

    stored = Conversation.objects.get(pk=fork.pk)
    assert stored.metadata == {"pinned": True}
    assert stored.parent_conversation_summary == summary
    assert summary


def test_when_two_runs_race_the_first_stored_summary_stands(monkeypatch):
    """Run A reads no summary and calls the summarizer; meanwhile run B (a
    redelivered task) does the same and stores its summary first. A's write
    is refused and A returns B's summary: one summary, one event."""
    parent, _ = tool_heavy_conversation()
    fork = fork_continuation(parent, pending_user_message="next", summarize=False)
    redelivered = Conversation.objects.get(pk=fork.pk)
    real = assistant.fork.branching.summarize_messages
    answers = iter(["summary of run A", "summary of run B"])

    def summarize(messages, *, previous_summary=None):
        text = next(answers)
        if text == "summary of run A":
            assert generate_parent_summary(redelivered) == "summary of run B"
        outcome = real(messages, previous_summary=previous_summary)
        return type(outcome)(**{**outcome.__dict__, "text": text})

    monkeypatch.setattr(assistant.fork.branching, "summarize_messages", summarize)

    assert generate_parent_summary(fork) == "summary of run B"

    assert Conversation.objects.get(pk=fork.pk).parent_conversation_summary == "summary of run B"
    assert CompactionEvent.objects.filter(conversation=fork).count() == 1
