"""Compaction lifecycle events: every compaction, whoever makes it, sends a start
and exactly one end (completed, failed or skipped) with the uuid given at the
start, through `assistant.signals.compaction_event` and, within a step, to
`on_compaction`; `acp_updates` gives them the Agent Client Protocol's shapes."""

from __future__ import annotations

import logging

import anthropic
import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import connections
from django.test import override_settings

from assistant.history import listening
from assistant.models import CompactionEvent, Conversation
from assistant.services import (
    achat_step,
    add_message,
    chat_step,
    ensure_context_summary,
    finish_exchange,
    fork_continuation,
    run_staff_action,
)
from assistant.signals import (
    COMPLETED,
    ENDED,
    FAILED,
    SKIPPED,
    STARTED,
    CompactionNotice,
    acp_updates,
    compaction_event,
)
from tests.builders import chat_turns
from tests.conftest import wait_until
from tests.fake_llm import ok, overflow, overloaded
from tests.scenarios import staff_user, tool_heavy_conversation

MODEL = "claude-sonnet-4-6"
# The count trigger fires at once on a conversation of 10 messages.
SMALL_WINDOW = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "MAX_MESSAGES_BEFORE_SUMMARY": 10,
    "MIN_RECENT_MESSAGES": 4,
    "COMPACTION_TIMING": "eager",
}


@pytest.fixture
def notices():
    """Every compaction_event sent during the test, in order (from any thread)."""
    seen: list[CompactionNotice] = []

    def receive(sender, notice, **kwargs):
        seen.append(notice)

    compaction_event.connect(receive, weak=False)
    yield seen
    compaction_event.disconnect(receive)


def lifecycles(notices: list[CompactionNotice]) -> list[tuple[str, str]]:
    """(kind, status) of each compaction in the order they ended, once every one is
    checked to have one start, then exactly one end, with the same uuid, kind at the
    start and tokens before."""
    starts = {n.compaction_id: n for n in notices if n.phase == STARTED}
    ends = [n for n in notices if n.phase == ENDED]
    assert len(starts) == len(ends) == len(notices) / 2
    assert sorted(starts) == sorted(end.compaction_id for end in ends)
    for end in ends:
        start = starts[end.compaction_id]
        assert notices.index(start) < notices.index(end)
        assert (start.conversation_id, start.tokens_before) == (
            end.conversation_id,
            end.tokens_before,
        )
        assert start.status is None
    return [(end.kind, end.status) for end in ends]


def anthropic_call(fake):
    client = anthropic.Anthropic(api_key="test-key", base_url=fake.url, max_retries=0)
    return lambda request: client.messages.create(model=MODEL, max_tokens=64, **request)


def long_conversation() -> Conversation:
    conversation = Conversation.objects.create(title="long", system_prompt="You help.")
    chat_turns(conversation, 5, size=400)
    add_message(conversation, "user", "And now?")
    return conversation


@pytest.mark.django_db
@override_settings(ASSISTANT_COMPACTION=SMALL_WINDOW)
def test_a_window_shift_on_the_chat_path_starts_and_ends_once(fake_llm, notices):
    conversation = long_conversation()
    fake_llm.script_anthropic(ok("Done."))
    handed: list[CompactionNotice] = []

    step = chat_step(conversation, anthropic_call(fake_llm), on_compaction=handed.append)

    assert step.text == "Done."
    assert lifecycles(notices) == [("window_summary", COMPLETED)]
    event = CompactionEvent.objects.get(conversation=conversation)
    start, end = notices
    assert (start.kind, start.tokens_before) == ("window_summary", event.tokens_before)
    assert (end.event_id, end.tokens_after, end.error) == (event.pk, event.tokens_after, None)
    conversation.refresh_from_db()
    assert end.summary == conversation.compaction_summary
    # Within the step the host's callback got the same two, in the same order.
    assert handed == notices


