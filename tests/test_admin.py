"""The admin through Django's test client, as logged-in staff users:
permissions, history entries, refused actions, and what each page shows."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib import messages as django_messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from assistant.admin.inspector import WireJSONEncoder, context_inspector
from assistant.history.events import acting_as, acting_user_id
from assistant.history.figures import share
from assistant.history.state_writes import write_state
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.providers.catalog import wire_of
from assistant.services import (
    add_message,
    compact_tool_results,
    fork_continuation,
    fork_from_message,
    new_session,
    run_staff_action,
    set_active_branch,
)
from assistant.tasks import staff_action_task
from assistant.text.tokens import estimate_tokens
from assistant.window import load_window
from assistant.window.limits import request_shape
from tests.builders import html, tool_turn
from tests.conftest import wait_until
from tests.media import b64, image_block, pdf, pdf_block, png
from tests.scenarios import staff_user, tool_heavy_conversation

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:assistant_conversation_changelist")
OUR_ACTIONS = [
    "continue_in_new_conversation",
    "branch_from_message",
    "compact_tool_results_now",
    "emergency_compact_level_1",
    "emergency_compact_level_2",
    "regenerate_window_summary",
    "restore_compacted_originals",
    "summarize_before_message",
    "summarize_after_message",
    "undo_last_compaction",
    "delete_selected",
    "restore_deleted_conversations",
]


def context_cell(
    level: str,
    style: str,
    tokens: str,
    shares: str,
    trigger: int = 50_000,
    model: str = "claude-sonnet-4-6",
    window: int = 200_000,
) -> str:
    """The context column's cell: the tokens over their shares of the trigger and the
    window of the conversation's model, which its title names."""
    title = (
        f"shares of the trigger ({trigger:,} tokens) and of {model}'s window ({window:,} tokens)"
    )
    return (
        f'<span class="context-{level}" style="{style}" title="{title}">'
        f'<span class="two-lines">{tokens}</span><span class="two-lines">{shares}</span></span>'
    )


# Every action that works on a conversation's content (all but the restore from deleted).
CONTENT_ACTIONS = OUR_ACTIONS[:-2]


def change_url(conversation: Conversation) -> str:
    return reverse("admin:assistant_conversation_change", args=[conversation.pk])


def with_delete(user: User) -> User:
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="assistant", codename="delete_conversation")
    )
    return User.objects.get(pk=user.pk)  # drop the permission cache


@pytest.fixture
def staff() -> User:
    return with_delete(staff_user())


@pytest.fixture
def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def run_action(
    client: Client, action: str, *conversations: Conversation, follow: bool = False, **extra
):
    data = {"action": action, ACTION_CHECKBOX_NAME: [c.pk for c in conversations], **extra}
    return client.post(CHANGELIST, data, follow=follow)


def flashed(response) -> list[str]:
    return [str(m) for m in django_messages.get_messages(response.wsgi_request)]


def history(conversation: Conversation) -> list[tuple[int, str]]:
    entries = LogEntry.objects.filter(object_id=str(conversation.pk)).order_by("id")
    return [(e.action_flag, e.change_message) for e in entries]


# --- the list ---------------------------------------------------------------


def test_the_list_shows_ids_counts_context_share_and_fork_depth(staff_client):
    parent, rows = tool_heavy_conversation()
    fork = fork_continuation(parent, pending_user_message="next")
    grandchild = fork_continuation(fork)

    response = staff_client.get(CHANGELIST)

    assert response.status_code == 200
    shown = {c.pk: c for c in response.context["cl"].result_list}
    assert shown[parent.pk]._message_count == 20
    expected = sum(m.token_estimate for m in rows) + estimate_tokens("You help.")
    assert shown[parent.pk].context_tokens == expected
    assert [shown[c.pk]._fork_depth for c in (parent, fork, grandchild)] == [0, 1, 2]
    assert shown[parent.pk]._last_compaction is None
    html_text = response.content.decode()
    shares = f"{100 * expected / 50_000:.1f}% · {100 * expected / 200_000:.1f}%"
    assert context_cell("ok", "color:inherit;", f"{expected:,}", shares) in html_text
    assert f'<td class="field-parent_shown"><a href="{change_url(parent)}">#{parent.pk}</a>' in (
        html_text
    )
    assert f'<th class="field-id"><a href="{change_url(parent)}">{parent.pk}</a></th>' in html_text


def test_the_context_column_is_coloured_past_the_watermark_and_the_trigger(staff_client, settings):
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 1000,
        "MAX_RECENT_TOKENS": 500,
    }
    small = Conversation.objects.create(title="small")
    add_message(small, "user", "x" * 400)  # 100 tokens: 10% of the trigger
    near = Conversation.objects.create(title="near")
    add_message(near, "user", "x" * 3400)  # 850 tokens: past the 80% watermark
    past = Conversation.objects.create(title="past")
    add_message(past, "user", "x" * 4400)  # 1,100 tokens: past the trigger

    page = staff_client.get(CHANGELIST + "?o=8").content.decode()

    assert context_cell("ok", "color:inherit;", "100", "10.0% · 0.1%", 1000) in page
    near_cell = context_cell("near", "color:#b45309;font-weight:bold", "850", "85.0% · 0.4%", 1000)
    assert near_cell in page
    past_cell = context_cell(
        "past-trigger", "color:#dc2626;font-weight:bold", "1,100", "110.0% · 0.6%", 1000
    )
    assert past_cell in page
    ordered = [c.pk for c in staff_client.get(CHANGELIST + "?o=8").context["cl"].result_list]
    assert ordered == [small.pk, near.pk, past.pk]  # sortable, ascending


def test_the_share_of_the_window_is_of_each_conversations_own_model(staff_client):
    """Each row is divided by its own model's window: divided by 200,000, gpt-4.1's
    and gemini-2.5-flash's conversations read 3% where their own pages said 0.5% of
    1,047,576."""
    gpt, gemini, fresh = (Conversation.objects.create(title=t) for t in ("gpt", "gemini", "new"))
    for conversation, provider, model in (
        (gpt, "openai", "gpt-4.1"),
        (gemini, "gemini", "gemini-2.5-flash"),
    ):
        add_message(conversation, "user", "x" * 24_000)  # 6,000 tokens
        add_message(conversation, "assistant", "ok", provider=provider, model=model)
    add_message(fresh, "user", "x" * 24_000)

    page = staff_client.get(CHANGELIST).content.decode()

    shown = {
        model: context_inspector(conversation)["share_of_window"]
        for conversation, model in ((gpt, "gpt-4.1"), (gemini, "gemini-2.5-flash"))
    }
    assert shown == {"gpt-4.1": "0.6%", "gemini-2.5-flash": "0.6%"}
    for model, window in (("gpt-4.1", 1_047_576), ("gemini-2.5-flash", 1_048_576)):
        cell = context_cell(
            "ok", "color:inherit;", "6,001", "12.0% · 0.6%", model=model, window=window
        )
        assert cell in page
    assert context_cell("ok", "color:inherit;", "6,000", "12.0% · 3.0%") in page


