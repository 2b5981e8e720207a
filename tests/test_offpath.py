"""Summaries off the chat path: inside an agent turn, the
pre-call hook asks the worker for the next window summary and adopts it,
instead of making the user wait on the summarizer."""

from __future__ import annotations

import json
import time

import pytest
from django.test import override_settings

from assistant.history.queue import PREBUILD_TASK
from assistant.history.state_writes import write_state
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, MetadataKeys
from assistant.services import add_message, context_tokens, ensure_context_summary, finish_exchange
from assistant.settings.conf import compaction_config
from assistant.summary.worker import defer_to_worker
from assistant.window import load_window
from tests.builders import html
from tests.conftest import hung_lease_holder, wait_until
from tests.fake_llm import ok, slow


def read_step(conversation: Conversation, turn: int, step: int) -> None:
    """The model's answer to one call: a tool call, and its 20 KB result."""
    call = {"id": f"toolu_{turn}_{step}", "name": "fetch", "arguments": {"page": f"{turn}/{step}"}}
    add_message(conversation, "assistant", "", tool_calls=[call])
    add_message(
        conversation, "tool", html(20_000, marker=f"page {turn}/{step} "), tool_call_id=call["id"]
    )


def request(conversation: Conversation) -> dict:
    metadata = held_state(Conversation.objects.get(pk=conversation.pk))
    return metadata.get(MetadataKeys.PREBUILD_REQUEST) or {}


def test_inside_a_turn_the_hook_adopts_the_summary_the_worker_built(
    celery_worker, fake_llm, settings
):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {"PREBUILD_IN_TURN": True}
    conversation = Conversation.objects.create(title="Audit", system_prompt="You audit a blog.")
    add_message(conversation, "user", "Hello.")
    add_message(conversation, "assistant", "Hello, what shall I audit?")
    finish_exchange(conversation)  # the worker runs the post-exchange task: it serves this one
    assert wait_until(lambda: conversation_state(conversation).get(MetadataKeys.WORKER_SEEN_AT))

    add_message(conversation, "user", "Audit every page of the blog.")
    for step in range(24):
        ensure_context_summary(conversation)
        asked = request(conversation)
        if asked and not asked.get("answered"):
            # The model's call takes a while: the worker answers meanwhile.
            assert wait_until(lambda: request(conversation).get("answered"), timeout=60)
        read_step(conversation, 1, step)
    ensure_context_summary(conversation)

    shifts = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    details = [event.details for event in shifts.order_by("id")]
    # Two shifts or more: how many depends on the worker's latency and the window's
    # growth rate, which the hook projects the next ask by (both measured, in time).
    assert len(details) >= 2
    # Every shift adopted what the worker built: no summarizer call on the chat path,
    assert [d.get("prebuilt") for d in details] == [True] * len(details)
    # and each summary was made once: one per shift, and one more if it waits, pending,
    # for the next shift.
    pending = load_window(conversation.pk).meta.has_pending_summary
    assert fake_llm.count("anthropic.messages") == len(details) + int(pending)


def conversation_state(conversation: Conversation) -> dict:
    return held_state(Conversation.objects.get(pk=conversation.pk))


@override_settings(ASSISTANT_COMPACTION={"SUMMARY_WAIT_SECONDS": 60, "PREBUILD_IN_TURN": True})
def test_a_shift_waits_for_a_worker_that_does_not_answer_at_most_summary_wait_seconds(
    transactional_db, empty_queues, redis_client
):
    served = Conversation.objects.create(title="served", system_prompt="You help.")
    alone = Conversation.objects.create(title="no worker", system_prompt="You help.")
    for conversation in (served, alone):
        add_message(conversation, "user", "Audit the blog.")
        read_step(conversation, 0, 0)
    merge = {MetadataKeys.WORKER_SEEN_AT: time.time()}
    write_state(Conversation.objects.filter(pk=served.pk), merge)
    config = compaction_config()

    # No worker has ever run this conversation's work: nothing to wait for.
    assert defer_to_worker(load_window(alone.pk), config) is False
    assert redis_client.llen("compaction") == 0
    # A worker serves it: the hook asks once and waits...
    assert defer_to_worker(load_window(served.pk), config) is True
    assert defer_to_worker(load_window(served.pk), config) is True
    assert redis_client.llen("compaction") == 1
    body = json.loads(redis_client.lindex("compaction", 0))
    assert body["headers"]["task"] == PREBUILD_TASK
    assert request(served)["base"] is None
    # ...but no longer than SUMMARY_WAIT_SECONDS: then it summarizes itself. The clock
    # is driven: the request is made to have been asked 61 s ago.
    asked = {**request(served), "at": time.time() - 61}
    write_state(Conversation.objects.filter(pk=served.pk), {MetadataKeys.PREBUILD_REQUEST: asked})
    assert defer_to_worker(load_window(served.pk), config) is False
    # And it is not waited for again until a worker runs this conversation's work.
    assert MetadataKeys.WORKER_SEEN_AT not in conversation_state(served)
    assert defer_to_worker(load_window(served.pk), config) is False
    assert redis_client.llen("compaction") == 1


