"""A host that records the provider's usage wrongly cannot switch compaction
off: a count far below the app's own estimate of the
request it built is logged once and replaced by the estimate."""

from __future__ import annotations

import logging

import anthropic
import pytest
from django.test import override_settings

from assistant.admin.listing import with_list_figures
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.services import add_message, build_context, ensure_context_summary
from assistant.window import load_window
from tests.builders import html
from tests.fake_llm import ok

pytestmark = pytest.mark.django_db

TRIGGER = 50_000


def chat_turn(client, fake, conversation, sizes: list, turn: int, over: list) -> int:
    """One user turn of an agent loop through the real anthropic SDK: three
    tool calls reading 20 KB pages, then the answer (4 model calls). The host
    records `usage.input_tokens` alone, though its requests carry cache
    breakpoints, so every cached token is left out of the count. Returns the
    largest input_tokens it recorded."""
    add_message(conversation, "user", f"Audit the posts of section {turn}.")
    largest_count = 0
    for step in range(4):
        ensure_context_summary(conversation)
        context = build_context(conversation)
        payload = context.to_anthropic()
        tokens = context.tokens.total  # the app's own estimate of the request
        sizes.append(tokens)
        calls = (
            []
            if step == 3
            else [
                {
                    "id": f"toolu_{turn}_{step}",
                    "name": "fetch",
                    "arguments": {"url": f"/posts/{turn}/{step}"},
                }
            ]
        )
        fake.script_anthropic(
            ok(
                text=f"Section {turn} audited." if step == 3 else None,
                tool_calls=calls,
                usage={
                    "input_tokens": 3 + (turn * 4 + step) % 64,
                    "cache_read_input_tokens": max(tokens - 2_000, 0),
                    "cache_creation_input_tokens": 1_900,
                    "output_tokens": 40,
                },
            )
        )
        response = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, **payload)
        text = "".join(block.text for block in response.content if block.type == "text")
        tool_calls = [
            {"id": block.id, "name": block.name, "arguments": block.input}
            for block in response.content
            if block.type == "tool_use"
        ]
        # A host's likely mistake: "prompt tokens" read as usage.input_tokens (the uncached part).
        add_message(
            conversation,
            "assistant",
            text,
            tool_calls=tool_calls,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
        )
        largest_count = max(largest_count, response.usage.input_tokens)
        for call in tool_calls:
            add_message(
                conversation,
                "tool",
                html(20_000, marker=f"post {turn}.{step} "),
                tool_call_id=call["id"],
            )
            newest = build_context(conversation).tokens.total - tokens
            if tokens > TRIGGER + newest:
                over.append((turn, step, tokens))
    return largest_count


@override_settings(ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": TRIGGER})
def test_usage_input_tokens_alone_under_caching_still_compacts_at_the_trigger(
    conversation, fake_llm, caplog
):
    client = anthropic.Anthropic(api_key="test-key", base_url=fake_llm.url, max_retries=0)
    sizes: list[int] = []
    over: list = []
    caplog.set_level(logging.WARNING, logger="assistant.precall.hook")

    largest_count = max(
        chat_turn(client, fake_llm, conversation, sizes, turn, over) for turn in range(16)
    )

    # What the host passed: 3 to 66 tokens for requests of tens of thousands.
    assert largest_count == 66
    naive = sum(
        Message.objects.filter(conversation=conversation).values_list(
            "original_token_estimate", flat=True
        )
    )
    assert naive == 241_120  # sending everything: about five triggers' worth
    # Compaction ran: the window shifted (at least once per trigger's worth
    # of messages), and no request went over the trigger plus its newest step.
    shifts = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert shifts.count() >= naive // TRIGGER
    assert over == []
    # Logged once for the conversation, with its id and figures, and no content.
    warnings = [r for r in caplog.records if r.getMessage().startswith("implausible_usage")]
    assert len(warnings) == 1
    assert f"conversation={conversation.pk} prompt_tokens=" in warnings[0].getMessage()
    assert "post 0" not in warnings[0].getMessage()
    metadata = held_state(Conversation.objects.get(pk=conversation.pk))
    assert metadata[MetadataKeys.IMPLAUSIBLE_USAGE_WARNED] is True
    # The implausible counts never became the conversation's token ratio.
    assert MetadataKeys.TOKEN_RATIO not in metadata


@pytest.mark.parametrize(("reported", "plausible"), [(9, False), (6_000, True)])
def test_the_admin_list_sizes_the_context_by_the_same_rule(conversation, reported, plausible):
    add_message(conversation, "user", "Fetch the front page.")
    call = {"id": "toolu_1", "name": "fetch", "arguments": {"url": "/"}}
    add_message(conversation, "assistant", "", tool_calls=[call], input_tokens=4)
    add_message(conversation, "tool", html(20_000, marker="front "), tool_call_id="toolu_1")
    answer = add_message(conversation, "assistant", "It lists 12 posts.", input_tokens=reported)

    state = load_window(conversation.pk)
    listed = with_list_figures(Conversation.objects.filter(pk=conversation.pk)).get()

    expected = reported + answer.token_estimate if plausible else state.estimated_tokens()
    assert state.context_tokens() == expected
    assert listed.context_tokens == expected