def test_the_context_filter_uses_the_figures_not_a_flag(staff_client, settings):
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 2000,
        "MAX_RECENT_TOKENS": 1000,
    }
    quiet, _ = tool_heavy_conversation(title="quiet")
    write_state(
        Conversation.objects.filter(pk=quiet.pk),
        {MetadataKeys.NEEDS_EMERGENCY_COMPACTION: True},  # a stale flag: ignored
    )
    overflowed = Conversation.objects.create(title="overflowed")
    add_message(overflowed, "user", "Summarize the logs.")
    # The provider reported a prompt of 250,000 tokens for this answer.
    add_message(overflowed, "assistant", "Here.", input_tokens=250_000)
    near = Conversation.objects.create(title="near")
    add_message(near, "user", "x" * 7000)  # 1,750 tokens: past the 80% watermark

    def listed(query: str) -> set[int]:
        return {c.pk for c in staff_client.get(CHANGELIST + query).context["cl"].result_list}

    assert listed("?context=over") == {overflowed.pk}
    assert listed("?context=past") == {overflowed.pk}
    assert listed("?context=near") == {overflowed.pk, near.pk}
    row = [
        c for c in staff_client.get(CHANGELIST).context["cl"].result_list if c.pk == overflowed.pk
    ]
    assert row[0].context_tokens == 250_000 + 2  # the count, plus the answer's estimate


def test_the_list_costs_the_same_queries_for_2_and_12_conversations(
    staff_client, django_assert_num_queries
):
    for _ in range(2):
        tool_heavy_conversation()
    staff_client.get(CHANGELIST)  # warm the session and permission caches
    with CaptureQueriesContext(connection) as few:
        staff_client.get(CHANGELIST)
    queries = len(few.captured_queries)  # read now: a request clears the log
    for _ in range(10):
        parent, _ = tool_heavy_conversation()
        fork_continuation(parent)
    # The post-exchange task stores each conversation's cost figures; here the
    # first read of the page computes and stores those it lacks.
    staff_client.get(CHANGELIST)

    with django_assert_num_queries(queries):
        response = staff_client.get(CHANGELIST)
    assert len(response.context["cl"].result_list) == 22


def test_the_list_counts_messages_from_the_stored_figures_after_adds_and_deletes(staff_client):
    conversation, _ = tool_heavy_conversation()
    other, _ = tool_heavy_conversation()

    def shown() -> dict[int, int]:
        rows = staff_client.get(CHANGELIST).context["cl"].result_list
        return {row.pk: row._message_count for row in rows}

    def counts_rows_in(sql: str) -> bool:
        return "COUNT(" in sql and '"assistant_message"' in sql

    def counts_rows(queries: CaptureQueriesContext) -> bool:
        return any(counts_rows_in(q["sql"]) for q in queries.captured_queries)

    assert shown()[conversation.pk] == 20  # the first read counts and stores
    assert Conversation.objects.get(pk=conversation.pk).cost_figures["messages"] == 20
    with CaptureQueriesContext(connection) as stored:
        assert shown() == {conversation.pk: 20, other.pk: 20}
    assert not counts_rows(stored)  # the stored figures: no row counted

    for text in ("one", "two", "three"):
        add_message(conversation, "user", text)
    newest = add_message(conversation, "user", "undone")
    with CaptureQueriesContext(connection) as added:
        assert shown()[conversation.pk] == 24
    # Only the messages stored since the last count are counted.
    counting = [q["sql"] for q in added.captured_queries if counts_rows_in(q["sql"])]
    assert len(counting) == 1 and '"assistant_message"."id" >= ' in counting[0]
    # The newest counted message's insert undone (add_message into a conversation
    # deleted meanwhile), and another stored since: neither counted twice.
    Message.objects.filter(pk=newest.pk).delete()
    add_message(conversation, "user", "four")
    assert shown()[conversation.pk] == 24
    Message.objects.filter(conversation=conversation).latest("id").delete()
    assert shown()[conversation.pk] == 23 == conversation.messages.count()
    # Sorted by the stored count.
    for order, first in (("7", other), ("-7", conversation)):
        rows = staff_client.get(f"{CHANGELIST}?o={order}").context["cl"].result_list
        assert rows[0].pk == first.pk


def test_filters_and_search_narrow_the_list(staff_client):
    parent, _ = tool_heavy_conversation(title="Migration notes")
    fork = fork_continuation(parent, pending_user_message="next")
    other, _ = tool_heavy_conversation(title="Comment spam")
    Conversation.objects.filter(pk=other.pk).update(deleted_at=timezone.now())

    def listed(query: str) -> set[int]:
        return {c.pk for c in staff_client.get(CHANGELIST + query).context["cl"].result_list}

    assert listed("?origin=fork") == {fork.pk}
    assert listed("?origin=root") == {parent.pk, other.pk}
    assert listed("?status=deleted") == {other.pk}
    assert listed("?status=live") == {parent.pk, fork.pk}
    assert listed("?q=migration") == {parent.pk, fork.pk}


# --- soft delete --------------------------------------------------------------


def test_delete_selected_asks_then_marks_deleted_and_keeps_everything(staff_client):
    parent, _rows = tool_heavy_conversation(title="Old session")
    fork = fork_continuation(parent)

    asked = run_action(staff_client, "delete_selected", parent)
    assert asked.status_code == 200
    assert asked.templates[0].name == "admin/assistant/conversation/confirm_action.html"
    assert "the purge removes them after 30 days" in asked.context["intro"]
    assert "Their 1 live fork(s) keep working" in asked.context["intro"]
    assert Conversation.objects.get(pk=parent.pk).deleted_at is None

    done = run_action(staff_client, "delete_selected", parent, post="yes")

    parent.refresh_from_db()
    assert parent.deleted_at is not None
    assert Message.objects.filter(conversation=parent).count() == 20
    assert Conversation.objects.get(pk=fork.pk).parent_conversation_id == parent.pk
    assert flashed(done) == [
        f"Marked 1 conversation(s) deleted: “Old session” (#{parent.pk}). The purge removes "
        "them after 30 days; until then “Restore deleted conversations” brings them back."
    ]
    assert history(parent) == [(CHANGE, "Marked deleted (the purge removes them after 30 days).")]


def test_the_delete_button_on_the_page_marks_deleted(staff_client):
    conversation, _ = tool_heavy_conversation()
    url = reverse("admin:assistant_conversation_delete", args=[conversation.pk])

    page = staff_client.get(url)
    assert "will be marked deleted. Nothing is removed now" in page.content.decode()
    staff_client.post(url, {"post": "yes"})

    conversation.refresh_from_db()
    assert conversation.deleted_at is not None
    assert Message.objects.filter(conversation=conversation).count() == 20
    assert history(conversation) == [
        (CHANGE, "Marked deleted (the purge removes them after 30 days).")
    ]


def test_a_deleted_conversation_is_shown_as_such(staff_client):
    conversation, _ = tool_heavy_conversation()
    deleted_at = timezone.now() - timedelta(days=2)
    Conversation.objects.filter(pk=conversation.pk).update(deleted_at=deleted_at)

    listing = staff_client.get(CHANGELIST).content.decode()
    page = staff_client.get(change_url(conversation)).content.decode()

    assert (
        f'<span style="color:#dc2626;white-space:nowrap">deleted {deleted_at:%Y-%m-%d}</span>'
        in listing
    )
    purge = deleted_at + timedelta(days=30)
    assert (
        f'<p class="errornote" id="deleted-banner">This conversation was deleted on '
        f"{deleted_at:%Y-%m-%d %H:%M}.\n  The purge removes it after {purge:%Y-%m-%d %H:%M}"
    ) in page
    assert 'id="restore-deleted"' in page
    assert 'id="branch-from-message"' not in page
    assert 'name="_save"' not in page  # read-only until restored


