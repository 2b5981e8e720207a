"""Semantic recall's store (issue 53): the pgvector extension, the embeddings' vector
column and its HNSW index on real PostgreSQL, and migration 0017_vectors where
CREATE EXTENSION is refused (a database user that is not a superuser)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from assistant.models import Conversation, Embedding
from assistant.recall import (
    ensure_index,
    index_name,
    nearest,
    store_embedding,
    vectors_available,
)

REPO = Path(__file__).resolve().parent.parent


def server_has_pgvector() -> bool:
    """Whether the server lists the extension: `make test` builds it first (make pgvector)."""
    settings = connection.settings_dict
    try:
        with psycopg.connect(
            host=settings["HOST"] or None,
            port=settings["PORT"] or None,
            user=settings["USER"],
            password=settings["PASSWORD"] or None,
            dbname="postgres",
        ) as raw:
            return (
                raw.execute(
                    "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
                ).fetchone()
                is not None
            )
    except psycopg.Error:
        return False


needs_pgvector = pytest.mark.skipif(
    not server_has_pgvector(),
    reason="pgvector is not installed on the test server and `make pgvector` could not build it",
)


@needs_pgvector
@pytest.mark.django_db
def test_migration_creates_the_extension_and_the_vector_column() -> None:
    assert vectors_available()
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert cursor.fetchone() is not None


@needs_pgvector
@pytest.mark.django_db
def test_nearest_embeddings_come_first_through_the_hnsw_index(django_user_model) -> None:
    user = django_user_model.objects.create(username="vectors")
    mine = Conversation.objects.create(user=user)
    other = Conversation.objects.create(user=user)
    ensure_index(3)
    ensure_index(3)  # idempotent
    store_embedding(mine, Embedding.Source.ORIGINAL, 11, "m", [1.0, 0.0, 0.0])
    store_embedding(mine, Embedding.Source.SUMMARY, 12, "m", [0.7, 0.7, 0.0])
    store_embedding(mine, Embedding.Source.ORIGINAL, 13, "m", [0.0, 0.0, 1.0])
    store_embedding(mine, Embedding.Source.ORIGINAL, 14, "other-model", [1.0, 0.0, 0.0])
    store_embedding(other, Embedding.Source.ORIGINAL, 15, "m", [1.0, 0.0, 0.0])
    # Stored again by the same model: replaced, not duplicated.
    store_embedding(mine, Embedding.Source.ORIGINAL, 13, "m", [0.0, 0.1, 1.0])
    assert Embedding.objects.filter(source_id=13).count() == 1

    found = nearest([mine.pk], "m", [0.9, 0.1, 0.0], limit=3)

    assert [(n.source, n.source_id) for n in found] == [
        ("original", 11),
        ("summary", 12),
        ("original", 13),
    ]
    assert found[0].distance < found[1].distance < found[2].distance

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT id FROM assistant_embedding WHERE dimensions = 3 "
            "ORDER BY (vector::vector(3)) <=> '[1,0,0]'::vector(3) LIMIT 5"
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert index_name(3) in plan, plan


@pytest.fixture
def database_without_superuser() -> Iterator[str]:
    """A fresh database owned by a role that is not a superuser (as the README's is)."""
    settings = connection.settings_dict
    name = f"{os.environ.get('TEST_DATABASE_NAME', 'test')}_nosuper"
    role = f"{name}_role"
    admin = psycopg.connect(
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    )
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        admin.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'nosuper' NOSUPERUSER")
        admin.execute(f'CREATE DATABASE "{name}" OWNER "{role}"')
        host = settings["HOST"] or "127.0.0.1"
        port = settings["PORT"] or 5432
        try:
            yield f"postgres://{role}:nosuper@{host}:{port}/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


@needs_pgvector
def test_migrate_without_a_superuser_says_so_in_one_line_and_goes_on(
    database_without_superuser: str,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_"))}
    env |= {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_SECRET_KEY": "vectors-test-key-not-for-any-deployment",
        "DATABASE_URL": database_without_superuser,
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    done = manage("migrate", "--noinput")
    said = [line for line in done.stdout.splitlines() if "pgvector" in line]
    assert len(said) == 1, done.stdout
    print(said[0])
    assert "needs a superuser" in said[0]
    assert "CREATE EXTENSION vector" in said[0] and "psql -d" in said[0]
    with psycopg.connect(database_without_superuser) as own:
        applied = own.execute(
            "SELECT 1 FROM django_migrations WHERE app = 'assistant' AND name = '0017_vectors'"
        ).fetchone()
        assert applied is not None
        assert own.execute("SELECT count(*) FROM assistant_embedding").fetchone() == (0,)
        columns = {
            row[0]
            for row in own.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'assistant_embedding'"
            )
        }
        assert "vector" not in columns and "dimensions" in columns
        assert own.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None

    # What the line says to do: a superuser creates the extension, the migration runs again.
    line = said[0]
    assert "python manage.py migrate assistant 0016_scale && python manage.py migrate" in line
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname=database_without_superuser.rsplit("/", 1)[1],
        autocommit=True,
    ) as superuser:
        superuser.execute("CREATE EXTENSION vector")
    manage("migrate", "assistant", "0016_scale", "--noinput")
    again = manage("migrate", "--noinput")
    assert "pgvector" not in again.stdout
    with psycopg.connect(database_without_superuser) as own:
        assert own.execute(
            "SELECT 1 FROM information_schema.columns "
            "WHERE table_name = 'assistant_embedding' AND column_name = 'vector'"
        ).fetchone()
