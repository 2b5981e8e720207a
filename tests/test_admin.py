"""The admin through Django's test client, as a logged-in staff user."""

from __future__ import annotations

import pytest
from django.contrib import messages as django_messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client
from django.urls import reverse

from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.services import add_message, fork_continuation
from tests.scenarios import staff_user, tool_heavy_conversation

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:assistant_conversation_changelist")
OUR_ACTIONS = [
    "continue_in_new_conversation",
    "branch_from_message",
    "emergency_compact_level_1",
    "emergency_compact_level_2",
    "compact_tool_results_now",
    "regenerate_window_summary",
]


def change_url(conversation: Conversation) -> str:
    return reverse("admin:assistant_conversation_change", args=[conversation.pk])


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(staff_user())
    return client


def run_action(
    client: Client, action: str, *conversations: Conversation, follow: bool = False, **extra
):
    data = {"action": action, ACTION_CHECKBOX_NAME: [c.pk for c in conversations], **extra}
    return client.post(CHANGELIST, data, follow=follow)


def flashed(response) -> list[str]:
    return [str(m) for m in django_messages.get_messages(response.wsgi_request)]


def test_the_list_shows_counts_tokens_and_parents(staff_client):
    parent, rows = tool_heavy_conversation()
    fork_continuation(parent, pending_user_message="next")

    response = staff_client.get(CHANGELIST)

    assert response.status_code == 200
    shown = {c.pk: c for c in response.context["cl"].result_list}
    assert shown[parent.pk]._message_count == 20
    expected = sum(m.token_estimate for m in rows) + len("You help.") // 4
    assert shown[parent.pk]._context_tokens == expected
    assert shown[parent.pk]._last_compaction is None
    (fork_row,) = [c for c in shown.values() if c.parent_conversation_id == parent.pk]
    assert fork_row._message_count == 1
    assert (
        fork_row._last_compaction == CompactionEvent.objects.get(conversation=fork_row).created_at
    )


def test_the_list_costs_the_same_queries_for_2_and_12_conversations(
    staff_client, django_assert_num_queries
):
    for _ in range(2):
        tool_heavy_conversation()
    staff_client.get(CHANGELIST)  # warm the session and permission caches
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        staff_client.get(CHANGELIST)
    for _ in range(10):
        tool_heavy_conversation()

    with django_assert_num_queries(len(few.captured_queries)):
        response = staff_client.get(CHANGELIST)
    assert len(response.context["cl"].result_list) == 12


def test_filters_and_search_narrow_the_list(staff_client):
    parent, _ = tool_heavy_conversation(title="Migration notes")
    fork = fork_continuation(parent, pending_user_message="next")
    other, _ = tool_heavy_conversation(title="Comment spam")
    Conversation.objects.filter(pk=other.pk).update(
        metadata={MetadataKeys.NEEDS_EMERGENCY_COMPACTION: True}
    )

    def listed(query: str) -> set[int]:
        return {c.pk for c in staff_client.get(CHANGELIST + query).context["cl"].result_list}

    assert listed("?origin=fork") == {fork.pk}
    assert listed("?origin=root") == {parent.pk, other.pk}
    assert listed("?needs_emergency=yes") == {other.pk}
    assert listed("?q=migration") == {parent.pk, fork.pk}


def test_continue_in_a_new_conversation(staff_client):
    parent, _ = tool_heavy_conversation(title="Blog admin session")
    Conversation.objects.filter(pk=parent.pk).update(metadata={"tool_services": ["blog"]})

    response = run_action(staff_client, "continue_in_new_conversation", parent)

    assert response.status_code == 302
    fork = Conversation.objects.get(parent_conversation=parent)
    assert fork.title == "Blog admin session (cont.)"
    assert fork.tool_services == ["blog"]
    assert fork.parent_conversation_summary
    assert flashed(response) == [f"Created “{fork}” (#{fork.pk})."]


def test_continue_reports_a_refused_fork(staff_client):
    root, _ = tool_heavy_conversation(title="deep")
    third = root
    for _ in range(3):
        third = fork_continuation(third)
    before = Conversation.objects.count()

    response = run_action(staff_client, "continue_in_new_conversation", third)

    assert Conversation.objects.count() == before
    assert flashed(response) == [f"Not forked (more than 3 forks deep): “{third}”."]


