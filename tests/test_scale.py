"""Fast at production size: the searches, the window and the lookups read through
indexes, whatever the planner's luck, in a database too large to scan (the rows
built through SQL, bench/bulk.py; docs/operations.rst, "Performance at scale")."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from assistant.models import Conversation
from assistant.recall import run_tool_call
from bench.bulk import COMMON_WORD, NO_MATCH, TWO_WORDS, analyze, insert_messages, rare_token


def plan_of(sql: str) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        row = cursor.fetchone()[0]
    return (json.loads(row) if isinstance(row, str) else row)[0]["Plan"]


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", ()) for node in nodes(child))]


def message_reads(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """How each node reading assistant_message reads it: (node type, index)."""
    return [
        (node["Node Type"], node.get("Index Name"))
        for node in nodes(plan)
        if node.get("Relation Name") == "assistant_message" or "Index Name" in node
    ]


def test_search_history_reads_only_its_indexes_at_30k_messages(db):
    long = Conversation.objects.create(title="Long")
    other = Conversation.objects.create(title="Other")
    insert_messages(long.pk, 30_000, salt="long")
    insert_messages(other.pk, 30_000, salt="other")
    analyze()
    rare = rare_token("long", 12_345)
    searches = {
        "rare": rare,
        "common": COMMON_WORD,
        "two words": TWO_WORDS,
        "no match": NO_MATCH,
        "substring": rare[4:20],  # inside a token: only the substring search finds it
    }

    answers, statements = {}, {}
    for shape, query in searches.items():
        with CaptureQueriesContext(connection) as queries:
            answers[shape] = run_tool_call(long, "search_history", {"query": query})
        statements[shape] = [q["sql"] for q in queries if "@@" in q["sql"] or " ILIKE " in q["sql"]]

    assert answers["rare"].startswith(f'1 match for "{rare}"')
    assert answers["substring"].startswith(f'1 match for "{rare[4:20]}"')
    assert answers["common"].startswith(f'8 matches for "{COMMON_WORD}"')
    assert answers["two words"].startswith(f'8 matches for "{TWO_WORDS}"')
    assert answers["no match"] == f'No stored original matches "{NO_MATCH}".'
    # Full text, then (too few matches) the substring search: both through their
    # GIN index, which holds the conversation too; never a scan of its rows.
    # Full text, then (too few matches) the substring search, each through its GIN
    # index (the stored document: no to_tsvector per row) and never a scan of the
    # table. A word in a third of the conversation may be read from the conversation's
    # rows instead (the planner's choice, as cheap: every match is ranked anyway).
    plans = {shape: [plan_of(sql) for sql in sqls] for shape, sqls in statements.items()}
    assert [len(shape) for shape in plans.values()] == [2, 1, 1, 2, 2]
    for shape, shape_plans in plans.items():
        for plan in shape_plans:
            text = json.dumps(plan)
            assert "Seq Scan" not in text and "to_tsvector" not in text, (shape, plan)
            if shape != "common":
                indexes = {index for _, index in message_reads(plan)}
                assert indexes & {"assistant_msg_search", "assistant_msg_trgm"}, (shape, plan)