def served_agent_turn(steps: int) -> Conversation:
    """One user request answered by `steps` page reads (about 5,000 tokens
    each), on a conversation a worker has served."""
    conversation = Conversation.objects.create(title="Audit", system_prompt="You audit a blog.")
    add_message(conversation, "user", "Audit every page of the blog.")
    for step in range(steps):
        read_step(conversation, 0, step)
    write_state(
        Conversation.objects.filter(pk=conversation.pk), {MetadataKeys.WORKER_SEEN_AT: time.time()}
    )
    return conversation


TRIGGER_30K = {"CONTEXT_TOKEN_THRESHOLD": 30_000, "MAX_MESSAGES_BEFORE_SUMMARY": 1000}


@pytest.mark.django_db(transaction=True)
def test_at_the_trigger_a_shift_compaction_made_unneeded_is_left_to_the_worker(
    fake_llm, settings, empty_queues, redis_client
):
    """Past the trigger, compacting the consumed results gets the request under
    it: the shift the trigger calls for is asked of the worker, which is busy
    summarizing. The chat neither waits on it nor summarizes itself."""
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {
        **TRIGGER_30K,
        "SUMMARY_STALL_SECONDS": 60,
        "SUMMARY_CHAT_DEADLINE_SECONDS": 60,
    }
    conversation = served_agent_turn(steps=8)
    assert load_window(conversation.pk).context_tokens() > TRIGGER_30K["CONTEXT_TOKEN_THRESHOLD"]

    with hung_lease_holder(conversation.pk):  # the worker, inside its summarizer call
        started = time.monotonic()
        ensure_context_summary(conversation)
        waited = time.monotonic() - started

    # Waiting on the holder would take a minute (its stall limit and the chat's deadline).
    assert waited < 30.0

    kinds = CompactionEvent.objects.filter(conversation=conversation).values_list("kind", flat=True)
    assert "tool_results" in kinds and "window_summary" not in kinds
    assert fake_llm.count("anthropic.messages") == 0
    assert load_window(conversation.pk).context_tokens() < TRIGGER_30K["CONTEXT_TOKEN_THRESHOLD"]
    # The worker is asked for the summary of the current split, once.
    assert request(conversation) == {"base": None, "at": pytest.approx(time.time(), abs=30)}
    queued = [
        json.loads(body)["headers"]["task"] for body in redis_client.lrange("compaction", 0, -1)
    ]
    assert queued == [PREBUILD_TASK]


@pytest.mark.django_db(transaction=True)
def test_over_the_trigger_after_compaction_the_chat_still_shifts_itself(fake_llm, settings):
    """What compaction cannot bring under the trigger is shifted on the chat
    path whatever the worker does: no request goes over the trigger."""
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {**TRIGGER_30K, "CONTEXT_TOKEN_THRESHOLD": 12_000}
    conversation = served_agent_turn(steps=8)

    ensure_context_summary(conversation)

    kinds = CompactionEvent.objects.filter(conversation=conversation).values_list("kind", flat=True)
    assert "window_summary" in kinds
    assert fake_llm.count("anthropic.messages") == 1
    assert load_window(conversation.pk).context_tokens() < 12_000


def verbatim_pages(conversation: Conversation) -> list[str]:
    """The page reads the next request carries whole (not compacted, not summarized)."""
    rows = load_window(conversation.pk).rows
    return [row.tool_call_id for row in rows if row.role == "tool" and not row.compaction]


