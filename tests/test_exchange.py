"""finish_exchange publishes the post-exchange task only after commit, and a
real worker on the real Redis broker runs it."""

import json
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from assistant.history.state_writes import write_state
from assistant.models import Conversation
from assistant.services import add_message, ensure_context_summary, finish_exchange
from tests.conftest import use_broker, wait_until


def queued_tasks(redis_client, queue="compaction"):
    return [json.loads(raw)["headers"]["task"] for raw in redis_client.lrange(queue, 0, -1)]


@pytest.mark.django_db(transaction=True)
def test_it_enqueues_only_after_the_transaction_commits(empty_queues, redis_client):
    conversation = Conversation.objects.create(title="t")

    with transaction.atomic():
        add_message(conversation, "user", "hello")
        finish_exchange(conversation)
        assert queued_tasks(redis_client) == []

    assert queued_tasks(redis_client) == ["assistant.tasks.post_exchange_task"]


@pytest.mark.django_db(transaction=True)
def test_it_enqueues_nothing_when_the_transaction_rolls_back(empty_queues, redis_client):
    conversation = Conversation.objects.create(title="t")

    with pytest.raises(RuntimeError), transaction.atomic():
        add_message(conversation, "user", "hello")
        finish_exchange(conversation)
        raise RuntimeError("the view failed after the exchange")

    assert queued_tasks(redis_client) == []
    assert conversation.messages.count() == 0


def test_a_real_worker_runs_the_post_exchange_task(celery_worker):
    conversation = Conversation.objects.create(title="t")
    add_message(conversation, "user", "hello")

    finish_exchange(conversation)

    def processed():
        conversation.refresh_from_db()
        return conversation.post_exchange_done_at is not None

    assert wait_until(processed)
    assert conversation.post_exchange_done_at == conversation.last_exchange_at


@pytest.mark.django_db(transaction=True)
def test_a_broker_outage_does_not_break_the_exchange(caplog):
    from config.celery import app

    working = app.conf.broker_url
    use_broker("redis://127.0.0.1:1/0")  # nothing listens there
    try:
        conversation = Conversation.objects.create(title="t")
        with transaction.atomic():
            add_message(conversation, "user", "hello")
            finish_exchange(conversation)
    finally:
        use_broker(working)

    conversation.refresh_from_db()
    assert conversation.messages.count() == 1
    assert conversation.last_exchange_at is not None
    assert conversation.post_exchange_done_at is None  # left for the sweep
    assert "enqueue_failed task=assistant.tasks.post_exchange_task" in caplog.text


@pytest.mark.django_db
def test_a_slower_run_of_an_earlier_exchange_does_not_take_back_a_later_ones_stamp(monkeypatch):
    # Two children may run one conversation's tasks at once and end in either
    # order: here the later exchange's run ends inside the earlier one's.
    from assistant.post_exchange import pipeline

    conversation = Conversation.objects.create(title="t")
    add_message(conversation, "user", "hello")
    finish_exchange(conversation)
    conversation.refresh_from_db()
    earlier = conversation.last_exchange_at
    later = earlier + timedelta(seconds=5)
    store_costs = pipeline.store_costs
    runs = []

    def a_later_exchange_ends_meanwhile(ids):
        store_costs(ids)
        if not runs:
            runs.append("later")
            Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=later)
            pipeline.process_exchange(conversation.pk)

    monkeypatch.setattr(pipeline, "store_costs", a_later_exchange_ends_meanwhile)
    pipeline.process_exchange(conversation.pk)

    conversation.refresh_from_db()
    assert runs == ["later"]
    assert conversation.post_exchange_done_at == later == conversation.last_exchange_at


def test_the_worker_compacts_and_deduplicates_the_finished_exchange(celery_worker):
    from assistant.window import stub_text
    from tests.builders import html, tool_turn

    conversation = Conversation.objects.create(title="t")
    first = tool_turn(conversation, "read post 7", [("get_blog_post", {"id": 7}, html(4000))])
    second = tool_turn(conversation, "again", [("get_blog_post", {"id": 7}, html(4000, "v2"))])

    finish_exchange(conversation)

    def processed():
        conversation.refresh_from_db()
        return conversation.post_exchange_done_at is not None

    assert wait_until(processed)
    # Prepared, not applied: the next request still reads what the cache holds.
    view = {m.pk: m for m in conversation.messages.model_view()}
    assert view[first[2].pk].model_content == html(4000)
    assert view[first[2].pk].prepared_compaction == "deduplicated"
    assert view[second[2].pk].prepared_compaction == "truncated"
    assert not conversation.compaction_events.exists()

    # Once the provider's cache has expired, the pre-call hook applies both.
    conversation.messages.update(created_at=timezone.now() - timedelta(minutes=6))
    ensure_context_summary(conversation)

    view = {m.pk: m for m in conversation.messages.model_view()}
    assert view[first[2].pk].model_content == stub_text(first[2].pk)
    assert view[second[2].pk].compaction == "truncated"
    assert conversation.compaction_events.filter(kind="tool_results").count() == 1
    assert conversation.compaction_events.filter(kind="dedup").count() == 1