@pytest.mark.django_db
def test_an_emergency_level_and_its_parts_each_start_and_end_once(fake_llm, notices):
    conversation, _ = tool_heavy_conversation()
    add_message(conversation, "user", "And post 43?")
    fake_llm.script_anthropic(overflow(), ok("Post 43 is fine."))
    handed: list[CompactionNotice] = []

    chat_step(conversation, anthropic_call(fake_llm), on_compaction=handed.append)

    assert lifecycles(notices) == [
        ("tool_results", COMPLETED),
        ("window_summary", COMPLETED),
        ("emergency_1", COMPLETED),
    ]
    events = CompactionEvent.objects.filter(conversation=conversation).order_by("id")
    ends = [n for n in notices if n.phase == ENDED]
    assert [end.event_id for end in ends] == [event.pk for event in events]
    # The level started before its parts did.
    assert notices[0].kind == "emergency_1"
    assert handed == notices


@pytest.mark.django_db
def test_a_failed_summary_ends_failed_with_its_error(fake_llm, settings, notices):
    settings.ASSISTANT_COMPACTION = SMALL_WINDOW
    settings.ASSISTANT_SUMMARY_FALLBACK = False
    fake_llm.use_anthropic(settings)
    conversation = long_conversation()
    fake_llm.script_summaries(overloaded(), overloaded(), overloaded())

    ensure_context_summary(conversation)

    assert lifecycles(notices) == [("window_summary", FAILED)]
    end = notices[1]
    assert (end.error, end.event_id, end.tokens_after, end.summary) == (
        "the summarizer gave no usable summary",
        None,
        None,
        None,
    )
    assert not CompactionEvent.objects.filter(conversation=conversation).exists()


@pytest.mark.django_db
def test_a_staff_action_is_one_compaction_however_many_parts(notices):
    conversation, _ = tool_heavy_conversation()
    staff = staff_user()

    run_staff_action("emergency_1", conversation.pk, staff.pk)

    event = CompactionEvent.objects.get(conversation=conversation)
    assert lifecycles(notices) == [(event.kind, COMPLETED)]
    start, end = notices
    assert start.kind == "emergency_1"
    assert (start.acting_user_id, end.acting_user_id) == (staff.pk, staff.pk)
    assert (end.event_id, end.tokens_before, end.tokens_after) == (
        event.pk,
        event.tokens_before,
        event.tokens_after,
    )


@pytest.mark.django_db
def test_a_staff_action_that_changes_nothing_ends_skipped(notices):
    conversation = Conversation.objects.create(title="short", system_prompt="You help.")
    add_message(conversation, "user", "hi")

    run_staff_action("compact_tool_results", conversation.pk, staff_user().pk)

    assert lifecycles(notices) == [("tool_results", SKIPPED)]


def test_tool_results_compacted_on_the_worker_reach_the_host_through_the_signal_only(
    celery_worker, notices, settings
):
    settings.ASSISTANT_COMPACTION = {"COMPACTION_TIMING": "eager"}
    conversation, _ = tool_heavy_conversation()
    in_this_thread: list[CompactionNotice] = []

    with listening(in_this_thread.append):
        finish_exchange(conversation)
        assert wait_until(lambda: len(notices) >= 2 and notices[-1].phase == ENDED)

    assert lifecycles(notices) == [("tool_results", COMPLETED)]
    event = CompactionEvent.objects.get(conversation=conversation)
    assert notices[1].event_id == event.pk
    assert in_this_thread == []  # a step's callback never hears of the worker's


@pytest.mark.django_db
def test_a_fork_summary_starts_and_ends_once_with_its_summary(notices):
    parent, _ = tool_heavy_conversation()

    fork = fork_continuation(parent, pending_user_message="And the comments?")

    assert lifecycles(notices) == [("fork_summary", COMPLETED)]
    fork.refresh_from_db()
    event = CompactionEvent.objects.get(conversation=fork)
    end = notices[1]
    assert (end.conversation_id, end.event_id) == (fork.pk, event.pk)
    assert end.summary == fork.parent_conversation_summary