@pytest.mark.parametrize("action", CONTENT_ACTIONS)
def test_every_action_refuses_a_deleted_conversation(staff_client, action, settings):
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "TOOL_RESULT_CHAR_THRESHOLD": 1500,
        "MIN_RECENT_MESSAGES": 2,
    }
    conversation, rows = tool_heavy_conversation(title="Gone")
    Conversation.objects.filter(pk=conversation.pk).update(deleted_at=timezone.now())
    before = list(Message.objects.order_by("id").values())
    metadata = held_state(Conversation.objects.get(pk=conversation.pk))

    response = run_action(staff_client, action, conversation, post="yes", message_id=rows[14].pk)

    assert response.status_code == 302
    assert flashed(response) == [
        f"Refused for deleted conversation(s) “Gone” (#{conversation.pk}): restore them first "
        "(“Restore deleted conversations”)."
    ]
    assert Conversation.objects.count() == 1
    assert held_state(Conversation.objects.get(pk=conversation.pk)) == metadata
    assert list(Message.objects.order_by("id").values()) == before
    assert not CompactionEvent.objects.exists()


def test_restore_from_deleted_within_the_retention_only(staff_client):
    recent, _ = tool_heavy_conversation(title="recent")
    old, _ = tool_heavy_conversation(title="old")
    live, _ = tool_heavy_conversation(title="live")
    Conversation.objects.filter(pk=recent.pk).update(deleted_at=timezone.now() - timedelta(days=29))
    Conversation.objects.filter(pk=old.pk).update(deleted_at=timezone.now() - timedelta(days=31))

    response = run_action(staff_client, "restore_deleted_conversations", recent, old, live)

    assert Conversation.objects.get(pk=recent.pk).deleted_at is None
    assert Conversation.objects.get(pk=old.pk).deleted_at is not None
    assert flashed(response) == [
        f"Restored “recent” (#{recent.pk}).",
        "Not restored (deleted longer ago than the retention; the purge may remove them at any "
        f"time): “old” (#{old.pk}).",
        f"Not deleted, nothing to restore: “live” (#{live.pk}).",
    ]
    assert history(recent) == [(CHANGE, "Restored from deleted.")]
    assert history(old) == []


# --- confirmation, worker runs, results -------------------------------------------


def test_emergency_level_2_asks_first_naming_what_will_change(staff_client, settings):
    settings.ASSISTANT_COMPACTION = {"VERBATIM_AFTER_SHIFT": "recent", "MIN_RECENT_MESSAGES": 2}
    conversation, rows = tool_heavy_conversation(title="Busy")

    response = run_action(staff_client, "emergency_compact_level_2", conversation)

    assert response.templates[0].name == "admin/assistant/conversation/confirm_action.html"
    (row,) = response.context["rows"]
    # The 3 KB result: the 20-character one would not shrink (tests/test_previews.py).
    assert row["preview"].changes == [
        "1 tool result(s) compacted, whatever their size",
        f"messages #{rows[0].pk} to #{rows[17].pk} (18) go into the window summary; 2 stay "
        "verbatim (kept only if the context shrinks)",
    ]
    assert response.context["on_worker"] is True
    page = response.content.decode()
    assert 'name="post" value="yes"' in page
    assert 'id="on-worker"' in page
    assert not CompactionEvent.objects.exists()


def test_the_confirmation_says_when_nothing_would_change(staff_client):
    tiny = Conversation.objects.create(title="tiny")
    add_message(tiny, "user", "hi")
    add_message(tiny, "assistant", "hello")

    response = run_action(staff_client, "regenerate_window_summary", tiny)

    (row,) = response.context["rows"]
    assert row["preview"].changes == []
    assert row["preview"].nothing_because == (
        "the split cannot move: the 2 message(s) after it are all in the last user turn or "
        "within the messages kept verbatim"
    )
    page = response.content.decode()
    assert "Nothing would change:" in page
    # Nothing to confirm: no button, no form that would run the action.
    assert 'id="nothing-to-do"' in page
    assert '<input type="submit"' not in page
    assert 'name="post" value="yes"' not in page


def test_a_confirmation_submits_only_the_conversations_where_something_would_change(
    staff_client,
):
    tiny = Conversation.objects.create(title="tiny")
    add_message(tiny, "user", "hi")
    add_message(tiny, "assistant", "hello")
    long, _ = tool_heavy_conversation(title="long")

    response = run_action(staff_client, "regenerate_window_summary", tiny, long)

    page = response.content.decode()
    assert [row["conversation"].pk for row in response.context["actionable"]] == [long.pk]
    assert f'name="_selected_action" value="{long.pk}"' in page
    assert f'name="_selected_action" value="{tiny.pk}"' not in page
    assert 'id="confirm-only"' in page
    assert '<input type="submit"' in page


def test_confirmed_model_calling_runs_go_to_the_worker(
    staff_client, staff, django_capture_on_commit_callbacks
):
    first, _ = tool_heavy_conversation(title="first")
    second, _ = tool_heavy_conversation(title="second")

    with django_capture_on_commit_callbacks() as published:
        response = run_action(staff_client, "regenerate_window_summary", first, second, post="yes")

    assert len(published) == 2  # one staff_action_task per conversation, on commit
    assert flashed(response) == [
        f"Regenerate window summary: queued on the worker for “first” (#{first.pk}), "
        f"“second” (#{second.pk}). The result appears in each conversation's History and "
        "compaction events."
    ]
    assert Conversation.objects.get(pk=first.pk).compaction_summary is None


def test_many_rows_go_to_the_worker_even_without_a_model_call(
    staff_client, django_capture_on_commit_callbacks
):
    conversations = [tool_heavy_conversation(title=f"c{n}")[0] for n in range(6)]

    with django_capture_on_commit_callbacks() as published:
        response = run_action(staff_client, "compact_tool_results_now", *conversations)

    assert len(published) == 6
    assert flashed(response)[0].startswith("Compact tool results: queued on the worker for")
    assert not CompactionEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_worker_run_records_the_user_and_the_result(celery_worker, settings):
    settings.ASSISTANT_COMPACTION = {"VERBATIM_AFTER_SHIFT": "recent", "MIN_RECENT_MESSAGES": 2}
    staff = with_delete(staff_user("worker-staff"))
    client = Client()
    client.force_login(staff)
    conversation, rows = tool_heavy_conversation(title="Long one")
    before = conversation_tokens(conversation)

    run_action(client, "regenerate_window_summary", conversation, post="yes")

    assert wait_until(lambda: LogEntry.objects.filter(object_id=str(conversation.pk)).exists())
    event = CompactionEvent.objects.get(conversation=conversation)
    assert (event.kind, event.acting_user_id) == (CompactionEvent.Kind.WINDOW_SUMMARY, staff.pk)
    conversation.refresh_from_db()
    assert conversation.compaction_through_message_id == rows[11].pk
    (entry,) = LogEntry.objects.filter(object_id=str(conversation.pk))
    assert (entry.user_id, entry.action_flag) == (staff.pk, CHANGE)
    assert entry.change_message == (
        "Regenerate window summary: stored a new window summary, the request: "
        f"{before:,} → {conversation_tokens(conversation):,} tokens."
    )