def test_the_worker_retries_an_overloaded_summarizer_later(celery_worker, fake_llm, settings):
    from tests.builders import chat_turns
    from tests.fake_llm import ok, overloaded

    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    settings.ASSISTANT_PROVIDER_RETRY_SECONDS = 0.1
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "MAX_MESSAGES_BEFORE_SUMMARY": 10,
        "MIN_RECENT_MESSAGES": 2,
        "COMPACTION_TIMING": "eager",  # the worker pre-builds for the count trigger
    }
    summary = (
        "## Goal\n- g\n\n## Constraints\n- none\n\n## Progress\n- none\n\n"
        "## Key decisions\n- none\n\n## Next steps\n- none\n\n## Critical context\n- none"
    )
    # One SDK call is 3 attempts (LLM_MAX_RETRIES = 2): all overloaded, then fine.
    fake_llm.script_summaries(overloaded(), overloaded(), overloaded(), ok(summary))
    conversation = Conversation.objects.create(title="t")
    chat_turns(conversation, 4)  # 8 of 10 messages: past the soft watermark

    finish_exchange(conversation)

    def processed():
        conversation.refresh_from_db()
        return conversation.post_exchange_done_at is not None

    assert wait_until(processed)
    assert fake_llm.count("anthropic.messages") == 4
    assert conversation.pending_summary.startswith(summary)


@pytest.mark.django_db
def test_deliveries_are_capped_per_exchange_not_per_task_id(settings, redis_client, caplog):
    """The sweep re-enqueues under new task ids: the count follows the
    exchange, and a new exchange starts a new count."""
    from assistant.history.deliveries import over_delivery_cap, work_key
    from assistant.history.queue import POST_EXCHANGE_TASK

    settings.ASSISTANT_MAX_TASK_DELIVERIES = 3
    conversation = Conversation.objects.create(title="t")
    finish_exchange(conversation)
    first_key = work_key(POST_EXCHANGE_TASK, conversation.pk)
    redis_client.delete(first_key)

    verdicts = [over_delivery_cap(POST_EXCHANGE_TASK, conversation.pk) for _ in range(4)]
    finish_exchange(conversation)  # the next exchange
    after_new_exchange = over_delivery_cap(POST_EXCHANGE_TASK, conversation.pk)

    assert verdicts == [False, False, False, True]
    assert after_new_exchange is False
    assert work_key(POST_EXCHANGE_TASK, conversation.pk) != first_key
    assert (
        f"event=task_dropped task={POST_EXCHANGE_TASK} conversation_id={conversation.pk} "
        "deliveries=4" in caplog.text
    )
    assert 0 < redis_client.ttl(first_key) <= 7 * 24 * 3600


def test_a_crash_looping_exchange_stops_at_the_cap_whatever_the_task_id(
    celery_worker, settings, redis_client
):
    """Through a real worker: an exchange already delivered to the cap is
    acknowledged without running, even under a fresh task id (as the sweep
    would send it)."""
    from assistant.history.deliveries import work_key
    from assistant.tasks import post_exchange_task

    settings.ASSISTANT_MAX_TASK_DELIVERIES = 2
    conversation = Conversation.objects.create(title="t")
    add_message(conversation, "user", "hello")
    Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
    key = work_key(post_exchange_task.name, conversation.pk)
    redis_client.set(key, 2)

    post_exchange_task.apply_async(args=(conversation.pk,), task_id="a-fresh-id-from-the-sweep")

    # A healthy task queued behind it on the one-at-a-time worker: once it is
    # done, the capped one has been handled too.
    healthy = Conversation.objects.create(title="healthy")
    add_message(healthy, "user", "hello")
    finish_exchange(healthy)

    def healthy_done():
        healthy.refresh_from_db()
        return healthy.post_exchange_done_at is not None

    assert wait_until(healthy_done)
    assert int(redis_client.get(key)) == 3
    conversation.refresh_from_db()
    assert conversation.post_exchange_done_at is None


@pytest.mark.django_db
def test_in_turn_summary_deliveries_are_capped_per_request(settings, redis_client):
    """Each request of the pre-call hook is new work: past the cap one request
    is dropped, and the hook's next request is served again."""
    from assistant.history.deliveries import over_delivery_cap, work_key
    from assistant.history.queue import PREBUILD_TASK
    from assistant.models import MetadataKeys

    settings.ASSISTANT_MAX_TASK_DELIVERIES = 3
    conversation = Conversation.objects.create(title="t")

    def ask() -> str:
        # Stamped as the hook stamps it: the suite's Redis db outlives its database.
        request = {"base": None, "at": time.time()}
        write_state(
            Conversation.objects.filter(pk=conversation.pk),
            {MetadataKeys.PREBUILD_REQUEST: request},
        )
        return work_key(PREBUILD_TASK, conversation.pk)

    first = ask()
    redis_client.delete(first)  # a conversation id of an earlier run of the suite
    verdicts = [over_delivery_cap(PREBUILD_TASK, conversation.pk) for _ in range(4)]
    second = ask()
    next_request = over_delivery_cap(PREBUILD_TASK, conversation.pk)

    assert verdicts == [False, False, False, True]
    assert next_request is False
    assert second != first
