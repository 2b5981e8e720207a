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
