"""Fast at production size: the searches, the window and the lookups read through
indexes, whatever the planner's luck, in a database too large to scan (the rows
built through SQL, bench/bulk.py; docs/operations.rst, "Performance at scale")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assistant.cost.pricing import conversation_cost
from assistant.models import Conversation, Message
from assistant.recall import RANKED_MATCHES, run_tool_call
from assistant.services import add_message, prepare_context, process_exchange
from assistant.tool_results.compaction import _consumed_boundary, _with_older_duplicates
from assistant.window.loading import load_window, measure_size
from bench.bulk import COMMON_WORD, NO_MATCH, TWO_WORDS, analyze, insert_messages, rare_token
from tests.scenarios import staff_user
from tests.test_cost import priced_conversation


def plan_of(sql: str, *, analyze: bool = False) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({'ANALYZE, ' if analyze else ''}FORMAT JSON) " + sql)
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


@pytest.mark.slow  # 150,000 rows written and analysed: over 30 s under load
def test_search_history_reads_only_its_indexes_at_30k_messages_among_150k(db):
    long = Conversation.objects.create(title="Long")
    insert_messages(long.pk, 30_000, salt="long")
    for number in range(4):  # the conversation a fifth of the table
        insert_messages(Conversation.objects.create().pk, 30_000, salt=str(number), filler=0)
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
    assert answers["no match"] == (
        f'No stored original matches "{NO_MATCH}".\n'
        "(Searched by words only: no embedding model is configured.)"
    )
    # Full text, then (too few matches) the substring search, each through the
    # conversation's own indexes (the stored document: no to_tsvector per row), never a
    # scan of the table nor an id index walked backwards through the other
    # conversations' rows (this one is the oldest: its rows are the table's first).
    # A word in a third of the conversation: only its newest matches are ranked.
    ranked = [
        node["Plans"][0]["Actual Rows"]
        for sql in statements["common"]
        for node in nodes(plan_of(sql, analyze=True))
        if node["Node Type"] == "Sort" and "ts_rank" in json.dumps(node.get("Sort Key"))
    ]
    assert ranked == [RANKED_MATCHES]
    plans = {shape: [plan_of(sql) for sql in sqls] for shape, sqls in statements.items()}
    assert [len(shape) for shape in plans.values()] == [2, 1, 1, 2, 2]
    for shape, shape_plans in plans.items():
        for plan in shape_plans:
            text = json.dumps(plan)
            assert "Seq Scan" not in text and "to_tsvector" not in text, (shape, plan)
            indexes = {index for _, index in message_reads(plan)}
            assert indexes & {
                "assistant_msg_search",
                "assistant_msg_trgm",
                "assistant_msg_conv_id",
            }, (
                shape,
                plan,
            )
            walked = [n for n in nodes(plan) if n.get("Index Name") == "assistant_message_pkey"]
            assert all("Filter" not in node for node in walked), (shape, plan)


def test_the_window_query_reads_the_window_alone_at_10k_messages_among_100k(db):
    long = Conversation.objects.create(title="Long", system_prompt="You help.")
    # Its rows first, the others' after: `id > split` then looks, to the planner's
    # statistics of the whole table, like most of it (the plan that read all 10k).
    insert_messages(long.pk, 10_000, salt="long", filler=0)
    for number in range(10):
        insert_messages(Conversation.objects.create().pk, 10_000, salt=str(number), filler=0)
    ids = list(
        Message.objects.filter(conversation=long).order_by("id").values_list("id", flat=True)
    )
    Message.objects.filter(pk__in=ids[100:103]).update(pinned=True)
    Message.objects.filter(pk=ids[0]).update(role="system")
    Conversation.objects.filter(pk=long.pk).update(
        compaction_summary="## Goal\n- audit", compaction_through_message_id=ids[-200]
    )
    analyze()

    with CaptureQueriesContext(connection) as queries:
        state = load_window(long.pk)
    with CaptureQueriesContext(connection) as size_queries:
        measure_size(long.pk)

    assert [row.pk for row in state.rows] == ids[-199:]
    assert [row.pk for row in state.pinned_rows] == ids[100:103]
    assert [row.pk for row in state.system_rows] == [ids[0]]
    for sql in (queries[-1]["sql"], size_queries[-1]["sql"]):
        plan = plan_of(sql)
        assert "Seq Scan" not in json.dumps(plan), plan
        # Each part of the window read by an index range of its own: the planner
        # estimates nothing it could get wrong by 10,000 rows.
        reads = [read for read in message_reads(plan) if read[1] is not None]
        assert reads and all(
            kind in ("Index Scan", "Index Only Scan", "Bitmap Index Scan") for kind, _ in reads
        ), plan
        analyzed = nodes(plan_of_analyzed(sql))
        assert all(
            node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0) <= 250
            for node in analyzed
        ), plan

    # The idle path's newest answer, and newest final answer: one index entry each.
    for final_answers_only in (False, True):
        with CaptureQueriesContext(connection) as newest:
            _consumed_boundary(long.pk, final_answers_only=final_answers_only)
        reads = message_reads(plan_of_analyzed(newest[-1]["sql"]))
        name = "assistant_msg_final" if final_answers_only else "assistant_msg_answers"
        assert ("Index Only Scan", name) in reads, reads
        assert all(
            node.get("Actual Rows", 0) <= 1 for node in nodes(plan_of_analyzed(newest[-1]["sql"]))
        )


def plan_of_analyzed(sql: str) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
        row = cursor.fetchone()[0]
    return (json.loads(row) if isinstance(row, str) else row)[0]["Plan"]


def test_the_admin_list_reads_stored_costs_whatever_the_conversations_hold(client, db):
    small, _ = priced_conversation("small")
    big, _ = priced_conversation("big")
    insert_messages(big.pk, 3_000)  # 1,000 recorded calls
    client.force_login(staff_user())

    counts: dict[int, int] = {}

    def listed() -> tuple[dict[int, Any], list[str]]:
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/admin/assistant/conversation/")
        rows = response.context["cl"].result_list
        counts.update({obj.pk: obj._message_count for obj in rows})
        return {obj.pk: obj._cost for obj in rows}, [query["sql"] for query in queries]

    first, _ = listed()  # computes and stores both conversations' figures
    stored, statements = listed()
    # Read as stored: no message's usage is read, no message counted, at most 10 queries.
    assert len(statements) <= 10
    assert not any('"input_tokens"' in sql for sql in statements)
    assert not any("COUNT(" in sql and '"assistant_message"' in sql for sql in statements)
    assert counts[big.pk] == big.messages.count() and counts[small.pk] == small.messages.count()
    assert stored == first
    assert stored[big.pk] == conversation_cost(big)[0]  # the change page's figure
    assert stored[small.pk] == conversation_cost(small)[0]
    assert stored[big.pk].calls == 3 + 1_000

    # A call recorded since: that conversation's figure is computed again, then stored.
    add_message(big, "assistant", "later", input_tokens=50, output_tokens=5)
    after, _ = listed()
    again, statements = listed()
    assert after[big.pk].calls == 3 + 1_000 + 1
    assert counts[big.pk] == big.messages.count()
    assert after == again and again[big.pk] == conversation_cost(big)[0]
    assert not any('"input_tokens"' in sql for sql in statements)


def test_the_duplicate_check_reads_the_latest_result_of_each_call_alone(db):
    long = Conversation.objects.create(title="Long")
    insert_messages(long.pk, 30_000, salt="long", filler=0)  # 200 results of each read
    analyze()
    same = {"path": "src/f7.py"}
    call = {"id": "new1", "name": "read_file", "arguments": same}
    other = {"id": "new2", "name": "read_file", "arguments": {"path": "src/new.py"}}
    add_message(long, "assistant", "", tool_calls=[call, other])
    new = [
        add_message(
            long, "tool", "fresh", tool_call_id="new1", tool_name="read_file", tool_arguments=same
        ),
        add_message(
            long,
            "tool",
            "other",
            tool_call_id="new2",
            tool_name="read_file",
            tool_arguments=other["arguments"],
        ),
    ]
    earlier = Message.objects.filter(conversation=long, tool_arguments=same).exclude(pk=new[0].pk)
    assert earlier.count() == 200

    with CaptureQueriesContext(connection) as queries:
        rows = _with_older_duplicates(long.pk, [Message.objects.get(pk=m.pk) for m in new])

    assert [row.pk for row in rows] == [earlier.order_by("-id")[0].pk, new[0].pk, new[1].pk]
    plan = plan_of_analyzed(queries[-1]["sql"])
    assert {index for _, index in message_reads(plan)} == {"assistant_msg_same_call"}, plan
    # One index entry per call (the newest before the new results), never the 200.
    assert max(node.get("Actual Rows", 0) for node in nodes(plan)) <= 1, plan


def test_a_stored_cost_figure_is_priced_again_when_the_prices_change(client, db):
    conversation, _ = priced_conversation("repriced")
    client.force_login(staff_user())
    page = "/admin/assistant/conversation/"
    before = client.get(page).context["cl"].result_list[0]._cost
    doubled = {"input": 6, "output": 30, "cache_read": 0.6, "cache_write": 7.5}

    with override_settings(ASSISTANT_MODEL_PRICES={"claude-sonnet-4-6": doubled}):
        after = client.get(page).context["cl"].result_list[0]._cost
        assert after == conversation_cost(conversation)[0]

    assert after.chat == pytest.approx(2 * before.chat)
    assert client.get(page).context["cl"].result_list[0]._cost == before


def post_exchange_reads(conversation: Conversation, turns: int = 3) -> tuple[int, int]:
    """The statements of the last of `turns` post-exchange runs, each after an exchange
    reading the same file again (bench/scale.py's), and the most rows any node of
    theirs read from the messages (EXPLAIN ANALYZE, actual rows times loops)."""
    for n in range(turns):
        call = {"id": f"post{n}", "name": "read_file", "arguments": {"path": "src/f7.py"}}
        add_message(conversation, "user", "Read it again.")
        add_message(
            conversation, "assistant", "", tool_calls=[call], input_tokens=2000, output_tokens=10
        )
        add_message(conversation, "tool", "x = 1\n" * 400, tool_call_id=f"post{n}")
        add_message(conversation, "assistant", "Same.", input_tokens=2000, output_tokens=10)
        Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
        with CaptureQueriesContext(connection) as queries:
            assert process_exchange(conversation.pk)
    most = 0
    for query in queries:
        sql = query["sql"]
        select = sql.split(" CURSOR FOR ", 1)[-1] if sql.startswith("DECLARE") else sql
        if not select.startswith("SELECT") or '"assistant_message"' not in select:
            continue
        for node in nodes(plan_of(select, analyze=True)):
            if node.get("Relation Name") == "assistant_message" or "Index Name" in node:
                most = max(most, node.get("Actual Rows", 0) * node.get("Actual Loops", 1))
    return len(queries), most


def test_the_post_exchange_reads_what_is_new_whatever_the_conversation_holds(db):
    sizes = {}
    for size in (235, 6_000):
        conversation = Conversation.objects.create(title=f"{size}", system_prompt="You help.")
        insert_messages(conversation.pk, size, salt=str(size))
        analyze()
        prepare_context(conversation)  # the window as the chat path leaves it
        sizes[size] = post_exchange_reads(conversation)
    (small_statements, small_rows), (long_statements, long_rows) = sizes[235], sizes[6_000]
    # The same statements, and none reads more rows at 6,000 messages than at 235 (the
    # small one's window, all of it; the cost figures read the exchange's messages alone,
    # where they read all 6,012 before).
    assert long_statements == small_statements, sizes
    assert long_rows <= small_rows, sizes
