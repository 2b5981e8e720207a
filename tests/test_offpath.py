"""Summaries off the chat path (issue 22, point 3): inside an agent turn, the
pre-call hook asks the worker for the next window summary and adopts it,
instead of making the user wait on the summarizer."""

from __future__ import annotations

from assistant.models import CompactionEvent, Conversation, MetadataKeys
from assistant.services import add_message, ensure_context_summary, finish_exchange
from tests.builders import html
from tests.conftest import wait_until


def read_step(conversation: Conversation, turn: int, step: int) -> None:
    """The model's answer to one call: a tool call, and its 20 KB result."""
    call = {"id": f"toolu_{turn}_{step}", "name": "fetch", "arguments": {"page": f"{turn}/{step}"}}
    add_message(conversation, "assistant", "", tool_calls=[call])
    add_message(
        conversation, "tool", html(20_000, marker=f"page {turn}/{step} "), tool_call_id=call["id"]
    )


def request(conversation: Conversation) -> dict:
    metadata = Conversation.objects.get(pk=conversation.pk).metadata
    return metadata.get(MetadataKeys.PREBUILD_REQUEST) or {}


def test_inside_a_turn_the_hook_adopts_the_summary_the_worker_built(
    celery_worker, fake_llm, settings
):
    fake_llm.use_anthropic(settings)
    conversation = Conversation.objects.create(title="Audit", system_prompt="You audit a blog.")
    add_message(conversation, "user", "Hello.")
    add_message(conversation, "assistant", "Hello, what shall I audit?")
    finish_exchange(conversation)  # the worker runs the post-exchange task: it serves this one
    assert wait_until(lambda: conversation_metadata(conversation).get(MetadataKeys.WORKER_SEEN_AT))

    add_message(conversation, "user", "Audit every page of the blog.")
    for step in range(24):
        ensure_context_summary(conversation)
        asked = request(conversation)
        if asked and not asked.get("answered"):
            # The model's call takes a while: the worker answers meanwhile.
            assert wait_until(lambda: request(conversation).get("answered"), timeout=30)
        read_step(conversation, 1, step)
    ensure_context_summary(conversation)

    shifts = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    details = [event.details for event in shifts.order_by("id")]
    assert len(details) == 3
    # Every shift adopted what the worker built: no summarizer call on the chat path,
    assert [d.get("prebuilt") for d in details] == [True] * 3
    # and each summary was made once.
    assert fake_llm.count("anthropic.messages") == 3


def conversation_metadata(conversation: Conversation) -> dict:
    return Conversation.objects.get(pk=conversation.pk).metadata