def conversation_tokens(conversation: Conversation) -> int:
    from assistant.services import context_tokens

    return context_tokens(conversation)


def test_compact_tool_results_inline_records_user_event_and_history(staff_client, staff, settings):
    settings.ASSISTANT_COMPACTION = {"TOOL_RESULT_CHAR_THRESHOLD": 1500}
    conversation, rows = tool_heavy_conversation()
    before = conversation_tokens(conversation)

    response = run_action(staff_client, "compact_tool_results_now", conversation)

    after = conversation_tokens(conversation)
    message = f"1 tool result(s) compacted or stubbed, the request: {before:,} → {after:,} tokens"
    assert flashed(response) == [
        f"Compact tool results on “Blog admin session” (#{conversation.pk}): {message}."
    ]
    compacted = Message.objects.filter(conversation=conversation).exclude(compaction="")
    assert list(compacted.values_list("id", flat=True)) == [rows[2].pk]
    event = CompactionEvent.objects.get(conversation=conversation)
    assert event.acting_user_id == staff.pk
    assert history(conversation) == [(CHANGE, f"Compact tool results: {message}.")]
    page = Client()
    page.force_login(staff)
    history_page = page.get(
        reverse("admin:assistant_conversation_history", args=[conversation.pk])
    ).content.decode()
    assert f"Compact tool results: {message}." in history_page


def test_a_run_that_changes_nothing_says_why(staff_client):
    conversation, _ = tool_heavy_conversation()
    compact_tool_results(conversation)  # the large one is compacted already

    response = run_action(staff_client, "compact_tool_results_now", conversation)

    assert flashed(response) == [
        f"Compact tool results on “Blog admin session” (#{conversation.pk}): nothing changed: "
        "none of its 1 verbatim tool result(s) reaches 1500 characters "
        "(TOOL_RESULT_CHAR_THRESHOLD)."
    ]
    assert history(conversation)[-1][1].startswith("Compact tool results: nothing changed:")


def test_restore_originals_asks_then_restores_and_names_the_next_request(staff_client, staff):
    conversation, rows = tool_heavy_conversation()
    compact_tool_results(conversation)
    compacted = Message.objects.get(pk=rows[2].pk)
    before = conversation_tokens(conversation)
    growth = compacted.original_token_estimate - compacted.token_estimate

    asked = run_action(staff_client, "restore_compacted_originals", conversation)
    (row,) = asked.context["rows"]
    assert row["preview"].changes == [
        f"1 compacted message(s) shown verbatim again ({compacted.token_estimate} → "
        f"{compacted.original_token_estimate} tokens) and kept verbatim"
    ]
    assert row["preview"].next_request_tokens == before + growth

    done = run_action(staff_client, "restore_compacted_originals", conversation, post="yes")

    restored = Message.objects.get(pk=rows[2].pk)
    assert (restored.compaction, restored.compacted_content) == ("", None)
    assert flashed(done) == [
        f"Restore compacted originals on “Blog admin session” (#{conversation.pk}): 1 "
        f"original(s) restored; the next request is {before + growth} tokens."
    ]
    event = CompactionEvent.objects.get(kind=CompactionEvent.Kind.RESTORE)
    assert event.acting_user_id == staff.pk


# --- forks and the branch page ----------------------------------------------------


def test_continue_in_a_new_conversation_is_queued_on_the_worker(
    staff_client, staff, fake_llm, settings, django_capture_on_commit_callbacks
):
    # Its summary calls the summarizer: none is called inside the admin request.
    fake_llm.use_anthropic(settings)
    parent, _ = tool_heavy_conversation(title="Blog admin session")

    with django_capture_on_commit_callbacks() as published:
        response = run_action(staff_client, "continue_in_new_conversation", parent)

    assert response.status_code == 302
    assert len(published) == 1  # one staff_action_task, on commit
    assert flashed(response) == [
        f"Continue in a new conversation: queued on the worker for “Blog admin session” "
        f"(#{parent.pk}). The result appears in each conversation's History and compaction "
        "events."
    ]
    assert not Conversation.objects.filter(parent_conversation=parent).exists()
    assert fake_llm.requests == []


def test_continue_reports_a_refused_fork(staff_client):
    root, _ = tool_heavy_conversation(title="deep")
    third = root
    for _ in range(3):
        third = fork_continuation(third)
    before = Conversation.objects.count()

    response = run_action(staff_client, "continue_in_new_conversation", third)

    assert Conversation.objects.count() == before
    assert flashed(response) == [f"Not forked (more than 3 forks deep): “{third}”."]


def test_the_branch_page_lists_the_user_messages_newest_first(staff_client):
    conversation, rows = tool_heavy_conversation()

    response = run_action(staff_client, "branch_from_message", conversation)

    assert response.status_code == 200
    assert response.templates[0].name == "admin/assistant/conversation/branch_from_message.html"
    listed = [m.pk for m in response.context["user_messages"]]
    assert listed == [m.pk for m in reversed(rows) if m.role == "user"]
    page = response.content.decode()
    for message in rows:
        radio = f'name="message_id" id="message-{message.pk}" value="{message.pk}"'
        assert (radio in page) is (message.role == "user")
    assert '<span id="branch-count">8 user messages.</span>' in page
    assert Conversation.objects.count() == 1


def test_the_branch_page_searches_the_user_messages(staff_client):
    conversation = Conversation.objects.create(title="Long")
    for n in range(120):
        add_message(conversation, "user", f"Question {n} about post {n}")
        add_message(conversation, "assistant", f"Answer {n}")

    everything = run_action(staff_client, "branch_from_message", conversation)
    found = run_action(staff_client, "branch_from_message", conversation, q="post 7")

    assert len(everything.context["user_messages"]) == 50
    assert "120 user messages; the newest 50 are shown." in everything.content.decode()
    texts = [m.model_content for m in found.context["user_messages"]]
    assert texts == [
        f"Question {n} about post {n}" for n in (79, 78, 77, 76, 75, 74, 73, 72, 71, 70, 7)
    ]
    assert "11 of 120 user messages match." in found.content.decode()


def test_the_branch_page_queues_the_branch_on_the_worker_and_calls_no_summarizer(
    staff_client, staff, django_capture_on_commit_callbacks, monkeypatch
):
    """Issue 50, point 7: the confirming POST forked inline, its summary made by the
    summarizer inside the admin request; it is queued like every run that calls it
    (the worker makes it: tests/test_staff_fork.py)."""
    import assistant.fork.branching

    def no_summarizer(*args, **kwargs):
        raise AssertionError("the summarizer was called inside the admin request")

    monkeypatch.setattr(assistant.fork.branching, "summarize_messages", no_summarizer)
    conversation, _rows = tool_heavy_conversation(title="Blog admin session")
    chosen = add_message(conversation, "user", "Rewrite the intro of post 42.")
    add_message(conversation, "assistant", "Done.")

    with django_capture_on_commit_callbacks() as published:
        response = run_action(
            staff_client, "branch_from_message", conversation, post="yes", message_id=chosen.pk
        )

    assert response.status_code == 302
    assert response["Location"] == change_url(conversation)
    assert Conversation.objects.count() == 1  # nothing forked here
    assert flashed(response) == [
        f"Branch from a message: queued on the worker for “{conversation}” (#{conversation.pk}) "
        f"at message #{chosen.pk}. The branch appears in this conversation's History; its page "
        "shows the message to edit and resend in full."
    ]
    assert published_tasks(monkeypatch, published) == [
        (staff_action_task.name, ("fork_from_message", conversation.pk, staff.pk, "", chosen.pk))
    ]


