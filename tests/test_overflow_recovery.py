"""Overflow recovery driven by the providers' real SDK errors: level 1, then
level 2, then one clear exception; no retry that cannot succeed; any other
error passes through untouched."""

from __future__ import annotations

import pytest

from assistant.emergency.levels import ContextTooLarge
from assistant.emergency.retry import call_with_overflow_recovery
from assistant.metadata_keys import held_state
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.providers import context_overflow
from assistant.services import add_message
from tests.fake_llm import fake_llm, ok, overflow, overloaded, raw  # noqa: F401
from tests.host_chat import host_chat
from tests.scenarios import tool_heavy_conversation

pytestmark = pytest.mark.django_db

KIND = {"anthropic": "anthropic.messages", "gemini": "gemini.generate"}


@pytest.fixture(params=["anthropic", "gemini"])
def chat(request, fake_llm, settings):  # noqa: F811
    """The chat call through the real SDK of each provider, pointed at the fake
    server; the summarizer stays offline so only chat calls reach the server."""
    name = request.param
    settings.ANTHROPIC_API_KEY = "test-key-anthropic"
    settings.ANTHROPIC_BASE_URL = fake_llm.url
    settings.GEMINI_API_KEY = "test-key-gemini"
    settings.GEMINI_BASE_URL = fake_llm.url
    settings.LLM_RETRY_INITIAL_DELAY = 0.01
    settings.LLM_RETRY_MAX_DELAY = 0.05
    settings.ASSISTANT_SUMMARIZER = "offline"

    class Chat:
        provider = name
        server = fake_llm

        def script(self, *replies):
            fake_llm.script(KIND[name], *replies)

        @property
        def requests(self):
            return [r.body for r in fake_llm.requests_for(KIND[name])]

        def message_count(self, body) -> int:
            return len(body["messages"] if name == "anthropic" else body["contents"])

        def __call__(self, context):
            return host_chat(
                name, context.system, context.summaries, context.messages, max_tokens=64
            )

    return Chat()


def status(error: BaseException) -> int | None:
    """The HTTP status of the anthropic SDK's or google-genai's error."""
    return getattr(error, "status_code", None) or getattr(error, "code", None)