def test_compact_tool_results_now(staff_client, settings):
    settings.ASSISTANT_COMPACTION = {"TOOL_RESULT_CHAR_THRESHOLD": 1500}
    conversation, rows = tool_heavy_conversation()

    response = run_action(staff_client, "compact_tool_results_now", conversation)

    assert flashed(response) == ["Compacted or stubbed 1 tool result(s)."]
    compacted = Message.objects.filter(conversation=conversation).exclude(compaction="")
    assert list(compacted.values_list("id", flat=True)) == [rows[2].pk]


def test_emergency_compaction_levels(staff_client, settings):
    settings.ASSISTANT_COMPACTION = {"MIN_RECENT_MESSAGES": 2}
    first, _ = tool_heavy_conversation()
    second, _ = tool_heavy_conversation()
    tiny = Conversation.objects.create(title="tiny")
    add_message(tiny, "user", "hi")
    add_message(tiny, "assistant", "hello")

    def shown_after(action: str, conversation: Conversation) -> list[str]:
        response = run_action(staff_client, action, conversation, follow=True)
        return [str(m) for m in response.context["messages"]]

    assert shown_after("emergency_compact_level_1", first) == [
        "Emergency compaction level 1: the context shrank for 1 of 1 conversation(s)."
    ]
    assert shown_after("emergency_compact_level_2", second) == [
        "Emergency compaction level 2: the context shrank for 1 of 1 conversation(s)."
    ]
    assert shown_after("emergency_compact_level_2", tiny) == [
        "Emergency compaction level 2: the context shrank for 0 of 1 conversation(s)."
    ]
    events = CompactionEvent.objects.filter(kind__startswith="emergency")
    assert sorted(events.values_list("conversation_id", "kind")) == [
        (first.pk, CompactionEvent.Kind.EMERGENCY_1),
        (second.pk, CompactionEvent.Kind.EMERGENCY_2),
    ]


def test_regenerate_window_summary(staff_client, settings):
    settings.ASSISTANT_COMPACTION = {"MIN_RECENT_MESSAGES": 2}
    conversation, rows = tool_heavy_conversation()

    response = run_action(staff_client, "regenerate_window_summary", conversation)

    conversation.refresh_from_db()
    assert flashed(response) == ["Regenerated the window summary of 1 of 1 conversation(s)."]
    assert conversation.compaction_summary
    # 40% of 20 messages stay verbatim: the split falls before message 12, a user turn.
    assert conversation.compaction_through_message_id == rows[11].pk


def test_the_branch_page_lists_the_user_messages(staff_client):
    conversation, rows = tool_heavy_conversation()

    response = run_action(staff_client, "branch_from_message", conversation)

    assert response.status_code == 200
    assert response.templates[0].name == "admin/assistant/conversation/branch_from_message.html"
    listed = [m.pk for m in response.context["user_messages"]]
    assert listed == [m.pk for m in rows if m.role == "user"]
    html = response.content.decode()
    for message in rows:
        radio = f'name="message_id" id="message-{message.pk}" value="{message.pk}"'
        assert (radio in html) is (message.role == "user")
    assert 'name="post" value="yes"' in html
    assert Conversation.objects.count() == 1


def test_the_branch_page_forks_at_the_chosen_message(staff_client):
    conversation, rows = tool_heavy_conversation(title="Blog admin session")

    response = run_action(
        staff_client, "branch_from_message", conversation, post="yes", message_id=rows[14].pk
    )

    fork = Conversation.objects.get(parent_conversation=conversation)
    assert response.status_code == 302
    assert response["Location"] == change_url(fork)
    assert fork.title == "Blog admin session (fork)"
    assert fork.fork_message_id == rows[14].pk
    assert flashed(response) == [
        f"Branched “{conversation}” into “{fork}” (#{fork.pk}). "
        "Message to edit and resend: Check the URL https://example.org/feed.xml"
    ]


def test_the_branch_page_refuses_an_assistant_message(staff_client):
    conversation, rows = tool_heavy_conversation()

    response = run_action(
        staff_client, "branch_from_message", conversation, post="yes", message_id=rows[3].pk
    )

    assert response.status_code == 200  # the page again, with the error
    assert Conversation.objects.count() == 1
    assert flashed(response) == [
        "Could not branch: choose one of this conversation's user messages "
        "(and forks stop at 3 levels)."
    ]


