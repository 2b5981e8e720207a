"""Sessions and the tree (issue 52): a chat starts a new session and resumes an
earlier one, a branch's siblings are listed and switched, and the chain and the tree
are read in a fixed number of queries whatever their size."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from assistant.models import Conversation, Message
from assistant.services import (
    Resumed,
    SessionInfo,
    TreeNode,
    add_message,
    conversation_tree,
    fork_continuation,
    fork_from_message,
    list_sessions,
    mark_deleted,
    model_request,
    new_session,
    prepare_context,
    resume_session,
    run_tool_call,
    set_active_branch,
)
from tests.builders import tool_turn
from tests.conftest import wait_until
from tests.scenarios import tool_heavy_conversation

pytestmark = pytest.mark.django_db


def _chat(title: str = "Planning the autumn newsletter") -> Conversation:
    conversation = Conversation.objects.create(title=title)
    add_message(
        conversation, "user", "The webhook secret for the autumn newsletter is marmalade-sky."
    )
    add_message(conversation, "assistant", "Noted: the webhook secret is marmalade-sky.")
    return conversation


def test_a_chat_starts_a_new_session_and_resumes_the_earlier_one():
    first = _chat()

    second = new_session(first)

    assert second.parent_conversation_id == first.pk
    assert second.parent_link == Conversation.Link.SESSION
    assert second.messages.count() == 0  # the messages stay where they were
    assert first.messages.count() == 2
    # Until the worker's summary lands, the offline one with the carried facts.
    assert "marmalade-sky" in (second.parent_conversation_summary or "")
    assert second.summary_deferred is True
    sessions = list_sessions(second)
    assert all(isinstance(info, SessionInfo) for info in sessions)
    assert [info.conversation.pk for info in sessions] == [first.pk, second.pk]
    assert sessions[0].summary and "marmalade-sky" in sessions[0].summary
    assert sessions[0].last_activity >= sessions[0].created

    resumed = resume_session(first)

    assert isinstance(resumed, Resumed)
    assert resumed.reopened is True and resumed.conversation.pk == first.pk
    tree = conversation_tree(second)
    assert tree.active and not tree.find(second).active  # the chat goes on in the first


def test_resume_past_the_trigger_opens_a_new_session_carrying_its_summary(settings):
    first = _chat()
    add_message(first, "user", "The launch checklist, item by item. " * 60)
    settings.ASSISTANT_COMPACTION = {"CONTEXT_TOKEN_THRESHOLD": 200}

    resumed = resume_session(first)

    assert resumed.reopened is False
    assert resumed.conversation.pk != first.pk
    assert resumed.conversation.parent_link == Conversation.Link.SESSION
    assert "marmalade-sky" in (resumed.conversation.parent_conversation_summary or "")


def test_clear_carries_nothing_and_sessions_do_not_count_toward_the_fork_depth(settings):
    first = _chat()
    settings.ASSISTANT_COMPACTION = {"MAX_FORK_DEPTH": 1}
    current = first
    for _ in range(5):
        current = new_session(current, carry_summary=False)
    assert current.parent_conversation_summary is None
    assert current.summary_deferred is False
    # Five session links deep, a continuation is still allowed (one fork link).
    assert fork_continuation(current, pending_user_message="next") is not None
    # search_history reaches back along the chain to the first session.
    found = run_tool_call(current, "search_history", {"query": "marmalade"})
    assert "webhook secret for the autumn newsletter" in found


def test_a_branchs_siblings_are_listed_and_switched():
    parent = _chat()
    edited = Message.objects.filter(conversation=parent, role="user").first()
    first_branch, _ = fork_from_message(parent, edited.pk)
    second_branch, _ = fork_from_message(parent, edited.pk)
    assert first_branch.parent_link == Conversation.Link.BRANCH

    tree = conversation_tree(second_branch)
    assert isinstance(tree, TreeNode) and tree.conversation.pk == parent.pk
    siblings = tree.siblings_at(edited.pk)
    assert [node.conversation.pk for node in siblings] == [
        parent.pk,
        first_branch.pk,
        second_branch.pk,
    ]
    assert all(node.departs_at == edited.pk for node in siblings[1:])
    assert [node.active for node in siblings] == [True, False, False]

    set_active_branch(second_branch)
    shown = conversation_tree(parent).siblings_at(edited.pk)
    assert [node.active for node in shown] == [True, False, True]

    set_active_branch(parent)
    shown = conversation_tree(parent).siblings_at(edited.pk)
    assert [node.active for node in shown] == [True, False, False]


def _unmarked(messages: list[dict]) -> list[dict]:
    """The messages without Anthropic's cache breakpoints (they move to the newest)."""
    return [
        {
            **message,
            "content": [
                {k: v for k, v in block.items() if k != "cache_control"}
                for block in message["content"]
            ],
        }
        for message in messages
    ]


