"""Overflow recovery driven by the providers' real SDK errors: level 1, then
level 2, then one clear exception; no retry that cannot succeed; any other
error passes through untouched."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

from assistant.emergency import ContextTooLarge, call_with_overflow_recovery
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.services import add_message
from tests.scenarios import tool_heavy_conversation

pytestmark = pytest.mark.django_db

MODEL = "claude-test-model"


def overflow(sent: int = 208_310, limit: int = 200_000) -> tuple[int, dict]:
    return 400, {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {sent} tokens > {limit} maximum",
        },
        "request_id": "req_overflow",
    }


def ok(input_tokens: int = 900) -> tuple[int, dict]:
    return 200, {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "Done."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 3},
    }


class ScriptedAnthropic:
    """The Messages API answering from a script, through the real SDK."""

    def __init__(self, *answers: tuple[int, dict]) -> None:
        self.answers = list(answers)
        self.requests: list[dict] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        status, body = self.answers.pop(0)
        return httpx2.Response(status, json=body)

    def call(self, context):
        client = anthropic.Anthropic(
            api_key="test",
            base_url="http://fake.invalid",
            max_retries=0,
            http_client=httpx2.Client(transport=httpx2.MockTransport(self)),
        )
        return client.messages.create(model=MODEL, max_tokens=64, **context.to_anthropic())


@pytest.fixture(autouse=True)
def small_windows(settings):
    settings.ASSISTANT_COMPACTION = {"MIN_RECENT_MESSAGES": 2}


@pytest.fixture(autouse=True)
def terse_summarizer(monkeypatch):
    """A summarizer whose summaries stay short, so each level's effect on the
    context is the window it keeps (the summarizer is not under test here)."""
    import assistant.llm
    from assistant.llm.base import SummaryResult, Usage

    def summarize(transcript, *, previous_summary=None, instructions=None):
        return SummaryResult(
            text="Goal: publish post 42.", usage=Usage(10, 5), model="terse", provider="test"
        )

    monkeypatch.setattr(assistant.llm, "summarize", summarize)


def emergency_kinds(conversation: Conversation) -> list[str]:
    return list(
        CompactionEvent.objects.filter(conversation=conversation, kind__startswith="emergency")
        .order_by("id")
        .values_list("kind", flat=True)
    )


def originals(conversation: Conversation) -> list[tuple[int, str]]:
    return list(conversation.messages.order_by("id").values_list("id", "content"))


def test_level_1_then_a_successful_retry():
    conversation, _ = tool_heavy_conversation()
    provider = ScriptedAnthropic(overflow(), ok())

    response = call_with_overflow_recovery(conversation, provider.call)

    assert response.content[0].text == "Done."
    assert len(provider.requests) == 2
    assert emergency_kinds(conversation) == [CompactionEvent.Kind.EMERGENCY_1]
    # The retry carried the tighter window: the last three turns only.
    assert len(provider.requests[1]["messages"]) < len(provider.requests[0]["messages"])


def test_level_1_then_level_2_then_a_clear_error_that_offers_a_fork():
    conversation, _ = tool_heavy_conversation()
    before = originals(conversation)
    provider = ScriptedAnthropic(overflow(), overflow(), overflow())

    with pytest.raises(ContextTooLarge) as raised:
        call_with_overflow_recovery(conversation, provider.call)

    assert len(provider.requests) == 3
    assert emergency_kinds(conversation) == [
        CompactionEvent.Kind.EMERGENCY_1,
        CompactionEvent.Kind.EMERGENCY_2,
    ]
    error = raised.value
    assert error.conversation_id == conversation.pk
    assert error.levels_applied == (1, 2)
    assert "fork_continuation" in str(error)
    assert "Nothing was lost" in str(error)
    assert isinstance(error.__cause__, anthropic.BadRequestError)
    assert originals(conversation) == before


def test_level_2_rescues_what_level_1_could_not():
    conversation, _ = tool_heavy_conversation()
    provider = ScriptedAnthropic(overflow(), overflow(), ok())

    call_with_overflow_recovery(conversation, provider.call)

    assert len(provider.requests) == 3
    assert len(provider.requests[2]["messages"]) == 2
    assert emergency_kinds(conversation) == [
        CompactionEvent.Kind.EMERGENCY_1,
        CompactionEvent.Kind.EMERGENCY_2,
    ]


def test_no_retry_when_no_level_shrinks_the_context():
    conversation = Conversation.objects.create(title="tiny")
    add_message(conversation, "user", "hi")
    provider = ScriptedAnthropic(overflow())

    with pytest.raises(ContextTooLarge) as raised:
        call_with_overflow_recovery(conversation, provider.call)

    assert len(provider.requests) == 1
    assert raised.value.levels_applied == ()
    assert emergency_kinds(conversation) == []


def test_no_retry_when_the_provider_count_says_the_smaller_context_still_cannot_fit():
    """Sent 3,000,000 tokens to a 200,000 window: level 1 shrinks the context
    from 909 to 104 estimated tokens (about 343,000 by the provider's count),
    not enough to retry; level 2's 46 (about 152,000) is."""
    conversation, _ = tool_heavy_conversation()
    provider = ScriptedAnthropic(overflow(sent=3_000_000), ok())

    call_with_overflow_recovery(conversation, provider.call)

    assert len(provider.requests) == 2
    assert len(provider.requests[1]["messages"]) == 2  # level 2's context
    assert emergency_kinds(conversation) == [
        CompactionEvent.Kind.EMERGENCY_1,
        CompactionEvent.Kind.EMERGENCY_2,
    ]


@pytest.mark.parametrize(
    "answer",
    [
        (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        (
            400,
            {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": "max_tokens: too large"},
            },
        ),
        (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ],
    ids=["rate limit", "other bad request", "overloaded"],
)
def test_a_non_overflow_error_passes_through_untouched(answer):
    conversation, _ = tool_heavy_conversation()
    before = originals(conversation)
    metadata = Conversation.objects.get(pk=conversation.pk).metadata
    provider = ScriptedAnthropic(answer)

    with pytest.raises(anthropic.APIStatusError) as raised:
        call_with_overflow_recovery(conversation, provider.call)

    assert raised.value.status_code == answer[0]
    assert raised.value.body == answer[1]
    assert len(provider.requests) == 1
    assert not CompactionEvent.objects.filter(conversation=conversation).exists()
    assert Message.objects.filter(conversation=conversation).exclude(compaction="").count() == 0
    assert originals(conversation) == before
    assert Conversation.objects.get(pk=conversation.pk).metadata == metadata


def test_a_success_over_the_window_marks_the_conversation():
    conversation, _ = tool_heavy_conversation()
    provider = ScriptedAnthropic(ok(input_tokens=200_001))

    call_with_overflow_recovery(conversation, provider.call, window_tokens=200_000)

    metadata = Conversation.objects.get(pk=conversation.pk).metadata
    assert metadata[MetadataKeys.NEEDS_EMERGENCY_COMPACTION] is True
    assert emergency_kinds(conversation) == []
