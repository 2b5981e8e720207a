"""Every real agent conversation of bench/data/real replayed through the
services on PostgreSQL with the default settings, as a chat backend drives
them: the pre-call hook and build_context before each model call, the
assistant message stored with the size of its request, its tool results,
the post-exchange pipeline after each user turn.

No exception; every request (Anthropic and Gemini shapes) starts with a user
message and has no tool call without its result or result without its call;
every original message is stored byte for byte."""

from __future__ import annotations

import pytest
from django.utils import timezone

from assistant import services
from assistant.models import Conversation, Message
from bench.payload import CostMeter, anthropic_problems, gemini_problems
from bench.sessions import SYSTEM_PROMPT, Session, load_sessions

SESSIONS = load_sessions()


def test_every_real_session_is_here():
    assert len(SESSIONS) == 14
    assert sum(s.model_calls for s in SESSIONS) == 579
    assert sum(s.probe_count for s in SESSIONS) == 79


def replay(session: Session) -> tuple[Conversation, list[str]]:
    """The replay; returns the conversation and one line per malformed request."""
    conversation = Conversation.objects.create(title=session.name, system_prompt=SYSTEM_PROMPT)
    problems: list[str] = []
    meter = CostMeter()  # the request's size by the bench's token rule, as a provider reports it
    ends = session.turn_ends()
    for index, message in enumerate(session.messages):
        fields = {}
        if message["role"] == "assistant":
            services.ensure_context_summary(conversation)
            context = services.build_context(conversation)
            anthropic = context.to_anthropic()
            for shape, (broken, bad_start) in (
                ("anthropic", anthropic_problems(anthropic)),
                ("gemini", gemini_problems(context.to_gemini())),
            ):
                if broken or bad_start:
                    problems.append(
                        f"message {index}, {shape}: {broken} broken, bad start {bad_start}"
                    )
            fields["input_tokens"] = meter.record(anthropic).tokens
        if message.get("tool_calls"):
            fields["tool_calls"] = message["tool_calls"]
        if message["role"] == "tool":
            fields["tool_call_id"] = message["tool_call_id"]
        services.add_message(conversation, message["role"], message["content"], **fields)
        if index in ends:
            Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
            services.process_exchange(conversation.pk)
    return conversation, problems


@pytest.mark.django_db
@pytest.mark.parametrize("session", SESSIONS, ids=[s.name for s in SESSIONS])
def test_real_session_replays_with_well_formed_requests_and_every_original_kept(session):
    conversation, problems = replay(session)

    assert problems == []
    stored = list(Message.objects.filter(conversation=conversation).order_by("id"))
    assert len(stored) == len(session.messages)
    for row, original in zip(stored, session.messages, strict=True):
        assert row.role == original["role"]
        assert row.content == original["content"]
        assert [(c["id"], c["name"], c["arguments"]) for c in row.tool_calls or []] == [
            (c["id"], c["name"], c["arguments"]) for c in original.get("tool_calls") or []
        ]
        if original["role"] == "tool":
            assert row.tool_call_id == original["tool_call_id"]
            assert row.tool_name == original["tool_name"]