def _user_text(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _tool_pairs_whole(messages: list[dict]) -> bool:
    """Each Anthropic tool_use is answered by a tool_result in the next message."""
    for index, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        calls = {block["id"] for block in blocks if block.get("type") == "tool_use"}
        if not calls:
            continue
        following = messages[index + 1]["content"] if index + 1 < len(messages) else []
        answered = {b["tool_use_id"] for b in following if b.get("type") == "tool_result"}
        if calls != answered:
            return False
    return True


def test_an_edit_branch_sends_the_messages_before_the_edit_verbatim_when_they_fit():
    parent = Conversation.objects.create(title="Ship the release", system_prompt="You help.")
    tool_turn(
        parent,
        "Which tickets block the 4.2 release?",
        [("search_tickets", {"label": "4.2"}, "TK-81 TK-93 open"), ("read", {"id": 81}, "flaky")],
        "TK-81 and TK-93 block it.",
        input_tokens=900,
        output_tokens=40,
    )
    add_message(parent, "user", "Close TK-93 as a duplicate.")
    add_message(parent, "assistant", "Closed TK-93.")
    before_the_edit = model_request(prepare_context(parent), "anthropic")
    edited = add_message(parent, "user", "Tag the release.")
    add_message(parent, "assistant", "Tagged v4.2.0.")

    branch, text = fork_from_message(parent, edited.pk)
    add_message(branch, "user", "Tag the release as v4.2.0-rc1 first.")
    request = model_request(prepare_context(branch), "anthropic")

    assert text == "Tag the release."
    assert branch.parent_conversation_summary is None  # no summary stands in for them
    assert request["system"] == before_the_edit["system"]
    assert _unmarked(request["messages"]) == [
        *_unmarked(before_the_edit["messages"]),
        _user_text("Tag the release as v4.2.0-rc1 first."),
    ]
    assert _tool_pairs_whole(request["messages"])
    # The parent's messages are left as they were; the copies carry none of its usage.
    assert parent.messages.count() == 9
    assert not branch.messages.filter(input_tokens__isnull=False).exists()


@pytest.mark.parametrize(
    "trigger",
    [
        pytest.param({"CONTEXT_TOKEN_THRESHOLD": 300, "MAX_RECENT_TOKENS": 100}, id="tokens"),
        pytest.param({"MAX_MESSAGES_BEFORE_SUMMARY": 8, "MIN_RECENT_MESSAGES": 2}, id="count"),
    ],
)
def test_an_edit_branch_sends_their_summary_when_they_do_not_fit(settings, trigger):
    settings.ASSISTANT_COMPACTION = trigger
    parent, rows = tool_heavy_conversation()
    edited = rows[14]  # "Check the URL ...", after a tool turn with a 3 KB result

    branch, _ = fork_from_message(parent, edited.pk)
    add_message(branch, "user", "Check https://example.org/atom.xml instead.")
    request = model_request(prepare_context(branch), "anthropic")

    summary = branch.parent_conversation_summary
    assert summary and "42" in summary
    system = "\n\n".join(block["text"] for block in request["system"])
    assert f"Summary of the conversation this one continues:\n{summary}" in system
    assert _unmarked(request["messages"]) == [
        _user_text("Check https://example.org/atom.xml instead.")
    ]


def test_the_system_prompt_counts_toward_whether_an_edit_branch_fits(settings):
    """The messages alone fit; with the system part the branch would reach the trigger."""
    settings.ASSISTANT_COMPACTION = {"CONTEXT_TOKEN_THRESHOLD": 450, "MAX_RECENT_TOKENS": 100}
    parent = Conversation.objects.create(title="Long rules", system_prompt="Rule. " * 300)
    add_message(parent, "user", "The deploy key is saffron-gate.")
    add_message(parent, "assistant", "Noted.")
    edited = add_message(parent, "user", "Deploy.")

    branch, _ = fork_from_message(parent, edited.pk)

    assert branch.messages.count() == 0
    assert "saffron-gate" in (branch.parent_conversation_summary or "")


def _session_chain(size: int) -> list[Conversation]:
    """`size` sessions linked one to the next, each with one message, in bulk."""
    root = _chat()
    rows = [root]
    made = Conversation.objects.bulk_create(
        Conversation(title="s", parent_link=Conversation.Link.SESSION) for _ in range(size - 1)
    )
    messages = Message.objects.bulk_create(
        Message(conversation=row, role="user", content=f"note {n}") for n, row in enumerate(made)
    )
    through = root.messages.order_by("-id").values_list("id", flat=True).first()
    previous = root
    for row, message in zip(made, messages, strict=True):
        row.parent_conversation = previous
        row.fork_through_message_id = through
        previous, through = row, message.pk
        rows.append(row)
    Conversation.objects.bulk_update(made, ["parent_conversation", "fork_through_message_id"])
    return rows


def test_a_deleted_conversations_tree_and_sessions_are_refused_with_a_code():
    parent = _chat()
    edited = Message.objects.filter(conversation=parent, role="user").first()
    branch, _ = fork_from_message(parent, edited.pk)
    later = new_session(branch)
    mark_deleted([branch.pk])
    branch.refresh_from_db()
    for read in (conversation_tree, list_sessions):
        with pytest.raises(ValidationError) as refused:
            read(branch)
        assert refused.value.code == "conversation_deleted"
    # Its parent's tree goes on without it; the session after it starts its own chain.
    assert [node.conversation.pk for node in conversation_tree(parent).walk()] == [parent.pk]
    assert [info.conversation.pk for info in list_sessions(later)] == [later.pk]


@pytest.mark.parametrize("size", [10, 1000])
def test_the_chain_and_the_tree_are_read_in_fixed_queries(size, django_assert_num_queries):
    chain = _session_chain(size)
    newest = chain[-1]

    # The entry point's check that the conversation exists, the chain up, its rows.
    with django_assert_num_queries(3):
        sessions = list_sessions(newest)
    assert len(sessions) == size
    with django_assert_num_queries(2):  # the chain up, the tree's rows
        tree = conversation_tree(newest)
    assert len(tree.walk()) == size
    # The entry check, the chain walk, the searches, the recall count: as many at 1,000.
    with django_assert_num_queries(5):
        found = run_tool_call(newest, "search_history", {"query": "marmalade"})
    assert "webhook secret for the autumn newsletter" in found


@pytest.mark.parametrize("size", [10, 1000])
def test_a_tree_of_many_branches_is_read_in_fixed_queries(size, django_assert_num_queries):
    parent = _chat()
    edited = Message.objects.filter(conversation=parent, role="user").first()
    Conversation.objects.bulk_create(
        Conversation(
            title="b",
            parent_conversation=parent,
            parent_link=Conversation.Link.BRANCH,
            fork_message_id=edited.pk,
        )
        for _ in range(size)
    )
    with django_assert_num_queries(2):  # the chain up, the tree's rows
        tree = conversation_tree(parent)
    assert len(tree.siblings_at(edited.pk)) == size + 1


@pytest.mark.django_db(transaction=True)
def test_the_worker_writes_the_new_sessions_summary(celery_worker):
    first = _chat()
    second = new_session(first)

    def landed():
        second.refresh_from_db()
        return second.summary_deferred is False

    assert wait_until(landed)
    assert "marmalade-sky" in (second.parent_conversation_summary or "")