def published_tasks(monkeypatch, callbacks) -> list[tuple[str, tuple]]:
    """(task name, arguments) of what these on-commit callbacks publish."""
    import assistant.history.queue

    sent: list[tuple[str, tuple]] = []
    monkeypatch.setattr(
        assistant.history.queue, "_publish", lambda name, args: sent.append((name, args))
    )
    for callback in callbacks:
        callback()
    return sent


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


# --- the conversation page ----------------------------------------------------------


def test_the_change_page_shows_the_context_inspector_first(staff_client, settings):
    settings.ASSISTANT_COMPACTION = {"VERBATIM_AFTER_SHIFT": "recent", "MIN_RECENT_MESSAGES": 2}
    conversation, rows = tool_heavy_conversation()
    from assistant.services import regenerate_window_summary

    regenerate_window_summary(conversation)

    response = staff_client.get(change_url(conversation))

    assert response.status_code == 200
    inspector = response.context["inspector"]
    assert [m["id"] for m in inspector["messages"]] == [m.pk for m in rows[12:]]
    assert (
        inspector["window_summary"]
        == Conversation.objects.get(pk=conversation.pk).compaction_summary
    )
    assert [s["key"] for s in inspector["segments"]] == ["system", "summaries", "messages", "tools"]
    ((event, figures),) = inspector["events"]
    assert event.kind == CompactionEvent.Kind.WINDOW_SUMMARY
    # The request before and after, named (a shift read the window's part of it).
    assert figures == f"the request: {event.tokens_before:,} → {event.tokens_after:,} tokens"
    page = response.content.decode()
    assert f'<td class="event-tokens">{figures}</td>' in page
    assert page.index('id="context-inspector"') < page.index('id="id_title"')
    assert 'id="branch-from-message"' in page
    messages_link = (
        f"{reverse('admin:assistant_message_changelist')}?conversation__exact={conversation.pk}"
    )
    assert f'<a href="{messages_link}" id="all-messages">All 20 messages, newest first</a>' in page
    assert response.context["inline_admin_formsets"] == []


def test_a_long_conversation_page_stays_light(staff_client):
    conversation = Conversation.objects.create(title="Long", system_prompt="You help.")
    for n in range(130):
        tool_turn(conversation, f"Question {n}", [("read_post", {"id": n}, html(3000, f"p{n}"))])
    for _ in range(25):
        CompactionEvent.objects.create(conversation=conversation, kind="dedup")

    response = staff_client.get(change_url(conversation))

    inspector = response.context["inspector"]
    assert inspector["messages_in_context"] == 520
    assert len(inspector["messages"]) == 30
    assert (len(inspector["events"]), inspector["events_total"]) == (20, 25)
    events_link = (
        f"{reverse('admin:assistant_compactionevent_changelist')}?conversation__exact="
        f"{conversation.pk}"
    )
    assert f'<a href="{events_link}" id="all-events">All 25 compaction events</a>' in (
        response.content.decode()
    )
    # 30 messages of at most 2,000 characters: far from the 2 MB the page used to be.
    assert len(response.content) < 150_000
    listed = staff_client.get(
        reverse("admin:assistant_message_changelist") + f"?conversation__exact={conversation.pk}"
    )
    ids = [m.pk for m in listed.context["cl"].result_list]
    assert len(ids) == 50
    assert ids == sorted(ids, reverse=True)
    assert ids[0] == Message.objects.filter(conversation=conversation).latest("id").pk


def test_the_change_page_and_request_body_work_while_a_tool_call_is_pending(staff_client):
    conversation, _ = tool_heavy_conversation()
    add_message(conversation, "user", "Read post 7 and 8.")
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[
            {"id": "c7", "name": "read_post", "arguments": {"id": 7}},
            {"id": "c8", "name": "read_post", "arguments": {"id": 8}},
        ],
    )
    add_message(conversation, "tool", "post 7", tool_call_id="c7")

    response = staff_client.get(change_url(conversation))

    assert response.status_code == 200
    assert [c["id"] for c in response.context["inspector"]["pending_calls"]] == ["c8"]
    page = response.content.decode()
    assert '<span class="pending">pending: c8 (read_post)</span>' in page
    assert "<code>c8</code> (read_post)" in page
    body = staff_client.get(
        reverse("admin:assistant_conversation_request", args=[conversation.pk])
    ).json()
    assert body["messages"][-1]["role"] == "user"
    assert body["messages"][-1]["content"][0]["tool_use_id"] == "c7"


def test_context_report_shows_pending_calls_instead_of_raising(capsys):
    conversation, _ = tool_heavy_conversation()
    add_message(conversation, "user", "Read post 7.")
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "c7", "name": "read_post", "arguments": {"id": 7}}],
    )

    call_command("context_report", str(conversation.pk))

    assert "Waiting for tool results: c7 (read_post)\n" in capsys.readouterr().out


def test_message_and_event_admins_are_read_only(staff_client):
    _conversation, rows = tool_heavy_conversation()

    listing = staff_client.get(reverse("admin:assistant_message_changelist"))
    page = staff_client.get(reverse("admin:assistant_message_change", args=[rows[2].pk]))
    post = staff_client.post(
        reverse("admin:assistant_message_change", args=[rows[2].pk]), {"content": "rewritten"}
    )

    assert (listing.status_code, page.status_code, post.status_code) == (200, 200, 403)
    assert Message.objects.get(pk=rows[2].pk).content == rows[2].content


def test_the_event_list_counts_offline_fallbacks_by_why(staff_client, staff):
    staff.user_permissions.add(Permission.objects.get(codename="view_compactionevent"))
    conversation = Conversation.objects.create(title="Fallbacks")
    reasons = ["late_holder", "stalled_holder", "late_holder", None]
    events = [
        CompactionEvent.objects.create(
            conversation=conversation,
            kind="window_summary",
            details={"offline_fallback": reason} if reason else {"prebuilt": True},
        ).pk
        for reason in reasons
    ]
    events_list = reverse("admin:assistant_compactionevent_changelist")

    def listed(query: str) -> set[int]:
        return {e.pk for e in staff_client.get(events_list + query).context["cl"].result_list}

    assert listed("?offline_fallback=late_holder") == {events[0], events[2]}
    assert listed("?offline_fallback=stalled_holder") == {events[1]}
    assert listed("?offline_fallback=any") == set(events[:3])
    page = staff_client.get(events_list + "?offline_fallback=stalled_holder").content.decode()
    assert "Lease taken over: the holder&#x27;s heartbeat stopped" in page


