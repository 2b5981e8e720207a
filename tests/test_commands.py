"""The operator commands: compact_conversation, cleanup, context_report,
export_transcript (bad input, dry runs, and what they do)."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from assistant.models import CompactionEvent, Conversation, Message
from assistant.services import add_message
from tests.builders import chat_turns, html, tool_turn


def run(*args, **options) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO(), **options)
    return out.getvalue()


@pytest.fixture
def tool_heavy(db) -> Conversation:
    conversation = Conversation.objects.create(title="Blog admin", system_prompt="You help.")
    tool_turn(conversation, "Read post 42", [("get_blog_post", {"id": 42}, html(6000, "P42"))])
    tool_turn(conversation, "Read post 43", [("get_blog_post", {"id": 43}, html(5000, "P43"))])
    tool_turn(conversation, "Thanks", [])
    return conversation


@pytest.mark.parametrize("command", ["compact_conversation", "context_report", "export_transcript"])
@pytest.mark.parametrize(
    ("raw_id", "message"),
    [
        ("999999", "Conversation 999999 does not exist."),
        ("abc", "Conversation id must be an integer, got 'abc'."),
        ("0", "Conversation id must be positive, got 0."),
        (str(10**30), f"Conversation {10**30} does not exist."),
    ],
)
@pytest.mark.django_db
def test_a_bad_conversation_id_is_a_clear_command_error(command, raw_id, message):
    with pytest.raises(CommandError) as error:
        run(command, raw_id)

    assert str(error.value) == message


@pytest.mark.django_db
def test_compact_conversation_refuses_an_unknown_level(tool_heavy):
    with pytest.raises(CommandError, match=r"^--level must be 0, 1 or 2, got 3\.$"):
        run("compact_conversation", str(tool_heavy.pk), level=3)


@pytest.mark.django_db
def test_compact_conversation_dry_run_changes_nothing(tool_heavy):
    output = run("compact_conversation", str(tool_heavy.pk), dry_run=True)

    assert "2 tool result(s) would be compacted, 0 repeated result(s) stubbed" in output
    assert "window summary: not due. Nothing was changed." in output
    assert Message.objects.exclude(compaction="").count() == 0
    assert CompactionEvent.objects.count() == 0


def cutoff(conversation) -> int | None:
    conversation.refresh_from_db()
    return conversation.compaction_through_message_id


@pytest.mark.django_db
def test_the_dry_run_says_what_the_real_run_then_does(settings):
    """Before: the dry run counted every message of the conversation, not
    those after the cutoff, and announced a summary the real run never made."""
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "MAX_MESSAGES_BEFORE_SUMMARY": 10,
        "MIN_RECENT_MESSAGES": 2,
        "COMPACTION_TIMING": "eager",  # the count trigger counts at once
    }
    conversation = Conversation.objects.create(title="long chat")
    chat_turns(conversation, 6, size=1500)  # 12 messages: the count trigger is reached

    due = run("compact_conversation", str(conversation.pk), dry_run=True)
    run("compact_conversation", str(conversation.pk))
    first_cutoff = cutoff(conversation)
    chat_turns(conversation, 1, size=1500, prefix="later ")  # 14: a few after the cutoff
    not_due = run("compact_conversation", str(conversation.pk), dry_run=True)
    run("compact_conversation", str(conversation.pk))

    summarized = Message.objects.filter(conversation=conversation, id__lte=first_cutoff).count()
    assert f"window summary: due: {summarized} message(s) would be summarized" in due
    assert first_cutoff is not None
    assert "window summary: not due." in not_due
    assert cutoff(conversation) == first_cutoff  # the real run changed nothing either


@pytest.mark.django_db
def test_the_dry_run_counts_tokens_as_the_compacted_window_would_have_them(settings):
    """The token trigger is reached only before the tool results are
    compacted: the real run compacts first and then finds no shift due."""
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 3000,
        "MAX_RECENT_TOKENS": 2000,
        "MIN_RECENT_MESSAGES": 2,
    }
    conversation = Conversation.objects.create(title="tools")
    tool_turn(conversation, "Read post 42", [("get_blog_post", {"id": 42}, html(14000, "P42"))])
    tool_turn(conversation, "Thanks", [])

    plan = run("compact_conversation", str(conversation.pk), dry_run=True)
    run("compact_conversation", str(conversation.pk))

    assert "1 tool result(s) would be compacted" in plan
    assert "window summary: not due." in plan
    assert cutoff(conversation) is None


@pytest.mark.django_db
def test_compact_conversation_compacts_tool_results_and_keeps_originals(tool_heavy):
    originals = dict(
        Message.objects.filter(role="tool").values_list("id", "content").order_by("id")
    )

    output = run("compact_conversation", str(tool_heavy.pk))

    assert f"Conversation {tool_heavy.pk}: 2 tool result(s) compacted or stubbed" in output
    compacted = Message.objects.filter(role="tool").order_by("id")
    assert [m.compaction != "" for m in compacted] == [True, True]
    assert {m.pk: m.content for m in compacted} == originals
    assert run("compact_conversation", str(tool_heavy.pk)).startswith(
        f"Conversation {tool_heavy.pk}: 0 tool result(s) compacted or stubbed"
    )


@pytest.mark.django_db
def test_compact_conversation_refuses_a_deleted_conversation(tool_heavy):
    Conversation.objects.filter(pk=tool_heavy.pk).update(deleted_at=timezone.now())

    with pytest.raises(CommandError, match=rf"^Conversation {tool_heavy.pk} is deleted\.$"):
        run("compact_conversation", str(tool_heavy.pk))


@pytest.mark.django_db
def test_context_report_shows_the_breakdown_and_the_history(tool_heavy):
    run("compact_conversation", str(tool_heavy.pk))

    report = json.loads(run("context_report", str(tool_heavy.pk), json=True))
    text = run("context_report", str(tool_heavy.pk))

    tokens = report["tokens"]
    assert tokens["total"] == (
        tokens["system"] + tokens["summaries"] + tokens["messages"] + tokens["tool_results"]
    )
    assert report["messages"] == {"total": 10, "compacted": 2, "originals_dropped": 0}
    assert [event["kind"] for event in report["events"]] == list(
        CompactionEvent.objects.filter(conversation=tool_heavy)
        .order_by("-created_at", "-id")
        .values_list("kind", flat=True)
    )
    assert report["events"]
    assert f"Conversation {tool_heavy.pk}: Blog admin" in text
    assert f"  total        {tokens['total']:>9}" in text
    assert "Messages: 10 stored, 10 in the context, 2 compacted, 0 originals dropped" in text


@pytest.mark.django_db
def test_export_transcript_writes_the_full_uncompacted_history(tool_heavy, tmp_path):
    run("compact_conversation", str(tool_heavy.pk))
    add_message(tool_heavy, "user", "unicode: 日本語 ✓ \u2028 done")
    target = tmp_path / "transcript.jsonl"

    run("export_transcript", str(tool_heavy.pk), output=str(target))

    lines = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    header, messages = lines[0], lines[1:]
    assert (header["type"], header["id"], header["messages"]) == ("conversation", tool_heavy.pk, 11)
    stored = list(Message.objects.filter(conversation=tool_heavy).order_by("id"))
    assert [m["id"] for m in messages] == [m.pk for m in stored]
    assert [m["content"] for m in messages] == [m.content for m in stored]
    assert [m["compacted_content"] for m in messages] == [m.compacted_content for m in stored]
    assert messages[-1]["content"] == "unicode: 日本語 ✓ \u2028 done"


@pytest.mark.django_db
def test_export_transcript_to_a_directory_is_a_clear_error_even_with_force(tool_heavy, tmp_path):
    with pytest.raises(CommandError, match=r"is a directory; give a file name"):
        run("export_transcript", str(tool_heavy.pk), output=str(tmp_path), force=True)


@pytest.mark.django_db
def test_context_report_refuses_a_negative_event_count(tool_heavy):
    with pytest.raises(CommandError, match=r"^--events must be 0 or more, got -1\.$"):
        run("context_report", str(tool_heavy.pk), events=-1)


@pytest.mark.django_db
def test_context_report_refuses_an_event_count_past_the_database_integer(tool_heavy):
    with pytest.raises(CommandError, match=r"^--events must be at most 2147483647"):
        run("context_report", str(tool_heavy.pk), events=99999999999999999999)


@pytest.mark.django_db
def test_compact_conversation_refuses_the_instructions_the_service_refuses(tool_heavy, fake_llm):
    before = CompactionEvent.objects.count()
    with pytest.raises(CommandError, match="at most 4000 characters"):
        run("compact_conversation", str(tool_heavy.pk), instructions="x" * 5000)
    assert CompactionEvent.objects.count() == before
    assert fake_llm.requests == []


@pytest.mark.django_db
def test_export_transcript_to_stdout_and_refusing_to_overwrite(tool_heavy, tmp_path):
    output = run("export_transcript", str(tool_heavy.pk))
    target = tmp_path / "exists.jsonl"
    target.write_text("keep me")

    assert len(output.splitlines()) == 11
    with pytest.raises(CommandError, match="exists; pass --force to overwrite it"):
        run("export_transcript", str(tool_heavy.pk), output=str(target))
    assert target.read_text() == "keep me"


@pytest.mark.django_db
def test_cleanup_dry_run_counts_and_changes_nothing():
    conversation = Conversation.objects.create(title="old")
    add_message(conversation, "user", "hi")
    Conversation.objects.filter(pk=conversation.pk).update(
        deleted_at=timezone.now() - timedelta(days=31),
        updated_at=timezone.now() - timedelta(days=31),
    )

    output = run("cleanup", dry_run=True)

    assert "purge_deleted: 1 (dry run, nothing changed)" in output
    assert Conversation.objects.count() == 1


@pytest.mark.django_db
def test_cleanup_runs_every_job_in_batches_until_done(settings, empty_queues):
    settings.ASSISTANT_CLEANUP = {"PURGE_BATCH_SIZE": 2}
    long_ago = timezone.now() - timedelta(days=31)
    for index in range(5):
        conversation = Conversation.objects.create(title=f"old {index}")
        add_message(conversation, "user", "hi")
    Conversation.objects.update(deleted_at=long_ago, updated_at=long_ago)

    output = run("cleanup", no_progress=True)

    assert output.splitlines() == [
        "purge_deleted: 5",
        "drop_originals: 0",
        "sweep_missed_exchanges: 0",
        "fork_summaries_missing: 0",
        "release_leases: 0",
        "stale_summaries: 0",
    ]
    assert Conversation.objects.count() == 0
    assert Message.objects.count() == 0


@pytest.mark.django_db
def test_cleanup_only_runs_the_named_jobs():
    output = run("cleanup", only=["release_leases"], no_progress=True)

    assert output.splitlines() == ["release_leases: 0"]
