"""Every scheduled cleanup query, and the admin's state filters, use an
index on 100,000 conversations (EXPLAIN on real PostgreSQL): none scans the
table, however many conversations there are."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from assistant.cleanup import jobs as cleanup
from assistant.models import Conversation, Message, MetadataKeys
from assistant.settings.cleanup import cleanup_config

CONVERSATIONS = 100_000
K = MetadataKeys

# Shares as in a busy deployment: most conversations are idle and processed.
FILL = f"""
INSERT INTO assistant_conversation (title, metadata, system_prompt, created_at, updated_at,
    deleted_at, last_exchange_at, post_exchange_done_at, summary_lease_token,
    summary_lease_expires_at, parent_conversation_id,
    {K.COMPACTION_SUMMARY}, {K.COMPACTION_THROUGH_MESSAGE_ID},
    {K.PENDING_SUMMARY}, {K.PENDING_THROUGH_MESSAGE_ID},
    {K.SUMMARY_DEFERRED}, {K.NEEDS_EMERGENCY_COMPACTION})
SELECT 'c' || i, '{{}}'::jsonb,
    '', now() - interval '60 days', now() - (i % 5000) * interval '1 minute',
    CASE WHEN i % 50 = 4 THEN now() - interval '40 days' END,
    now() - interval '1 day',
    CASE WHEN i % 100 = 6 THEN NULL ELSE now() - interval '1 day' END,
    CASE WHEN i % 100 = 5 THEN gen_random_uuid() END,
    CASE WHEN i % 100 = 5 THEN now() - interval '1 hour' END,
    NULL,
    CASE WHEN i % 10 = 0 THEN 'Goal: ...' END,
    CASE WHEN i % 10 = 0 THEN i END,
    CASE WHEN i % 100 = 1 THEN 'Goal: ...' END,
    CASE WHEN i % 100 = 1 THEN i END,
    i % 200 = 2,
    i % 1000 = 3
FROM generate_series(1, {CONVERSATIONS}) AS i
"""


# The ids are consecutive (one INSERT), but where they start depends on the tests
# that ran before: the first one has no conversation before it to be forked from.
AFTER_FIRST = "id > (SELECT min(id) FROM assistant_conversation)"


@pytest.fixture
def many_conversations(transactional_db):
    with connection.cursor() as cursor:
        cursor.execute(FILL)
        # A fifth of the conversations are forks that got their summary; the few
        # deferred ones point at a parent too. A tenth of the conversations have a
        # message, a hundredth of those compacted long ago.
        cursor.execute(
            "UPDATE assistant_conversation SET parent_conversation_id = id - 1,"
            f" {K.PARENT_CONVERSATION_SUMMARY} = 'Goal: ...'"
            f" WHERE id % 5 = 3 AND {AFTER_FIRST}"
        )
        cursor.execute(
            "UPDATE assistant_conversation SET parent_conversation_id = id - 1"
            f" WHERE {K.SUMMARY_DEFERRED} AND {AFTER_FIRST}"
        )
    conversations = list(Conversation.objects.order_by("id").values_list("id", flat=True)[::10])
    old = timezone.now() - timedelta(days=400)
    Message.objects.bulk_create(
        Message(
            conversation_id=pk,
            role="tool" if index % 100 == 0 else "user",
            tool_call_id=f"call-{index}",
            content="x" * 50,
            compacted_content="[compacted]" if index % 100 == 0 else None,
            compaction="truncated" if index % 100 == 0 else "",
            compacted_at=old if index % 100 == 0 else None,
        )
        for index, pk in enumerate(conversations)
    )
    with connection.cursor() as cursor:
        # A sample of 300 x 1000 rows reads every row: the same statistics, and so
        # the same plans, on every run.
        cursor.execute("SET default_statistics_target = 1000")
        cursor.execute("ANALYZE assistant_conversation")
        cursor.execute("ANALYZE assistant_message")
        cursor.execute("RESET default_statistics_target")


def scheduled_queries() -> dict[str, tuple[str, object]]:
    """(index that must serve it, queryset) per query, as each job runs it."""
    config = cleanup_config({"DROP_ORIGINALS_RETENTION_DAYS": 90})
    now = timezone.now()
    batch = config.BATCH_SIZE

    def first_batch(queryset):
        return queryset.order_by("id").values_list("id", flat=True)[:batch]

    queries = {
        "purge_deleted": (
            "assistant_conv_deleted",
            first_batch(cleanup.purgeable_conversations(now, config)),
        ),
        "drop_originals": (
            "assistant_msg_compacted",
            first_batch(cleanup.droppable_originals(now, config)),
        ),
        "sweep_missed_exchanges": (
            "assistant_conv_unprocessed",
            first_batch(cleanup.missed_exchanges(now, config).filter(pk__gt=0)),
        ),
        "fork_summaries_missing": (
            "assistant_conv_fork_deferred",
            first_batch(cleanup.forks_missing_summary(now, config).filter(pk__gt=0)),
        ),
        "release_leases": ("assistant_conv_lease", first_batch(cleanup.expired_leases(now))),
        "stale_summaries": (
            "assistant_conv_through",
            first_batch(cleanup.stale_cached_summaries(K.COMPACTION_THROUGH_MESSAGE_ID)),
        ),
        "stale_pending_summaries": (
            "assistant_conv_pending",
            first_batch(cleanup.stale_cached_summaries(K.PENDING_THROUGH_MESSAGE_ID)),
        ),
    }
    return queries


def admin_filters() -> dict[str, tuple[str, object]]:
    from assistant.admin.filters import SummaryFilter

    spec = SummaryFilter(None, {SummaryFilter.parameter_name: ["yes"]}, Conversation, None)
    summarized = spec.queryset(None, Conversation.objects.all()).order_by("-updated_at")[:100]
    return {"admin: has a window summary": ("assistant_conv_summarized", summarized)}


def test_each_scheduled_cleanup_query_and_admin_filter_uses_its_index(many_conversations):
    assert Conversation.objects.count() == CONVERSATIONS
    plans = {
        name: (index, queryset.explain())
        for name, (index, queryset) in {**scheduled_queries(), **admin_filters()}.items()
    }

    report = "\n\n".join(f"{name}:\n{plan}" for name, (_, plan) in plans.items())
    for name, (index, plan) in plans.items():
        assert index in plan, f"{name} does not use {index}:\n{report}"
        assert "Seq Scan" not in plan, f"{name} scans a table:\n{report}"