# --- permissions --------------------------------------------------------------------


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
        assert run_action(client, action, conversation, post="yes").status_code == 403
    posted = run_action(
        client, "branch_from_message", conversation, post="yes", message_id=rows[0].pk
    )
    assert posted.status_code == 403
    assert Conversation.objects.get(pk=conversation.pk).deleted_at is None
    assert Conversation.objects.count() == 1
    assert not CompactionEvent.objects.exists()
    assert not Message.objects.exclude(compaction="").exists()
    assert not LogEntry.objects.exists()


def test_fork_compact_and_delete_permissions_are_separate():
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
    assert run_action(client, "delete_selected", conversation, post="yes").status_code == 403
    assert Conversation.objects.get(pk=conversation.pk).deleted_at is None


def test_csrf_is_enforced_on_actions(staff, django_capture_on_commit_callbacks):
    conversation, _ = tool_heavy_conversation()
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)

    with django_capture_on_commit_callbacks() as published:
        refused = run_action(client, "continue_in_new_conversation", conversation)
    assert refused.status_code == 403
    assert published == []  # nothing queued

    client.get(CHANGELIST)  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    with django_capture_on_commit_callbacks() as published:
        accepted = run_action(
            client, "continue_in_new_conversation", conversation, csrfmiddlewaretoken=token
        )
    assert accepted.status_code == 302
    assert len(published) == 1  # the continuation, queued on the worker


# --- the restore_originals command ----------------------------------------------------


def test_the_restore_command_restores_and_says_what_the_next_request_is(capsys, staff):
    conversation, rows = tool_heavy_conversation()
    compact_tool_results(conversation)
    before = conversation_tokens(conversation)

    call_command("restore_originals", str(conversation.pk), "--dry-run")
    dry = capsys.readouterr().out
    assert Message.objects.get(pk=rows[2].pk).compaction != ""
    call_command("restore_originals", str(conversation.pk), "--user", staff.username)
    out = capsys.readouterr().out

    after = conversation_tokens(conversation)
    assert Message.objects.get(pk=rows[2].pk).compaction == ""
    tail = (
        f"the next request will be {after} tokens ({round(100 * after / 50_000)}% of the "
        f"50000-token trigger, {round(100 * after / 200_000)}% of claude-sonnet-4-6's "
        "200000-token window).\n"
    )
    assert dry.startswith(f"Conversation {conversation.pk}: would restore 1 original(s) (")
    assert dry.endswith(tail)
    assert out == (
        f"Conversation {conversation.pk}: restored 1 original(s); context {before} -> {after} "
        f"tokens; {tail}"
    )
    assert CompactionEvent.objects.get(kind="restore").acting_user_id == staff.pk


def test_the_restore_command_refuses_bad_input(capsys):
    conversation, _rows = tool_heavy_conversation()
    other, other_rows = tool_heavy_conversation()

    with pytest.raises(CommandError, match=rf"Not messages of conversation {conversation.pk}: "):
        call_command("restore_originals", str(conversation.pk), "--message", str(other_rows[2].pk))
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("restore_originals", str(conversation.pk), "--user", "nobody")
    Conversation.objects.filter(pk=other.pk).update(deleted_at=timezone.now())
    with pytest.raises(CommandError, match="is deleted; restore it from deleted first"):
        call_command("restore_originals", str(other.pk))
    call_command("restore_originals", str(conversation.pk))
    assert capsys.readouterr().out == (
        f"Conversation {conversation.pk}: nothing restored: none of its messages is compacted.\n"
    )


# --- staff actions and the acting user, below the admin --------------------------------


def test_an_emergency_run_says_what_shrank_or_why_nothing_did(staff, settings):
    settings.ASSISTANT_COMPACTION = {"VERBATIM_AFTER_SHIFT": "recent", "MIN_RECENT_MESSAGES": 2}
    busy, _ = tool_heavy_conversation(title="busy")
    Conversation.objects.filter(pk=busy.pk).update(system_prompt="You help. " * 600)
    tiny = Conversation.objects.create(title="tiny")
    add_message(tiny, "user", "hi")
    add_message(tiny, "assistant", "hello")

    shrank = run_staff_action("emergency_2", busy.pk, staff.pk)
    unchanged = run_staff_action("emergency_2", tiny.pk, staff.pk)

    assert shrank.changed is True
    # History says its event's figures, as the event list does (it once said "shrank
    # from 22137 to 1187 tokens" beside an event of 23,942 → 1,358).
    event = CompactionEvent.objects.get(conversation=busy)
    assert event.tokens_before >= 1_000
    assert shrank.message.startswith(
        f"the request shrank, {event.tokens_before:,} → {event.tokens_after:,} tokens ("
    )
    assert (unchanged.changed, unchanged.message) == (
        False,
        "nothing changed: no tool result left to compact, and the split cannot move: the 2 "
        "message(s) after it are all in the last user turn or within the messages kept verbatim",
    )
    assert history(tiny) == [(CHANGE, f"Emergency compaction level 2: {unchanged.message}.")]


def test_automatic_work_names_nobody_and_staff_calls_name_the_user(staff):
    first, _ = tool_heavy_conversation()
    second, _ = tool_heavy_conversation()

    compact_tool_results(first)
    compact_tool_results(second, acting_user=staff)
    with acting_as(staff.pk):
        fork = fork_continuation(first)

    events = CompactionEvent.objects.order_by("id")
    assert [(e.conversation_id, e.acting_user_id) for e in events] == [
        (first.pk, None),
        (second.pk, staff.pk),
        (fork.pk, staff.pk),
    ]
    assert acting_user_id() is None  # the block ended: nobody again


def test_the_largest_accepted_usage_counts_leave_every_admin_page_working(staff_client):
    largest = 2**31 - 1
    conversation = Conversation.objects.create(title="huge usage", system_prompt="You help.")
    add_message(conversation, "user", "Summarize the logs.")
    add_message(
        conversation,
        "assistant",
        "ok",
        input_tokens=largest,
        output_tokens=largest,
        cache_read_tokens=largest,
        cache_write_tokens=largest,
    )
    filters = [
        "",
        "?status=live",
        "?status=deleted",
        "?context=near",
        "?context=past",
        "?context=over",
        "?origin=root",
        "?origin=fork",
        "?summarized=yes",
        "?summarized=no",
        "?o=8",
        "?o=-8",
    ]

    pages = [staff_client.get(CHANGELIST + query) for query in filters]

    assert [page.status_code for page in pages] == [200] * len(filters)
    row = next(c for c in pages[0].context["cl"].result_list if c.pk == conversation.pk)
    assert row.context_tokens == 3 * largest + 1  # the count, plus the answer's estimate
    assert staff_client.get(change_url(conversation)).status_code == 200
    assert staff_client.get(reverse("admin:assistant_message_changelist")).status_code == 200
    Conversation.objects.filter(pk=conversation.pk).update(deleted_at=timezone.now())
    assert staff_client.get(CHANGELIST + "?status=deleted").status_code == 200
    assert staff_client.get(change_url(conversation)).status_code == 200


# --- bad input from outside ---------------------------------------------------------


