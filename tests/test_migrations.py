"""Upgrades: what a migration adds to conversations stored before it."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from assistant.models import Conversation
from assistant.window import context_size

BEFORE_SIZE = [("assistant", "0009_recall")]


@pytest.mark.django_db(transaction=True)
def test_migrate_measures_the_context_of_conversations_stored_before_the_size_column():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_SIZE)
    old = executor.loader.project_state(BEFORE_SIZE).apps
    stored = old.get_model("assistant", "Conversation").objects.create(
        title="from 0.2.0", system_prompt="You help."
    )
    messages = old.get_model("assistant", "Message").objects
    # Historical models skip Message.save(): the estimates are written as 0.2.0 stored them.
    user, answer = "Audit the blog. " * 200, "Done. " * 100
    messages.create(conversation_id=stored.pk, role="user", content=user, token_estimate=800)
    messages.create(conversation_id=stored.pk, role="assistant", content=answer, token_estimate=150)

    call_command("migrate", "assistant", verbosity=0)

    size = Conversation.objects.get(pk=stored.pk).context_tokens
    assert size == context_size(stored.pk) > 900
    new = Conversation.objects.create(title="after the upgrade")
    assert Conversation.objects.get(pk=new.pk).context_tokens == 0


BEFORE_STATE = [("assistant", "0014_pins_and_summary_versions")]
AFTER_STATE = [("assistant", "0015_conversation_state")]


@pytest.mark.django_db(transaction=True)
def test_migrate_moves_the_window_state_out_of_metadata_and_back():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_STATE)
    old = executor.loader.project_state(BEFORE_STATE).apps
    conversations = old.get_model("assistant", "Conversation").objects
    window = {
        "compaction_summary": "## Goal\n- audit the blog",
        "compaction_through_message_id": 41,
        "compaction_anchor_message_id": "40",  # as an older release may have written it
        "artifact_index": {"files": {"a.py": {"handle": "m7"}}},
        "context_epoch_message_id": 44,
        "token_ratio": 1.37,
        "needs_emergency_compaction": True,
        "tool_services": ["blog"],
        "cache_ledger": {"balance": 120.5, "gap": 0, "since": 44},
        "prebuild_request": {"base": 41, "at": 1700000000.0},
        "worker_seen_at": 1700000001.5,
        "fork_through_message_id": 12,
    }
    stored = conversations.create(title="0.3.0", metadata={**window, "host_key": {"kept": 1}})
    plain = conversations.create(title="host only", metadata={"host_key": 2})

    call_command("migrate", "assistant", verbosity=0)  # 0015, and on to the newest

    migrated = Conversation.objects.get(pk=stored.pk)
    assert migrated.metadata == {"host_key": {"kept": 1}}  # the host's keys, untouched
    assert migrated.compaction_summary == window["compaction_summary"]
    assert migrated.compaction_through_message_id == 41
    assert migrated.compaction_anchor_message_id == 40
    assert migrated.artifact_index == window["artifact_index"]
    assert (migrated.context_epoch_message_id, migrated.token_ratio) == (44, 1.37)
    assert migrated.needs_emergency_compaction is True
    assert migrated.tool_services == ["blog"]
    assert migrated.cache_ledger == window["cache_ledger"]
    assert migrated.prebuild_request == window["prebuild_request"]
    assert migrated.worker_seen_at == 1700000001.5
    assert migrated.fork_through_message_id == 12
    assert migrated.pending_summary is None and migrated.summary_deferred is False
    untouched = Conversation.objects.get(pk=plain.pk)
    assert (untouched.metadata, untouched.compaction_summary) == ({"host_key": 2}, None)

    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_STATE)
    reverted = executor.loader.project_state(BEFORE_STATE).apps
    back = reverted.get_model("assistant", "Conversation").objects.get(pk=stored.pk)
    assert back.metadata == {**window, "compaction_anchor_message_id": 40, "host_key": {"kept": 1}}
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER_STATE)
    call_command("migrate", "assistant", verbosity=0)