def overflow_stating(sent: int, limit: int, provider: str):
    """The provider's own overflow error body with other counts."""
    if provider == "anthropic":
        message = f"prompt is too long: {sent} tokens > {limit} maximum"
        body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        message = (
            f"The input token count ({sent}) exceeds the maximum number of tokens allowed "
            f"({limit})."
        )
        body = {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    return raw(400, body)


@pytest.fixture(autouse=True)
def small_windows(settings):
    settings.ASSISTANT_COMPACTION = {"VERBATIM_AFTER_SHIFT": "recent", "MIN_RECENT_MESSAGES": 2}


@pytest.fixture(autouse=True)
def terse_summarizer(monkeypatch):
    """A summarizer whose summaries stay short, so each level's effect on the
    context is the window it keeps (the summarizer is not under test here)."""
    import assistant.providers
    from assistant.providers.base import SummaryResult, Usage

    def summarize(transcript, *, previous_summary=None, instructions=None, provider=None):
        return SummaryResult(
            text="Goal: publish post 42.", usage=Usage(10, 5), model="terse", provider="test"
        )

    monkeypatch.setattr(assistant.providers, "summarize", summarize)


def emergency_kinds(conversation: Conversation) -> list[str]:
    return list(
        CompactionEvent.objects.filter(conversation=conversation, kind__startswith="emergency")
        .order_by("id")
        .values_list("kind", flat=True)
    )


def originals(conversation: Conversation) -> list[tuple[int, str]]:
    return list(conversation.messages.order_by("id").values_list("id", "content"))


def test_level_1_then_a_successful_retry(chat):
    conversation, _rows = tool_heavy_conversation()
    chat.script(overflow(), ok(text="Done."))

    result = call_with_overflow_recovery(conversation, chat)

    assert result.text == "Done."
    assert len(chat.requests) == 2
    assert emergency_kinds(conversation) == [CompactionEvent.Kind.EMERGENCY_1]
    # Sent: all 20 messages, then the last two turns (6) after the summary.
    assert [chat.message_count(body) for body in chat.requests] == [20, 6]


def test_level_1_then_level_2_then_a_clear_error_that_offers_a_fork(chat):
    conversation, _ = tool_heavy_conversation()
    before = originals(conversation)
    chat.script(overflow(), overflow(), overflow())

    with pytest.raises(ContextTooLarge) as raised:
        call_with_overflow_recovery(conversation, chat)

    assert [chat.message_count(body) for body in chat.requests] == [20, 6, 2]
    assert emergency_kinds(conversation) == [
        CompactionEvent.Kind.EMERGENCY_1,
        CompactionEvent.Kind.EMERGENCY_2,
    ]
    error = raised.value
    assert error.conversation_id == conversation.pk
    assert error.levels_applied == (1, 2)
    assert "fork_continuation" in str(error)
    assert "Nothing was lost" in str(error)
    assert context_overflow(error.__cause__)
    assert originals(conversation) == before


def test_level_2_rescues_what_level_1_could_not(chat):
    conversation, _ = tool_heavy_conversation()
    chat.script(overflow(), overflow(), ok(text="Done."))

    assert call_with_overflow_recovery(conversation, chat).text == "Done."

    assert [chat.message_count(body) for body in chat.requests] == [20, 6, 2]
    assert emergency_kinds(conversation) == [
        CompactionEvent.Kind.EMERGENCY_1,
        CompactionEvent.Kind.EMERGENCY_2,
    ]


def test_no_retry_when_no_level_shrinks_the_context(chat):
    conversation = Conversation.objects.create(title="tiny")
    add_message(conversation, "user", "hi")
    chat.script(overflow())

    with pytest.raises(ContextTooLarge) as raised:
        call_with_overflow_recovery(conversation, chat)

    assert len(chat.requests) == 1
    assert raised.value.levels_applied == ()
    assert emergency_kinds(conversation) == []


def test_no_retry_when_the_provider_count_says_the_smaller_context_still_cannot_fit(chat):
    """Sent 2,500,000 tokens to a 200,000 window: level 1 shrinks the context
    from 909 to about 77 estimated tokens (about 212,000 by the provider's
    count), not enough to retry; level 2's about 61 (about 168,000) is."""
    conversation, _ = tool_heavy_conversation()
    chat.script(overflow_stating(2_500_000, 200_000, chat.provider), ok(text="Done."))

    call_with_overflow_recovery(conversation, chat)

    assert [chat.message_count(body) for body in chat.requests] == [20, 2]
    assert emergency_kinds(conversation) == [
        CompactionEvent.Kind.EMERGENCY_1,
        CompactionEvent.Kind.EMERGENCY_2,
    ]


def test_a_non_overflow_error_passes_through_untouched(chat, settings):
    settings.LLM_MAX_RETRIES = 0
    conversation, _ = tool_heavy_conversation()
    before = originals(conversation)
    metadata = held_state(Conversation.objects.get(pk=conversation.pk))
    if chat.provider == "anthropic":
        other = raw(
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "max_tokens: 64000 > 8192, the maximum for this model",
                },
            },
        )
    else:
        other = raw(
            400,
            {
                "error": {
                    "code": 400,
                    "message": "Invalid JSON payload",
                    "status": "INVALID_ARGUMENT",
                }
            },
        )
    chat.script(other, overloaded(), overloaded(), overloaded(), overloaded())

    # The SDK's own error reaches the host, as chat_step's call_model raised it.
    with pytest.raises(Exception) as first:
        call_with_overflow_recovery(conversation, chat)
    with pytest.raises(Exception) as second:
        call_with_overflow_recovery(conversation, chat)

    assert (status(first.value), context_overflow(first.value)) == (400, False)
    assert status(second.value) == (529 if chat.provider == "anthropic" else 503)
    assert not CompactionEvent.objects.filter(conversation=conversation).exists()
    assert Message.objects.filter(conversation=conversation).exclude(compaction="").count() == 0
    assert originals(conversation) == before
    assert held_state(Conversation.objects.get(pk=conversation.pk)) == metadata


def test_a_success_over_the_window_marks_the_conversation(chat):
    conversation, _ = tool_heavy_conversation()
    usage = (
        {"input_tokens": 200_001, "output_tokens": 3}
        if chat.provider == "anthropic"
        else {"promptTokenCount": 1_048_577, "candidatesTokenCount": 3}
    )
    chat.script(ok(text="Done.", usage=usage))

    call_with_overflow_recovery(conversation, chat)

    metadata = held_state(Conversation.objects.get(pk=conversation.pk))
    assert metadata[MetadataKeys.NEEDS_EMERGENCY_COMPACTION] is True
    assert emergency_kinds(conversation) == []