@pytest.mark.parametrize(
    "bad_id",
    ["", "abc", "-1", "99999999999999999999", "7 OR 1=1", "٣", "\x00", "other-conversation"],
)
def test_the_branch_page_refuses_bad_message_ids_and_changes_nothing(staff_client, bad_id):
    conversation, _ = tool_heavy_conversation()
    _, other_rows = tool_heavy_conversation()
    if bad_id == "other-conversation":
        bad_id = str(other_rows[0].pk)  # a user message, but of another conversation
    before = list(Message.objects.order_by("id").values())

    response = run_action(
        staff_client, "branch_from_message", conversation, post="yes", message_id=bad_id
    )

    assert response.status_code == 200  # the page again, with the error
    assert Conversation.objects.count() == 2
    assert list(Message.objects.order_by("id").values()) == before
    assert flashed(response)[0].startswith("Could not branch")


def test_branching_needs_exactly_one_conversation(staff_client):
    first, _ = tool_heavy_conversation()
    second, _ = tool_heavy_conversation()

    response = run_action(staff_client, "branch_from_message", first, second)

    assert response.status_code == 302
    assert flashed(response) == ["Select exactly one conversation to branch."]
    assert Conversation.objects.count() == 2


def test_the_change_page_shows_the_context_inspector(staff_client, settings):
    settings.ASSISTANT_COMPACTION = {"MIN_RECENT_MESSAGES": 2}
    conversation, rows = tool_heavy_conversation()
    run_action(staff_client, "regenerate_window_summary", conversation)

    response = staff_client.get(change_url(conversation))

    assert response.status_code == 200
    inspector = response.context["inspector"]
    assert [m["id"] for m in inspector["messages"]] == [m.pk for m in rows[12:]]
    assert (
        inspector["window_summary"]
        == Conversation.objects.get(pk=conversation.pk).compaction_summary
    )
    assert [s["key"] for s in inspector["segments"]] == ["system", "summaries", "messages", "tools"]
    assert sum(s["tokens"] for s in inspector["segments"]) == inspector["total"]
    assert [e.kind for e in inspector["events"]] == [CompactionEvent.Kind.WINDOW_SUMMARY]
    html = response.content.decode()
    assert 'id="context-inspector"' in html
    assert 'class="token-bar"' in html
    assert 'id="branch-from-message"' in html
    # The inline shows the model-facing text and whether each message is compacted.
    inline_ids = [form.instance.pk for form in response.context["inline_admin_formsets"][0].formset]
    assert inline_ids == [m.pk for m in rows]


def test_message_and_event_admins_are_read_only(staff_client):
    _conversation, rows = tool_heavy_conversation()

    listing = staff_client.get(reverse("admin:assistant_message_changelist"))
    page = staff_client.get(reverse("admin:assistant_message_change", args=[rows[2].pk]))
    post = staff_client.post(
        reverse("admin:assistant_message_change", args=[rows[2].pk]), {"content": "rewritten"}
    )

    assert (listing.status_code, page.status_code, post.status_code) == (200, 200, 403)
    assert Message.objects.get(pk=rows[2].pk).content == rows[2].content


def test_a_staff_user_without_the_permissions_sees_no_actions_and_gets_403():
    conversation, rows = tool_heavy_conversation()
    client = Client()
    client.force_login(staff_user("viewer", fork=False, compact=False))

    response = client.get(CHANGELIST)
    assert response.status_code == 200
    assert response.context["action_form"] is None  # no action it may run
    assert 'id="branch-from-message"' not in client.get(change_url(conversation)).content.decode()

    for action in OUR_ACTIONS:
        assert run_action(client, action, conversation).status_code == 403
    posted = run_action(
        client, "branch_from_message", conversation, post="yes", message_id=rows[0].pk
    )
    assert posted.status_code == 403
    assert Conversation.objects.count() == 1
    assert not CompactionEvent.objects.exists()
    assert not Message.objects.exclude(compaction="").exists()


def test_fork_and_compact_permissions_are_separate():
    conversation, _ = tool_heavy_conversation()
    client = Client()
    client.force_login(staff_user("forker", fork=True, compact=False))

    offered = [
        name for name, _ in client.get(CHANGELIST).context["action_form"].fields["action"].choices
    ]

    assert [a for a in OUR_ACTIONS if a in offered] == [
        "continue_in_new_conversation",
        "branch_from_message",
    ]
    assert run_action(client, "emergency_compact_level_1", conversation).status_code == 403


def test_csrf_is_enforced_on_actions():
    conversation, _ = tool_heavy_conversation()
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user())

    refused = run_action(client, "continue_in_new_conversation", conversation)
    assert refused.status_code == 403
    assert Conversation.objects.count() == 1

    client.get(CHANGELIST)  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    accepted = run_action(
        client, "continue_in_new_conversation", conversation, csrfmiddlewaretoken=token
    )
    assert accepted.status_code == 302
    assert Conversation.objects.count() == 2
