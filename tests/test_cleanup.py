"""The scheduled cleanup jobs: purge, drop originals, sweep, fork summaries,
stale leases and cached summaries; their settings and beat schedule."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from assistant.cleanup import jobs as cleanup
from assistant.history.state_writes import write_state
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys, SummaryVersion
from assistant.ops.logs import log_event
from assistant.services import add_message
from assistant.settings.cleanup import beat_schedule, cleanup_config, cleanup_settings
from assistant.summary.versions import record_version
from tests.conftest import wait_until

NOW = timezone.now()
DAY = timedelta(days=1)


def queued(redis_client, queue):
    return [
        (json.loads(raw)["headers"]["task"], json.loads(raw)["headers"]["argsrepr"])
        for raw in reversed(redis_client.lrange(queue, 0, -1))
    ]


def make_conversation(title="c", *, messages=2, events=1, **fields) -> Conversation:
    conversation = Conversation.objects.create(title=title)
    for index in range(messages):
        add_message(conversation, "user" if index % 2 == 0 else "assistant", f"message {index}")
    for _ in range(events):
        CompactionEvent.objects.create(conversation=conversation, kind="tool_results")
    # QuerySet.update() leaves auto_now alone: the timestamps are the test's.
    fields.setdefault("updated_at", NOW - 10 * DAY)
    Conversation.objects.filter(pk=conversation.pk).update(**fields)
    conversation.refresh_from_db()
    return conversation


# --- purge ---------------------------------------------------------------------


@pytest.mark.django_db
def test_it_purges_conversations_deleted_past_the_retention_with_messages_and_events():
    old_a = make_conversation("old a", deleted_at=NOW - 31 * DAY)
    old_b = make_conversation("old b", deleted_at=NOW - 40 * DAY)
    recent = make_conversation("recently deleted", deleted_at=NOW - 29 * DAY)
    alive = make_conversation("not deleted")
    touched = make_conversation("in use", deleted_at=NOW - 31 * DAY, updated_at=NOW)
    exchanged = make_conversation(
        "exchange in grace", deleted_at=NOW - 31 * DAY, last_exchange_at=NOW - timedelta(minutes=5)
    )
    leased = make_conversation(
        "leased",
        deleted_at=NOW - 31 * DAY,
        summary_lease_token=uuid.uuid4(),
        summary_lease_expires_at=NOW + timedelta(minutes=1),
    )

    result = cleanup.purge_deleted_conversations(now=NOW)

    assert result == cleanup.CleanupResult("purge_deleted", 2, False)
    kept = {recent.pk, alive.pk, touched.pk, exchanged.pk, leased.pk}
    assert set(Conversation.objects.values_list("id", flat=True)) == kept
    assert set(Message.objects.values_list("conversation_id", flat=True)) == kept
    assert Message.objects.count() == 10
    assert CompactionEvent.objects.count() == 5
    assert not Message.objects.filter(conversation_id__in=[old_a.pk, old_b.pk]).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("retention", [None])
def test_a_null_retention_purges_nothing(retention, settings):
    settings.ASSISTANT_CLEANUP = {"PURGE_RETENTION_DAYS": retention}
    make_conversation(deleted_at=NOW - 400 * DAY)

    assert cleanup.purge_deleted_conversations(now=NOW).count == 0
    assert Conversation.objects.count() == 1


@pytest.mark.django_db
def test_it_purges_in_batches_and_says_when_work_remains(settings):
    settings.ASSISTANT_CLEANUP = {"PURGE_BATCH_SIZE": 2}
    for index in range(3):
        make_conversation(f"old {index}", deleted_at=NOW - 31 * DAY)

    first = cleanup.purge_deleted_conversations(now=NOW)
    second = cleanup.purge_deleted_conversations(now=NOW)
    third = cleanup.purge_deleted_conversations(now=NOW)

    assert (first.count, first.remains) == (2, True)
    assert (second.count, second.remains) == (1, False)
    assert (third.count, third.remains) == (0, False)
    assert Conversation.objects.count() == 0


@pytest.mark.django_db
def test_a_fork_outlives_its_purged_parent():
    parent = make_conversation("parent", deleted_at=NOW - 31 * DAY)
    fork = make_conversation("fork", parent_conversation=parent)

    cleanup.purge_deleted_conversations(now=NOW)

    fork.refresh_from_db()
    assert fork.parent_conversation_id is None
    assert fork.messages.count() == 2


@pytest.mark.django_db
def test_a_parent_is_kept_while_a_fork_still_lacks_its_deferred_summary():
    parent = make_conversation("parent", deleted_at=NOW - 31 * DAY)
    waiting = make_conversation(
        "fork made with summarize=False", parent_conversation=parent,
        summary_deferred=True,
    )  # fmt: skip

    kept = cleanup.purge_deleted_conversations(now=NOW)
    counted = cleanup.pending_counts(now=NOW)["purge_deleted"]
    # The summary arrives (generate_parent_summary clears the flag): now it may go.
    write_state(
        Conversation.objects.filter(pk=waiting.pk),
        {
            MetadataKeys.SUMMARY_DEFERRED: False,
            MetadataKeys.PARENT_CONVERSATION_SUMMARY: "Goal: ...",
        },
    )
    purged = cleanup.purge_deleted_conversations(now=NOW)

    assert (kept.count, counted, purged.count) == (0, 0, 1)
    assert not Conversation.objects.filter(pk=parent.pk).exists()
    waiting.refresh_from_db()
    assert waiting.parent_conversation_id is None
    assert waiting.parent_conversation_summary == "Goal: ..."


# --- drop originals --------------------------------------------------------------


def compacted(conversation, content, compacted_at):
    message = add_message(conversation, "user", content)
    Message.objects.filter(pk=message.pk).update(
        compacted_content="[summary]", compaction="summarized", compacted_at=compacted_at
    )
    return message


@pytest.mark.django_db
def test_originals_are_kept_forever_by_default():
    conversation = make_conversation(messages=0, events=0)
    message = compacted(conversation, "the original", NOW - 1000 * DAY)

    assert cleanup.drop_compacted_originals(now=NOW).count == 0
    message.refresh_from_db()
    assert message.content == "the original"
    assert message.original_dropped_at is None


@pytest.mark.django_db
def test_it_drops_originals_compacted_past_the_retention_and_keeps_the_compacted_text(settings):
    settings.ASSISTANT_CLEANUP = {"DROP_ORIGINALS_RETENTION_DAYS": 7}
    conversation = make_conversation(messages=0, events=0)
    old = compacted(conversation, "old original", NOW - 8 * DAY)
    young = compacted(conversation, "young original", NOW - 6 * DAY)
    verbatim = add_message(conversation, "user", "never compacted")

    result = cleanup.drop_compacted_originals(now=NOW)
    again = cleanup.drop_compacted_originals(now=NOW)

    assert result == cleanup.CleanupResult("drop_originals", 1, False)
    assert again.count == 0
    old.refresh_from_db()
    young.refresh_from_db()
    verbatim.refresh_from_db()
    assert (old.content, old.compacted_content, old.original_dropped_at) == ("", "[summary]", NOW)
    assert (young.content, young.original_dropped_at) == ("young original", None)
    assert (verbatim.content, verbatim.original_dropped_at) == ("never compacted", None)


# --- sweep -----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_sweep_enqueues_exchanges_whose_work_never_ran(
    empty_queues, redis_client, django_capture_on_commit_callbacks
):
    old = NOW - timedelta(minutes=10)
    never_ran = make_conversation("never ran", last_exchange_at=old)
    stale = make_conversation(
        "done before the last exchange", last_exchange_at=old, post_exchange_done_at=old - DAY
    )
    make_conversation("done", last_exchange_at=old, post_exchange_done_at=old)
    make_conversation("within grace", last_exchange_at=NOW - timedelta(seconds=30))
    make_conversation("deleted", last_exchange_at=old, deleted_at=NOW)
    make_conversation("no exchange yet")

    with django_capture_on_commit_callbacks(execute=True):
        result = cleanup.sweep_missed_exchanges(now=NOW)

    assert result == cleanup.CleanupResult("sweep_missed_exchanges", 2, False, stale.pk)
    assert queued(redis_client, "compaction") == [
        ("assistant.tasks.post_exchange_task", f"({never_ran.pk},)"),
        ("assistant.tasks.post_exchange_task", f"({stale.pk},)"),
    ]


@pytest.mark.django_db
def test_the_sweep_pages_with_a_cursor(
    settings, empty_queues, redis_client, django_capture_on_commit_callbacks
):
    settings.ASSISTANT_CLEANUP = {"BATCH_SIZE": 2}
    ids = [
        make_conversation(f"c{i}", last_exchange_at=NOW - timedelta(hours=1)).pk for i in range(3)
    ]

    with django_capture_on_commit_callbacks(execute=True):
        first = cleanup.sweep_missed_exchanges(now=NOW)
        second = cleanup.sweep_missed_exchanges(after_id=first.after_id, now=NOW)

    assert (first.count, first.remains, first.after_id) == (2, True, ids[1])
    assert (second.count, second.remains, second.after_id) == (1, False, ids[2])
    assert [args for _, args in queued(redis_client, "compaction")] == [f"({i},)" for i in ids]


@pytest.mark.django_db
def test_the_sweep_does_not_enqueue_work_already_queued(
    empty_queues, redis_client, django_capture_on_commit_callbacks
):
    """During a backlog every sweep finds the same unprocessed exchanges:
    each is queued once, however many sweeps run, until its task starts."""
    from assistant.history.queue import POST_EXCHANGE_TASK, task_started
    from assistant.post_exchange.exchanges import finish_exchange

    ids = [
        make_conversation(f"c{i}", last_exchange_at=NOW - timedelta(hours=1)).pk for i in range(3)
    ]
    chatted = make_conversation("queued by the chat path")
    with django_capture_on_commit_callbacks(execute=True):
        finish_exchange(chatted)
    Conversation.objects.filter(pk=chatted.pk).update(last_exchange_at=NOW - timedelta(hours=1))

    for _ in range(3):
        with django_capture_on_commit_callbacks(execute=True):
            cleanup.sweep_missed_exchanges(now=NOW)
    task_started(POST_EXCHANGE_TASK, ids[0])  # a worker took the first one; it failed for good
    with django_capture_on_commit_callbacks(execute=True):
        cleanup.sweep_missed_exchanges(now=NOW)

    assert [args for _, args in queued(redis_client, "compaction")] == [
        f"({chatted.pk},)",
        f"({ids[0]},)",
        f"({ids[1]},)",
        f"({ids[2]},)",
        f"({ids[0]},)",
    ]


def test_a_real_worker_runs_the_sweep_and_the_work_it_finds(celery_worker):
    from assistant.tasks import sweep_missed_exchanges_task

    conversation = make_conversation(last_exchange_at=timezone.now() - timedelta(hours=1))

    sweep_missed_exchanges_task.delay()

    def processed():
        conversation.refresh_from_db()
        return conversation.post_exchange_done_at is not None

    assert wait_until(processed)
    assert conversation.post_exchange_done_at == conversation.last_exchange_at


# --- fork summaries -------------------------------------------------------------


@pytest.mark.django_db
def test_it_enqueues_deferred_fork_summaries_that_never_arrived(
    empty_queues, redis_client, django_capture_on_commit_callbacks
):
    parent = make_conversation("parent")
    missing = make_conversation("missing", parent_conversation=parent)
    done = make_conversation("done", parent_conversation=parent)
    young = make_conversation("young", parent_conversation=parent)
    deferred = {MetadataKeys.SUMMARY_DEFERRED: True}
    write_state(Conversation.objects.filter(pk__in=[missing.pk, young.pk]), deferred)
    write_state(
        Conversation.objects.filter(pk=done.pk),
        {**deferred, MetadataKeys.PARENT_CONVERSATION_SUMMARY: "Goal: ..."},
    )
    Conversation.objects.exclude(pk=young.pk).update(created_at=NOW - DAY)
    Conversation.objects.filter(pk=young.pk).update(created_at=NOW)

    with django_capture_on_commit_callbacks(execute=True):
        result = cleanup.enqueue_missing_fork_summaries(now=NOW)

    assert result == cleanup.CleanupResult("fork_summaries_missing", 1, False, missing.pk)
    assert queued(redis_client, "compaction") == [
        ("assistant.tasks.generate_parent_summary_task", f"({missing.pk},)")
    ]


# --- leases and stale summaries --------------------------------------------------


@pytest.mark.django_db
def test_it_releases_expired_leases_only():
    expired = make_conversation(
        summary_lease_token=uuid.uuid4(), summary_lease_expires_at=NOW - timedelta(seconds=1)
    )
    live_token = uuid.uuid4()
    live = make_conversation(
        summary_lease_token=live_token, summary_lease_expires_at=NOW + timedelta(minutes=1)
    )

    result = cleanup.release_expired_leases(now=NOW)

    assert result == cleanup.CleanupResult("release_leases", 1, False)
    expired.refresh_from_db()
    live.refresh_from_db()
    assert (expired.summary_lease_token, expired.summary_lease_expires_at) == (None, None)
    assert live.summary_lease_token == live_token


@pytest.mark.django_db
def test_it_clears_cached_summaries_whose_split_message_is_gone_and_keeps_other_state():
    other = make_conversation("other")
    foreign_id = other.messages.order_by("id").first().pk
    stale = make_conversation("stale")
    valid = make_conversation("valid")
    valid_id = valid.messages.order_by("id").last().pk
    write_state(
        Conversation.objects.filter(pk=stale.pk),
        {
            MetadataKeys.COMPACTION_SUMMARY: "old summary",
            MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: foreign_id,
            MetadataKeys.PENDING_SUMMARY: "pending",
            MetadataKeys.PENDING_THROUGH_MESSAGE_ID: 10**12,
            MetadataKeys.PENDING_BASE_MESSAGE_ID: foreign_id,
            MetadataKeys.TOOL_SERVICES: ["blog"],
        },
    )
    valid_state = {
        MetadataKeys.COMPACTION_SUMMARY: "current summary",
        MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: valid_id,
    }
    write_state(Conversation.objects.filter(pk=valid.pk), valid_state)

    result = cleanup.clear_stale_summaries()
    again = cleanup.clear_stale_summaries()

    assert result == cleanup.CleanupResult("stale_summaries", 2, False)
    assert again.count == 0
    stale.refresh_from_db()
    valid.refresh_from_db()
    assert held_state(stale) == {MetadataKeys.TOOL_SERVICES: ["blog"]}
    assert held_state(valid) == valid_state


# --- tasks re-enqueue themselves ----------------------------------------------------


@pytest.mark.django_db
def test_a_cleanup_task_re_enqueues_itself_while_work_remains(settings, empty_queues, redis_client):
    from assistant.tasks import purge_deleted_conversations_task

    settings.ASSISTANT_CLEANUP = {"PURGE_BATCH_SIZE": 1}
    for index in range(2):
        make_conversation(f"old {index}", deleted_at=timezone.now() - 31 * DAY)

    assert purge_deleted_conversations_task() == 1

    assert Conversation.objects.count() == 1
    assert queued(redis_client, "celery") == [
        ("assistant.tasks.purge_deleted_conversations_task", "()")
    ]


# --- counts, settings, schedule, logs ------------------------------------------------


@pytest.mark.django_db
def test_pending_counts_match_what_the_jobs_then_do():
    make_conversation(deleted_at=NOW - 31 * DAY)
    make_conversation(last_exchange_at=NOW - DAY)
    make_conversation(
        summary_lease_token=uuid.uuid4(), summary_lease_expires_at=NOW - timedelta(seconds=1)
    )

    assert cleanup.pending_counts(now=NOW) == {
        "purge_deleted": 1,
        "drop_originals": 0,
        "sweep_missed_exchanges": 1,
        "fork_summaries_missing": 0,
        "release_leases": 1,
        "stale_summaries": 0,
    }


def test_the_beat_schedule_is_built_from_the_cleanup_settings():
    assert settings.CELERY_BEAT_SCHEDULE == {
        "assistant-purge-deleted-conversations": {
            "task": "assistant.tasks.purge_deleted_conversations_task",
            "schedule": 3600.0,
            "options": {"expires": 3600.0},
        },
        "assistant-sweep-missed-exchanges": {
            "task": "assistant.tasks.sweep_missed_exchanges_task",
            "schedule": 300.0,
            "options": {"expires": 300.0},
        },
        "assistant-missing-fork-summaries": {
            "task": "assistant.tasks.missing_fork_summaries_task",
            "schedule": 300.0,
            "options": {"expires": 300.0},
        },
        "assistant-clear-stale-state": {
            "task": "assistant.tasks.clear_stale_state_task",
            "schedule": 600.0,
            "options": {"expires": 600.0},
        },
        "assistant-embed-texts": {
            "task": "assistant.tasks.embed_texts_task",
            "schedule": 300.0,
            "options": {"expires": 300.0},
        },
    }


def test_every_beat_entry_names_a_registered_task():
    from config.celery import app

    schedule = beat_schedule({"DROP_ORIGINALS_RETENTION_DAYS": 90, "SWEEP_PERIOD_SECONDS": 60})

    assert schedule["assistant-drop-compacted-originals"]["schedule"] == 86400.0
    assert schedule["assistant-sweep-missed-exchanges"]["schedule"] == 60.0
    assert len(schedule) == 6
    assert all(entry["task"] in app.tasks for entry in schedule.values())


def test_a_null_period_disables_a_beat_entry():
    schedule = beat_schedule({"SWEEP_PERIOD_SECONDS": None})

    assert "assistant-sweep-missed-exchanges" not in schedule
    assert len(schedule) == 4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"PURGE_RETENTION": 30}, "Unknown ASSISTANT_CLEANUP keys: PURGE_RETENTION"),
        # The one mechanism of every setting (assistant.settings.keys): the words of
        # ASSISTANT_COMPACTION's refusals.
        ({"BATCH_SIZE": 0}, "ASSISTANT_CLEANUP['BATCH_SIZE'] must be >= 1, got 0"),
        ({"BATCH_SIZE": 2.5}, "'BATCH_SIZE'] must be int, got 2.5"),
        ({"BATCH_SIZE": None}, "'BATCH_SIZE'] must be int, got None"),
        ({"SWEEP_GRACE_SECONDS": True}, "'SWEEP_GRACE_SECONDS'] must be float, got True"),
        ({"SWEEP_GRACE_SECONDS": "60"}, "'SWEEP_GRACE_SECONDS'] must be float, got '60'"),
        (
            {"PURGE_RETENTION_DAYS": -1},
            "'PURGE_RETENTION_DAYS'] must be >= 0 or null, got -1.0",
        ),
        ({"SWEEP_PERIOD_SECONDS": 0}, "'SWEEP_PERIOD_SECONDS'] must be > 0 or null, got 0.0"),
        ([30], "ASSISTANT_CLEANUP must be a dict (a JSON object)"),
    ],
)
def test_bad_cleanup_settings_are_refused(overrides, message):
    with pytest.raises(ImproperlyConfigured) as error:
        cleanup_settings(overrides)

    assert message in str(error.value)


def test_cleanup_settings_merge_overrides_with_defaults():
    merged = cleanup_settings({"PURGE_RETENTION_DAYS": 7, "DROP_ORIGINALS_RETENTION_DAYS": 0.5})

    assert merged["PURGE_RETENTION_DAYS"] == 7
    assert merged["DROP_ORIGINALS_RETENTION_DAYS"] == 0.5
    assert merged["BATCH_SIZE"] == 500
    assert cleanup_config(merged).SWEEP_GRACE_SECONDS == 120


def test_the_environment_variable_is_parsed_strictly(monkeypatch):
    from config.env import env_json_object

    monkeypatch.setenv("ASSISTANT_CLEANUP", '{"PURGE_RETENTION_DAYS": 14}')
    assert cleanup_settings(env_json_object("ASSISTANT_CLEANUP"))["PURGE_RETENTION_DAYS"] == 14

    monkeypatch.setenv("ASSISTANT_CLEANUP", "[14]")
    with pytest.raises(ImproperlyConfigured, match="must be a JSON object, got list"):
        env_json_object("ASSISTANT_CLEANUP")


@pytest.mark.django_db
def test_cleanup_logs_a_structured_event_without_content(caplog):
    make_conversation(deleted_at=NOW - 31 * DAY, messages=3, events=2)

    with caplog.at_level(logging.INFO, logger="assistant.events"):
        cleanup.purge_deleted_conversations(now=NOW)

    [record] = [r for r in caplog.records if r.name == "assistant.events"]
    assert record.event["event"] == "purge_deleted"
    assert (record.event["conversations"], record.event["messages"], record.event["events"]) == (
        1,
        3,
        2,
    )
    assert record.getMessage().startswith("event=purge_deleted conversations=1 messages=3 events=2")
    assert "message 0" not in caplog.text


def test_log_event_refuses_content_fields_and_quotes_labels(caplog):
    with pytest.raises(TypeError, match="must not log content"):
        log_event("tool_results", conversation_id=1, content="secret text")

    with caplog.at_level(logging.INFO, logger="assistant.events"):
        log_event("emergency_1", conversation_id=7, reason="prompt too long", tokens_after=None)

    assert (
        caplog.records[-1].getMessage()
        == 'event=emergency_1 conversation_id=7 reason="prompt too long"'
    )


@pytest.mark.django_db
def test_the_purge_takes_a_conversations_summary_versions_along():
    old = make_conversation("old with versions", deleted_at=NOW - 31 * DAY)
    kept = make_conversation("kept with versions")
    for conversation in (old, kept):
        first = record_version(conversation.pk, "## Goal\n- a", 1)
        record_version(
            conversation.pk, "## Goal\n- a", 1, kind=SummaryVersion.Kind.REVERT, source=first
        )

    cleanup.purge_deleted_conversations(now=NOW)

    assert set(SummaryVersion.objects.values_list("conversation_id", flat=True)) == {kept.pk}
    assert SummaryVersion.objects.count() == 2