@pytest.mark.django_db(transaction=True)
def test_a_prebuild_the_chat_moved_past_is_adopted_without_a_second_shift(fake_llm, settings):
    """The worker builds the summary it was asked for while the chat reads two
    more pages (its summarizer takes a second). The shift adopts it, and the results
    a shift made now would have summarized are compacted in the same rewrite:
    no second summarizer call, and only the newest page stays whole."""
    import threading

    from django.db import connections

    from assistant.summary.worker import serve_prebuild_request

    fake_llm.use_anthropic(settings)
    fake_llm.script_summaries(slow(1, ok(text="The worker's summary.")))
    # A shift keeps only the newest step verbatim; compaction keeps the newest three results.
    # The worker is a live holder: its heartbeat, late on a loaded machine, is not a stall.
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "PREBUILD_IN_TURN": True,
        "MAX_RECENT_TOKENS": 6000,
        "SUMMARY_STALL_SECONDS": 10,
    }
    conversation = served_agent_turn(steps=0)
    step = 0
    while not request(conversation):  # the chat reads pages until the hook asks the worker
        ensure_context_summary(conversation)
        read_step(conversation, 0, step)
        step += 1

    def worker() -> None:
        try:
            serve_prebuild_request(conversation.pk)
        finally:
            connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    assert wait_until(lambda: fake_llm.count("anthropic.messages") == 1, timeout=60)
    for _ in range(2):  # meanwhile the chat goes on
        ensure_context_summary(conversation)
        read_step(conversation, 0, step)
        step += 1
    thread.join(timeout=60)
    shifts = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert not shifts.exists()
    while True:  # until the chat's own decision shifts
        request_before = load_window(conversation.pk).context_tokens()
        events_before = CompactionEvent.objects.filter(conversation=conversation).count()
        ensure_context_summary(conversation)
        if shifts.exists():
            break
        read_step(conversation, 0, step)
        step += 1

    assert [event.details["prebuilt"] for event in shifts] == [True]
    # The shift's event reads the request before that rewrite and after it all, the
    # results it compacted included (not the tool results alone: 22,127 → 21,094
    # while the request fell from 23.7k to 2.2k), and is written after their events.
    rewrite = list(
        CompactionEvent.objects.filter(conversation=conversation).order_by("id")[events_before:]
    )
    assert [event.kind for event in rewrite] == ["tool_results"] * 9 + ["window_summary"]
    assert (rewrite[-1].tokens_before, rewrite[-1].tokens_after) == (
        request_before,
        context_tokens(conversation),
    )
    assert fake_llm.count("anthropic.messages") == 1
    assert verbatim_pages(conversation) == [f"toolu_0_{step - 1}"]
    assert Conversation.objects.get(pk=conversation.pk).compaction_summary.startswith(
        "The worker's summary."
    )


@pytest.mark.django_db(transaction=True)
def test_asked_before_the_split_can_move_the_worker_leaves_the_request_to_be_asked_again(
    fake_llm, settings
):
    """Asked one latency ahead, the worker may find nothing older than the newest
    step to summarize yet: it builds nothing, and the request is not marked
    answered (that would leave the shift to the chat path), so the hook asks
    again once the window grew; the worker's last latency is kept."""
    from assistant.summary.worker import ask_worker_ahead, serve_prebuild_request

    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {"PREBUILD_IN_TURN": True}
    conversation = served_agent_turn(steps=1)  # one step: the split cannot move
    previous = {"base": 0, "answered": True, "took": 3.0}
    write_state(
        Conversation.objects.filter(pk=conversation.pk), {MetadataKeys.PREBUILD_REQUEST: previous}
    )
    assert ask_worker_ahead(load_window(conversation.pk))  # asked for the split it is heading for

    assert serve_prebuild_request(conversation.pk) is False
    assert fake_llm.count("anthropic.messages") == 0
    assert request(conversation) == {"took": 3.0}
    state = load_window(conversation.pk)
    assert ask_worker_ahead(state)  # asked again, with the latency it will project by
    assert request(conversation)["base"] == state.through_id
    assert request(conversation)["took"] == 3.0

    read_step(conversation, 0, 1)  # a second step: the first can be summarized
    assert serve_prebuild_request(conversation.pk) is True
    assert request(conversation)["answered"] is True
    assert load_window(conversation.pk).meta.has_pending_summary