@pytest.mark.django_db
def test_a_raising_callback_is_logged_and_loses_no_compaction(fake_llm, notices, caplog):
    conversation, _ = tool_heavy_conversation()
    add_message(conversation, "user", "And post 43?")
    fake_llm.script_anthropic(overflow(), ok("Post 43 is fine."))

    def broken(notice):
        raise RuntimeError("the host's socket closed")

    with caplog.at_level(logging.WARNING, logger="assistant"):
        step = chat_step(conversation, anthropic_call(fake_llm), on_compaction=broken)

    assert step.text == "Post 43 is fine."
    assert [kind for kind, _ in lifecycles(notices)] == [
        "tool_results",
        "window_summary",
        "emergency_1",
    ]
    assert CompactionEvent.objects.filter(conversation=conversation).count() == 3
    assert caplog.text.count("compaction_callback_failed") == 6


@pytest.mark.django_db
def test_chat_step_refuses_a_coroutine_on_compaction_before_the_model_call(fake_llm):
    conversation = long_conversation()
    fake_llm.script_anthropic(ok("paid for"))

    async def on_compaction(notice):
        pass

    with pytest.raises(ValidationError) as raised:
        chat_step(conversation, anthropic_call(fake_llm), on_compaction=on_compaction)

    assert raised.value.code == "async_on_compaction"
    assert fake_llm.count("anthropic.messages") == 0
    assert not CompactionEvent.objects.filter(conversation=conversation).exists()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def closing(anyio_backend):
    """sync_to_async's thread's database connection closed, so the test database drops."""
    yield
    await sync_to_async(connections.close_all)()


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_achat_step_awaits_a_coroutine_on_compaction(fake_llm, closing, notices):
    conversation, _ = await sync_to_async(tool_heavy_conversation)()
    await sync_to_async(add_message)(conversation, "user", "And post 43?")
    fake_llm.script_anthropic(overflow(), ok("Post 43 is fine."))
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake_llm.url, max_retries=0)
    awaited: list[CompactionNotice] = []

    async def on_compaction(notice):
        awaited.append(notice)

    step = await achat_step(
        conversation,
        lambda request: client.messages.create(model=MODEL, max_tokens=64, **request),
        on_compaction=on_compaction,
    )

    assert step.text == "Post 43 is fine."
    assert [kind for kind, _ in lifecycles(notices)] == [
        "tool_results",
        "window_summary",
        "emergency_1",
    ]
    assert awaited == notices


def test_acp_updates_are_the_protocols_compaction_shapes():
    start = CompactionNotice("c-1", 7, STARTED, "window_summary", 9000)
    completed = CompactionNotice(
        "c-1", 7, ENDED, "window_summary", 9000, COMPLETED, 1200, "## Goal\n- fix", None, 3
    )
    failed = CompactionNotice("c-2", 7, ENDED, "window_summary", 9000, FAILED, error="boom")
    skipped = CompactionNotice("c-3", 7, ENDED, "tool_results", 9000, SKIPPED)

    assert acp_updates(start) == [
        {
            "sessionUpdate": "compaction_update",
            "compactionId": "c-1",
            "status": "in_progress",
            "_meta": {"kind": "window_summary", "tokensBefore": 9000},
        }
    ]
    assert acp_updates(completed) == [
        {
            "sessionUpdate": "compaction_summary_chunk",
            "compactionId": "c-1",
            "content": {"type": "text", "text": "## Goal\n- fix"},
        },
        {
            "sessionUpdate": "compaction_update",
            "compactionId": "c-1",
            "status": "completed",
            "_meta": {"kind": "window_summary", "tokensBefore": 9000, "tokensAfter": 1200},
        },
    ]
    assert acp_updates(failed) == [
        {
            "sessionUpdate": "compaction_update",
            "compactionId": "c-2",
            "status": "failed",
            "error": "boom",
            "_meta": {"kind": "window_summary", "tokensBefore": 9000},
        }
    ]
    assert acp_updates(skipped)[0]["status"] == "cancelled"