@pytest.mark.parametrize("shape", ["gemini", "anthropic"])
def test_the_request_body_download_carries_images_and_documents_as_base64(staff_client, shape):
    conversation = Conversation.objects.create(title="media")
    picture = png(40, 30)
    add_message(
        conversation,
        "user",
        "What do these show?",
        blocks=[image_block(picture), pdf_block(2)],
    )

    response = staff_client.get(
        reverse("admin:assistant_conversation_request", args=[conversation.pk]), {"shape": shape}
    )

    assert response.status_code == 200
    body = response.json()
    if shape == "gemini":
        parts = body["contents"][0]["parts"]
        assert [part.get("inline_data") for part in parts if "inline_data" in part] == [
            {"mime_type": "image/png", "data": b64(picture)},
            {"mime_type": "application/pdf", "data": b64(pdf(2))},
        ]
    else:
        sources = [block["source"] for block in body["messages"][0]["content"][:2]]
        assert [source["data"] for source in sources] == [b64(picture), b64(pdf(2))]


@pytest.mark.parametrize("selected", ["abc", "1.5", ""])
def test_an_action_on_a_selection_that_is_not_ids_changes_nothing(staff_client, selected):
    conversation, _ = tool_heavy_conversation()
    before = [(c.pk, c.deleted_at, held_state(c)) for c in Conversation.objects.all()]

    response = staff_client.post(
        CHANGELIST, {"action": "delete_selected", ACTION_CHECKBOX_NAME: [selected], "post": "yes"}
    )

    assert response.status_code == 302
    assert flashed(response) == [
        "Items must be selected by their ids in order to perform actions on them. "
        "No items have been changed."
    ]
    assert [(c.pk, c.deleted_at, held_state(c)) for c in Conversation.objects.all()] == before
    assert history(conversation) == []


def change_data(conversation: Conversation, parent: Conversation) -> dict[str, str]:
    return {
        "title": conversation.title,
        "user": "",
        "parent_conversation": str(parent.pk),
        "system_prompt": conversation.system_prompt,
    }


def test_the_change_form_refuses_a_conversation_as_its_own_parent(staff_client):
    conversation, _ = tool_heavy_conversation()

    response = staff_client.post(change_url(conversation), change_data(conversation, conversation))

    assert response.status_code == 200
    assert (
        response.context["adminform"].form.errors.as_data()["parent_conversation"][0].code
        == "fork_cycle"
    )
    assert Conversation.objects.get(pk=conversation.pk).parent_conversation_id is None


def test_the_change_form_refuses_a_two_conversation_cycle(staff_client):
    parent, _ = tool_heavy_conversation(title="parent")
    child = Conversation.objects.create(title="child", parent_conversation=parent)

    response = staff_client.post(change_url(parent), change_data(parent, child))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors.as_data()["parent_conversation"]
    assert [error.code for error in errors] == ["fork_cycle"]
    assert [str(message) for error in errors for message in error.messages] == [
        f"Conversation {child.pk} continues this conversation: it cannot be its parent "
        "(a cycle of forks)."
    ]
    assert Conversation.objects.get(pk=parent.pk).parent_conversation_id is None


def test_the_change_form_accepts_a_parent_that_is_not_a_descendant(staff_client):
    first, _ = tool_heavy_conversation(title="first")
    second = Conversation.objects.create(title="second")

    response = staff_client.post(change_url(second), change_data(second, first))

    assert response.status_code == 302
    assert Conversation.objects.get(pk=second.pk).parent_conversation_id == first.pk


def test_each_events_figures_say_whether_they_measure_the_request_or_the_messages(
    staff_client, staff
):
    """Each row labels what its tokens measure: "tokens before → after" once read one
    message's size on a tool-result row (5,157 → 232) and the request on a window row,
    under one unlabelled header."""
    staff.user_permissions.add(Permission.objects.get(codename="view_compactionevent"))
    conversation = Conversation.objects.create(title="figures")
    kinds = CompactionEvent.Kind
    for kind, before, after, details in (
        (kinds.TOOL_RESULTS, 5_157, 232, {"message_id": 1}),
        (kinds.WINDOW_SUMMARY, 23_700, 2_200, {}),
        (kinds.TOOL_RESULTS, 23_942, 1_358, {"parts": []}),  # a staff action's one event
    ):
        CompactionEvent.objects.create(
            conversation=conversation,
            kind=kind,
            tokens_before=before,
            tokens_after=after,
            details=details,
        )

    page = staff_client.get(reverse("admin:assistant_compactionevent_changelist")).content.decode()

    cells = re.findall(r'<td class="field-tokens">(.*?)</td>', page)
    assert cells == [
        '<span class="figures">the request: 23,942 → 1,358 tokens</span>',
        '<span class="figures">the request: 23,700 → 2,200 tokens</span>',
        '<span class="figures">the messages compacted: 5,157 → 232 tokens</span>',
    ]
    assert "Tokens before → after, of what" in page


def test_the_inspector_shows_the_summary_the_next_request_adopts_first(staff_client):
    """The inspector shows what the next request carries: it once showed the stored
    window summary, without the "## Originals" index, while the next request carried
    the worker's pre-built one: it read what the previous request carried, not what
    the pre-call hook's plan (here: adopt the pending summary on a cold cache) sends
    next."""
    from assistant.services import prepare_context

    conversation, rows = tool_heavy_conversation()
    pending = (
        "## Goal\n- Fix post 42's broken links.\n\n## Originals: ref m1..m10\n"
        "- records: post 42 (ref m3)"
    )
    write_state(
        Conversation.objects.filter(pk=conversation.pk),
        {
            MetadataKeys.PENDING_SUMMARY: pending,
            MetadataKeys.PENDING_THROUGH_MESSAGE_ID: rows[9].pk,
            MetadataKeys.PENDING_BASE_MESSAGE_ID: None,
            MetadataKeys.PENDING_ANCHOR_MESSAGE_ID: None,
            MetadataKeys.PENDING_ARTIFACT_INDEX: None,
            MetadataKeys.PENDING_USAGE: {},
        },
    )
    hour_ago = timezone.now() - timedelta(hours=1)
    Message.objects.filter(conversation=conversation).update(created_at=hour_ago)  # cold cache

    response = staff_client.get(change_url(conversation))
    inspector, page = response.context["inspector"], response.content.decode()
    body = staff_client.get(change_url(conversation).replace("change/", "request.json")).json()
    sent = prepare_context(conversation)

    assert sent.window_summary == pending
    assert inspector["window_summary"] == sent.window_summary
    assert inspector["cutoff_id"] == sent.cutoff_id == rows[9].pk
    # What the hook does first beyond the summary is said, not hidden.
    assert inspector["first"] == ["1 consumed tool result(s) compacted"]
    assert "the pre-call hook first makes: 1 consumed tool result(s) compacted" in page
    assert [block["text"] for block in body["system"]][-1].endswith(pending)


