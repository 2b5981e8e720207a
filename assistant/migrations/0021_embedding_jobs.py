"""The embedding job (issue 53, docs/operations.rst "Semantic recall"): the tokens each
embedding request took per conversation (`EmbeddingUsage`: the conversations' cost and
the day's cap), and the indexes the job reads. The embeddings' own index of the
conversation foreign key goes: assistant_embedding_conv leads with the conversation.
Every index is built or dropped CONCURRENTLY on PostgreSQL, as 0016_scale's are (so the
migration is not atomic); on SQLite, the demo's store, plainly."""

import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class _Concurrently(AddIndexConcurrently):
    """AddIndexConcurrently on PostgreSQL; a plain AddIndex elsewhere (SQLite)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_forwards(
                self, app_label, schema_editor, from_state, to_state
            )

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_backwards(
                self, app_label, schema_editor, from_state, to_state
            )


def drop_conversation_index(apps, schema_editor):
    """The conversation foreign key's own index, by the name Django gave it."""
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'assistant_embedding' "
                "AND indexdef LIKE '%%(conversation_id)'"
            )
            names = [row[0] for row in cursor.fetchall()]
        for name in names:
            schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' "
            "AND tbl_name = 'assistant_embedding' AND sql LIKE '%%(\"conversation_id\")'"
        )
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


def restore_conversation_index(apps, schema_editor):
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(
        f"CREATE INDEX {concurrently}IF NOT EXISTS assistant_embedding_conversation_id_56b50a2a "
        "ON assistant_embedding (conversation_id)"
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("assistant", "0020_cache_break"),
    ]

    operations = [
        migrations.CreateModel(
            name="EmbeddingUsage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("model", models.CharField(max_length=128)),
                ("input_tokens", models.PositiveIntegerField()),
                ("texts", models.PositiveIntegerField(default=0)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "conversation",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="embedding_usage",
                        to="assistant.conversation",
                    ),
                ),
            ],
            options={
                # A new, empty table: its indexes are built with it.
                "indexes": [
                    models.Index(fields=["conversation", "id"], name="assistant_embusage_conv"),
                    models.Index(fields=["created_at"], name="assistant_embusage_day"),
                ],
            },
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="embedding",
                    name="conversation",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="embeddings",
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
        _Concurrently(
            model_name="embedding",
            index=models.Index(
                fields=["model", "source", "source_id"], name="assistant_embedding_model"
            ),
        ),
        _Concurrently(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(
                    ("parent_conversation_summary__isnull", False),
                    ("parent_link", "session"),
                    ("summary_deferred", False),
                ),
                fields=["id"],
                name="assistant_conv_session_summary",
            ),
        ),
    ]
