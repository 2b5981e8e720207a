"""The recall tools (assistant.recall): a counter of their calls per conversation,
and on PostgreSQL the full-text GIN index search_history queries."""

from django.db import migrations, models

# The expression must match assistant.recall's SearchVector exactly for the planner
# to use it: to_tsvector('simple', COALESCE(LEFT(content, SEARCH_INDEX_CHARS), '')).
# Frozen here (100,000 = assistant.models.SEARCH_INDEX_CHARS when this was written).
CREATE = (
    "CREATE INDEX IF NOT EXISTS assistant_msg_fts ON assistant_message USING gin "
    "(to_tsvector('simple'::regconfig, COALESCE(LEFT(content, 100000), '')))"
)
DROP = "DROP INDEX IF EXISTS assistant_msg_fts"


def _on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("assistant", "0008_window_system_messages"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="recall_count",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        # search_history over a conversation's originals (SQLite, the demo's store,
        # falls back to a plain substring search).
        migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP), elidable=False),
    ]
