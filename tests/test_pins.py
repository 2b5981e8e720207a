"""Pinned messages: a pinned message is in every request, verbatim,
through a long agent loop past the trigger, driven by the real anthropic SDK
against the testing kit's fake server (the summarizer at a second fake server);
it is never compacted, stubbed or summarized away, a pinned tool result keeps
its call, and the pins' budget refuses a pin past it with a clear error."""

from __future__ import annotations

import json

import anthropic
import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.test import override_settings

from assistant.models import CompactionEvent, Message
from assistant.services import (
    add_message,
    build_context,
    chat_step,
    compact_tool_results,
    emergency_compact,
    pin_message,
    regenerate_window_summary,
)
from assistant.settings.conf import validated_config
from assistant.testing.fake_provider import FakeProvider
from tests.builders import html
from tests.fake_llm import ok

pytestmark = pytest.mark.django_db

TOOLS = [
    {
        "name": "get_blog_post",
        "description": "A post by id, as HTML.",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
    }
]
SMALL_TRIGGER = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "CONTEXT_TOKEN_THRESHOLD": 12_000,
    "MAX_RECENT_TOKENS": 4_000,
    "MAX_MESSAGES_BEFORE_SUMMARY": 1_000,
    # A loaded machine must not push the summaries to the offline fallback.
    "SUMMARY_CHAT_DEADLINE_SECONDS": 300,
}
RULE = "Never publish on a Sunday; the editor's sign-off code is heron-7731."


def _request_text(request) -> str:
    return json.dumps(request.body, ensure_ascii=False)


def test_a_pinned_user_message_is_in_every_request_of_a_40_step_tool_loop(
    conversation, fake_llm, settings
):
    settings.ASSISTANT_COMPACTION = SMALL_TRIGGER
    fake_llm.use_anthropic(settings)  # the summarizer: every unscripted answer a summary
    chat = FakeProvider().start()
    try:
        client = anthropic.Anthropic(api_key="test-key", base_url=chat.url, max_retries=0)

        def call_model(request):
            return client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, **request)

        rule = add_message(conversation, "user", RULE)
        assert pin_message(conversation, rule.pk).pinned
        chat.script_anthropic(ok("Understood."))
        chat_step(conversation, call_model, tools=TOOLS)
        add_message(conversation, "user", "Audit posts 1 to 40 and fix their titles.")
        chat.script_anthropic(
            *(
                ok(tool_calls=[{"name": "get_blog_post", "arguments": {"id": n}}])
                for n in range(40)
            ),
            ok("All 40 posts audited."),
        )
        steps = 0
        while True:
            step = chat_step(conversation, call_model, tools=TOOLS)
            steps += 1
            if not step.tool_calls:
                break
            for call in step.tool_calls:
                page = html(4_000, marker=f"post {call['arguments']['id']} ")
                add_message(conversation, "tool", page, tool_call_id=call["id"])
        requests = chat.requests_for("anthropic.messages")
    finally:
        chat.stop()

    assert steps == 41
    assert len(requests) == 42
    assert all(RULE in _request_text(request) for request in requests)
    # The loop went past the trigger: the window shifted past the pinned message,
    # which then rode in the pinned section at the top, byte for byte the same.
    assert CompactionEvent.objects.filter(
        conversation=conversation, kind=CompactionEvent.Kind.WINDOW_SUMMARY
    ).exists()
    in_section = [r for r in requests if RULE in json.dumps(r.body["system"], ensure_ascii=False)]
    assert in_section, "the window never moved past the pinned message"
    assert all(RULE not in json.dumps(r.body["messages"]) for r in in_section)
    sections = {
        next(block["text"] for block in r.body["system"] if RULE in block["text"])
        for r in in_section
    }
    assert len(sections) == 1
    # The summarizer was asked, and the pinned message is still the original.
    assert fake_llm.count("anthropic.messages") >= 1
    assert Message.objects.get(pk=rule.pk).compacted_content is None