@pytest.mark.parametrize("prepared", [False, True], ids=["made-now", "worker-prepared"])
def test_the_inspectors_request_is_what_the_pre_call_hook_then_sends(staff_client, prepared):
    """Issue 50: with a pending summary on a cold cache and a consumed tool result
    due for compaction, the inspector named the compaction ("first: 1 consumed tool
    result(s) compacted") but showed the result verbatim, and its size and
    request.json counted it verbatim: the next request carried it compacted."""
    from assistant.services import prepare_context

    conversation, rows = tool_heavy_conversation()
    if prepared:  # the worker prepared the compaction ahead
        Message.objects.filter(pk=rows[2].pk).update(
            prepared_content="[read_post: post 42, title 'Helo']",
            prepared_compaction=Message.Compaction.TRUNCATED,
            prepared_token_estimate=12,
        )
    write_state(
        Conversation.objects.filter(pk=conversation.pk),
        {
            MetadataKeys.PENDING_SUMMARY: "## Goal\n- Fix post 42.",
            MetadataKeys.PENDING_THROUGH_MESSAGE_ID: rows[1].pk,
            MetadataKeys.PENDING_BASE_MESSAGE_ID: None,
            MetadataKeys.PENDING_ANCHOR_MESSAGE_ID: None,
            MetadataKeys.PENDING_ARTIFACT_INDEX: None,
            MetadataKeys.PENDING_USAGE: {},
        },
    )
    hour_ago = timezone.now() - timedelta(hours=1)
    Message.objects.filter(conversation=conversation).update(created_at=hour_ago)  # cold cache
    writes = Message.objects.filter(conversation=conversation).values_list(
        "pk", "compacted_content", "compaction", "token_estimate"
    )
    before = list(writes)

    inspector = staff_client.get(change_url(conversation)).context["inspector"]
    body = staff_client.get(change_url(conversation).replace("change/", "request.json")).json()

    assert list(writes) == before  # the inspector wrote nothing
    sent = prepare_context(conversation)
    assert Message.objects.get(pk=rows[2].pk).compaction  # the hook did compact it
    shape = wire_of(request_shape(conversation.pk))
    assert body == json.loads(json.dumps(sent.request(shape), cls=WireJSONEncoder))
    assert inspector["window_summary"] == sent.window_summary
    assert [row["content"] for row in inspector["messages"]] == [
        str(message.get("content") or "")[:2000] for message in sent.messages
    ]
    assert inspector["total"] == load_window(conversation.pk).context_tokens()


def test_the_list_and_the_page_give_one_conversation_the_same_figures(staff_client):
    """Issue 50's trial: one conversation's size, % trigger and % window read the same
    on the list and on its page, a compaction pending included (the page shows the
    next request; the list read the size the previous call left)."""
    conversation, rows = tool_heavy_conversation()
    add_message(conversation, "assistant", "Answered.", provider="openai", model="gpt-4.1")
    write_state(
        Conversation.objects.filter(pk=conversation.pk),
        {
            MetadataKeys.PENDING_SUMMARY: "## Goal\n- Fix post 42.",
            MetadataKeys.PENDING_THROUGH_MESSAGE_ID: rows[1].pk,
            MetadataKeys.PENDING_BASE_MESSAGE_ID: None,
            MetadataKeys.PENDING_ANCHOR_MESSAGE_ID: None,
            MetadataKeys.PENDING_ARTIFACT_INDEX: None,
            MetadataKeys.PENDING_USAGE: {},
        },
    )
    hour_ago = timezone.now() - timedelta(hours=1)
    Message.objects.filter(conversation=conversation).update(created_at=hour_ago)  # cold cache

    inspector = staff_client.get(change_url(conversation)).context["inspector"]
    listed = staff_client.get(CHANGELIST).content.decode()

    page = staff_client.get(change_url(conversation)).content.decode()
    stored = Conversation.objects.get(pk=conversation.pk).context_tokens
    shares = f"{share(stored, 50_000)} · {share(stored, 1_047_576)}"
    assert inspector["limits"].model == "gpt-4.1"
    assert (
        context_cell(
            "ok", "color:inherit;", f"{stored:,}", shares, model="gpt-4.1", window=1_047_576
        )
        in listed
    )
    # The next request is smaller (the pending summary adopted first), and the page
    # names the list's figure beside it, with the same shares, instead of disagreeing.
    assert inspector["total"] < stored
    assert (
        f"The conversation list shows {stored:,} tokens ({shares}): the size the previous "
        "call left, until the pre-call hook makes the next request." in page
    )


def _tree_rows(page: str) -> list[str]:
    section = page.split('id="conversation-tree"', 1)[1].split("</fieldset>", 1)[0]
    return re.findall(r'<tr class="tree-node[^"]*"[^>]*>.*?</tr>', section, re.S)


def test_the_conversation_page_shows_its_tree_and_links_each_node(staff_client):
    parent = Conversation.objects.create(title="<b>Release</b> & notes")
    edited = add_message(parent, "user", "Draft the notes.")
    add_message(parent, "assistant", "Drafted.")
    first = fork_from_message(parent, edited.pk)[0]
    second = fork_from_message(parent, edited.pk)[0]
    session = new_session(parent, carry_summary=False)
    set_active_branch(second)

    page = staff_client.get(change_url(first)).content.decode()

    rows = _tree_rows(page)
    assert [re.search(r'data-conversation="(\d+)"', row)[1] for row in rows] == [
        str(c.pk) for c in (parent, first, second, session)
    ]
    assert "4 conversations" in page
    for row, conversation in zip(rows, (parent, first, second, session), strict=True):
        assert f'href="{change_url(conversation)}"' in row
    assert "&lt;b&gt;Release&lt;/b&gt; &amp; notes" in rows[0]  # escaped, never markup
    assert "<b>Release</b>" not in page
    message_url = reverse("admin:assistant_message_change", args=[edited.pk])
    assert f'<a href="{message_url}">message #{edited.pk}</a> (sibling 2/3)' in rows[1]
    assert f"message #{edited.pk}</a> (sibling 3/3)" in rows[2]
    assert "(this page)" in rows[1] and 'class="tree-node current"' in rows[1]
    shown = [re.search(r'<td class="shown">(.*?)</td>', row)[1] for row in rows]
    assert shown == ["shown", "", "shown", ""]  # the parent, and the branch set active
    assert "<td>session</td>" in rows[3]


def test_a_conversation_without_relatives_shows_no_tree(staff_client):
    alone, _ = tool_heavy_conversation()

    assert 'id="conversation-tree"' not in staff_client.get(change_url(alone)).content.decode()


def _branches(parent: Conversation, at: Message, count: int) -> None:
    Conversation.objects.bulk_create(
        Conversation(
            title=f"branch {n}",
            parent_conversation=parent,
            parent_link=Conversation.Link.BRANCH,
            fork_message_id=at.pk,
        )
        for n in range(count)
    )


@pytest.mark.parametrize("size", [10, 300])
def test_the_tree_costs_the_same_queries_at_any_size(staff_client, django_assert_num_queries, size):
    """The tree's two queries whatever its size; past TREE_ROWS_SHOWN (200) the rest
    are counted, not listed."""
    parent, rows = tool_heavy_conversation()
    _branches(parent, rows[4], 1)
    staff_client.get(change_url(parent))  # warm the session and permission caches
    with CaptureQueriesContext(connection) as one_branch:
        staff_client.get(change_url(parent))
    queries = len(one_branch.captured_queries)  # read now: a request clears the log
    _branches(parent, rows[4], size - 1)

    with django_assert_num_queries(queries):
        page = staff_client.get(change_url(parent)).content.decode()
    assert len(_tree_rows(page)) == min(size + 1, 200)
    assert f"Tree: {size + 1} conversations" in page
