"""Fast at production size (docs/operations.rst, "Performance at scale"): a stored
full-text vector for search_history, kept with each message and backfilled here in
batches, and the indexes the searches, the duplicate check and the newest-answer
lookups read. Every index is built CONCURRENTLY (so the migration is not atomic): a
production table keeps taking writes while it is built. On SQLite (the demo's
store) the column is added and the indexes, PostgreSQL's alone, are not built."""

import django.contrib.postgres.indexes
import django.db.models.deletion
import django.contrib.postgres.search
from django.contrib.postgres.operations import (
    AddIndexConcurrently,
    BtreeGinExtension,
    TrigramExtension,
)
from django.db import migrations, models
from django.db.models.functions import MD5, Cast

# Frozen here (100,000 = assistant.models.SEARCH_INDEX_CHARS when this was written):
# the document search_history matches, as assistant.store.history writes it.
DOCUMENT = "to_tsvector('simple'::regconfig, COALESCE(LEFT(content, 100000), ''))"
BATCH = 2_000
# 0009's expression index, replaced by the stored vector's.
OLD_INDEX = "assistant_msg_fts"


class _OnPostgreSQL(AddIndexConcurrently):
    """AddIndexConcurrently where the index exists: PostgreSQL."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


def backfill(apps, schema_editor):
    """Each stored message's vector, a batch of ids per statement (each its own
    transaction: the migration is not atomic), so no long lock is held."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        after = 0
        while True:
            cursor.execute(
                "SELECT max(id) FROM (SELECT id FROM assistant_message WHERE id > %s "
                "ORDER BY id LIMIT %s) AS batch",
                [after, BATCH],
            )
            last = cursor.fetchone()[0]
            if last is None:
                return
            cursor.execute(
                f"UPDATE assistant_message SET search_vector = {DOCUMENT} "
                "WHERE id > %s AND id <= %s AND search_vector IS NULL AND content <> ''",
                [after, last],
            )
            after = last


def drop_conversation_index(apps, schema_editor):
    """The conversation foreign key's own index, by the name Django gave it."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'assistant_message' "
            "AND indexdef LIKE '%%(conversation_id)'"
        )
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')


def restore_conversation_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS assistant_message_conversation_id_37580ec3 "
            "ON assistant_message (conversation_id)"
        )


def drop_old_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {OLD_INDEX}")


def restore_old_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {OLD_INDEX} ON assistant_message "
            "USING gin (to_tsvector('simple'::regconfig, COALESCE(LEFT(content, 100000), '')))"
        )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("assistant", "0015_conversation_state"),
    ]

    operations = [
        # Both trusted extensions (a database owner may create them); nothing on SQLite.
        BtreeGinExtension(),
        TrigramExtension(),
        # The admin list's stored cost figures (assistant.window.cost): NULL until
        # first computed, so adding the column rewrites nothing.
        migrations.AddField(
            model_name="conversation",
            name="cost_figures",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="search_vector",
            field=django.contrib.postgres.search.SearchVectorField(blank=True, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=False),
        _OnPostgreSQL(
            model_name="message",
            index=django.contrib.postgres.indexes.GinIndex(
                models.F("conversation_id"), models.F("search_vector"), name="assistant_msg_search"
            ),
        ),
        _OnPostgreSQL(
            model_name="message",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["conversation", "content"],
                opclasses=["int8_ops", "gin_trgm_ops"],
                name="assistant_msg_trgm",
            ),
        ),
        migrations.RunPython(drop_old_index, restore_old_index, elidable=False),
        _OnPostgreSQL(
            model_name="message",
            index=models.Index(
                models.F("conversation_id"),
                models.F("tool_name"),
                MD5(Cast("tool_arguments", models.TextField())),
                models.F("id"),
                condition=models.Q(("pinned", False), ("role", "tool")),
                name="assistant_msg_same_call",
            ),
        ),
        # (conversation, id) serves every lookup by conversation: the foreign key's
        # own index goes (the planner took it for the window query, then filtered
        # `id > split` over every row of the conversation).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="message",
                    name="conversation",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="assistant.conversation",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(
                    drop_conversation_index, restore_conversation_index, elidable=False
                ),
            ],
        ),
        _OnPostgreSQL(
            model_name="message",
            index=models.Index(
                condition=models.Q(("role", "assistant")),
                fields=["conversation", "id"],
                name="assistant_msg_answers",
            ),
        ),
        _OnPostgreSQL(
            model_name="message",
            index=models.Index(
                condition=models.Q(("role", "assistant"), ("tool_calls__isnull", True)),
                fields=["conversation", "id"],
                name="assistant_msg_final",
            ),
        ),
    ]
