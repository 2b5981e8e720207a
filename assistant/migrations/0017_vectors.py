"""Semantic recall (issue 53, docs/operations.rst "Semantic recall"): the embeddings table,
and on PostgreSQL the pgvector extension and the table's `vector` column.

The table is made everywhere (SQLite, the demo's store, included) without the vector
column; on PostgreSQL this migration then creates the extension and adds the column.
CREATE EXTENSION vector needs a superuser: when it fails (or the server has no
pgvector), the migration says so in one line, with the command to run, and goes on;
the vector parts stay off (assistant.recall.vectors.vectors_available) until the
extension exists and the column is added (the line says how)."""

import sys

import django.db.models.deletion
import pgvector.django
from django.db import DatabaseError, migrations, models, transaction

PREVIOUS = "0016_scale"


def _fields(with_vector):
    fields = [
        (
            "id",
            models.BigAutoField(
                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
            ),
        ),
        (
            "source",
            models.CharField(
                choices=[
                    ("summary", "A window summary version"),
                    ("original", "A compacted original"),
                    ("session", "A session summary"),
                ],
                max_length=16,
            ),
        ),
        ("source_id", models.BigIntegerField()),
        ("chunk", models.PositiveSmallIntegerField(default=0)),
        ("model", models.CharField(max_length=128)),
        ("dimensions", models.PositiveSmallIntegerField()),
    ]
    if with_vector:
        fields.append(("vector", pgvector.django.VectorField()))
    fields += [
        ("created_at", models.DateTimeField(auto_now_add=True)),
        (
            "conversation",
            models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="embeddings",
                to="assistant.conversation",
            ),
        ),
    ]
    return fields


def _create(with_vector):
    return migrations.CreateModel(
        name="Embedding",
        fields=_fields(with_vector),
        options={
            "constraints": [
                models.UniqueConstraint(
                    fields=("source", "source_id", "chunk", "model"),
                    name="assistant_embedding_once",
                )
            ],
            "indexes": [
                models.Index(fields=["conversation", "model"], name="assistant_embedding_conv")
            ],
        },
    )


def extension_ready(connection):
    """True when the vector extension exists in this database (created here if it can be);
    otherwise one line on stdout saying why and what to run, and False."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        if cursor.fetchone():
            return True
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        installed = cursor.fetchone() is not None
        database = connection.settings_dict["NAME"]
        then = f"then: python manage.py migrate assistant {PREVIOUS} && python manage.py migrate"
        if not installed:
            sys.stdout.write(
                "\n  pgvector: semantic search is off: this PostgreSQL server has no pgvector "
                "(install it: `make pgvector`, or the postgresql-NN-pgvector package), "
                f"{then}\n"
            )
            return False
        try:
            with transaction.atomic(using=connection.alias):
                cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except DatabaseError:
            sys.stdout.write(
                "\n  pgvector: semantic search is off: CREATE EXTENSION vector needs a superuser; "
                f"as one, run: psql -d {database} -c 'CREATE EXTENSION vector', {then}\n"
            )
            return False
    return True


def add_vector_column(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or not extension_ready(connection):
        return
    with connection.cursor() as cursor:
        # The table is new (or, migrated again after the extension came, empty).
        cursor.execute(
            "ALTER TABLE assistant_embedding ADD COLUMN IF NOT EXISTS vector vector NOT NULL"
        )


class Migration(migrations.Migration):
    dependencies = [("assistant", PREVIOUS)]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[_create(with_vector=True)],
            database_operations=[
                _create(with_vector=False),
                migrations.RunPython(add_vector_column, migrations.RunPython.noop),
            ],
        )
    ]