def test_a_pinned_tool_result_is_never_compacted_and_keeps_its_call(conversation):
    add_message(conversation, "user", "Read the style guide.")
    add_message(
        conversation,
        "assistant",
        "",
        tool_calls=[{"id": "g1", "name": "read_guide", "arguments": {"part": "titles"}}],
    )
    guide = add_message(conversation, "tool", html(6_000, marker="GUIDE "), tool_call_id="g1")
    add_message(conversation, "assistant", "Read it.")
    add_message(conversation, "user", "Now fix post 9.")
    add_message(conversation, "assistant", "Fixed.")
    with override_settings(ASSISTANT_COMPACTION={"PINNED_MAX_TOKENS": 5_000}):
        pin_message(conversation, guide.pk)
        assert compact_tool_results(conversation, include_current_turn=True) == 0
        emergency_compact(conversation, level=1)
        regenerate_window_summary(conversation, keep_last=2)
    stored = Message.objects.get(pk=guide.pk)
    assert stored.compacted_content is None and stored.prepared_content is None
    context = build_context(conversation)
    assert context.cutoff_id is not None and context.cutoff_id > guide.pk
    # Past the split, the result rides verbatim in the pinned section, naming its call.
    assert guide.content in context.pinned
    assert 'result of read_guide({"part": "titles"})' in context.pinned
    assert guide.content in json.dumps(context.to_anthropic()["system"])


def test_pinning_a_compacted_message_brings_its_original_back(conversation):
    add_message(conversation, "user", "Fetch the feed.")
    add_message(
        conversation, "assistant", "", tool_calls=[{"id": "f1", "name": "fetch", "arguments": {}}]
    )
    feed = add_message(conversation, "tool", html(8_000, marker="FEED "), tool_call_id="f1")
    add_message(conversation, "assistant", "Fetched.")
    add_message(conversation, "user", "Thanks.")
    add_message(conversation, "assistant", "You're welcome.")
    assert compact_tool_results(conversation) == 1
    assert Message.objects.get(pk=feed.pk).compacted_content is not None
    with override_settings(ASSISTANT_COMPACTION={"PINNED_MAX_TOKENS": 5_000}):
        stored = pin_message(conversation, feed.pk)
    assert stored.pinned and stored.compacted_content is None
    assert stored.token_estimate == stored.original_token_estimate
    sent = build_context(conversation).messages
    assert any(m.get("content") == feed.content for m in sent)


def test_a_pin_past_the_budget_is_refused_and_nothing_is_dropped(conversation):
    first = add_message(conversation, "user", "word " * 300)
    second = add_message(conversation, "user", "other " * 300)
    with override_settings(ASSISTANT_COMPACTION={"PINNED_MAX_TOKENS": 500}):
        pin_message(conversation, first.pk)
        with pytest.raises(ValidationError) as refused:
            pin_message(conversation, second.pk)
    assert refused.value.code == "pin_budget_exceeded"
    assert "PINNED_MAX_TOKENS (500)" in refused.value.messages[0]
    assert list(
        Message.objects.filter(conversation=conversation, pinned=True).values_list("pk", flat=True)
    ) == [first.pk]
    # Unpinning frees the room.
    with override_settings(ASSISTANT_COMPACTION={"PINNED_MAX_TOKENS": 500}):
        assert not pin_message(conversation, first.pk, pinned=False).pinned
        assert pin_message(conversation, second.pk).pinned


@pytest.mark.parametrize(
    ("message_id", "code"),
    [("12", "invalid_message_id"), (10**9, "message_not_found")],
)
def test_a_bad_pin_is_a_clear_error(conversation, message_id, code):
    with pytest.raises(ValidationError) as refused:
        pin_message(conversation, message_id)
    assert refused.value.code == code


def test_a_system_message_is_not_pinned(conversation):
    system = add_message(conversation, "system", "Dates as ISO 8601.")
    with pytest.raises(ValidationError) as refused:
        pin_message(conversation, system.pk)
    assert refused.value.code == "system_message"


def test_pinned_max_tokens_is_checked_at_start_up_against_the_trigger():
    with pytest.raises(ImproperlyConfigured, match="PINNED_MAX_TOKENS"):
        validated_config({"CONTEXT_TOKEN_THRESHOLD": 10_000, "PINNED_MAX_TOKENS": 6_000})
    assert validated_config({"PINNED_MAX_TOKENS": 29_999}).PINNED_MAX_TOKENS == 29_999
    # Unwritten, it follows the room the trigger leaves.
    assert validated_config({}).PINNED_MAX_TOKENS == 4_000
    assert validated_config({"CONTEXT_TOKEN_THRESHOLD": 10_000}).PINNED_MAX_TOKENS == 800
