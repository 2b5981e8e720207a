"""The hard ceiling (CONTEXT_CEILING_FRACTION of the answering model's window less its
output cap): no request goes over it, whatever CONTEXT_TOKEN_THRESHOLD says, and
below the trigger MAX_RECENT_TOKENS and PINNED_MAX_TOKENS follow it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from assistant.models import Conversation
from assistant.providers import send_bound
from assistant.services import add_message, build_context, ensure_context_summary
from assistant.settings.conf import compaction_config
from assistant.window import conversation_config, current_limits, limits_for
from tests.builders import html

pytestmark = pytest.mark.django_db

# A model the catalog does not list: its window is ASSISTANT_DEFAULT_CONTEXT_WINDOW
# with no output cap, here a small one.
SMALL_MODEL = "tiny-16k"
SMALL_WINDOW = 16_000


def test_the_ceiling_is_the_fraction_of_the_window_less_the_output_cap(settings):
    settings.ASSISTANT_COMPACTION = {"CONTEXT_TOKEN_THRESHOLD": 150_000}
    limits = limits_for("anthropic", "claude-sonnet-4-5")
    ceiling = int(0.8 * send_bound("claude-sonnet-4-5", "anthropic"))
    assert limits.bound == ceiling
    assert limits.trigger == ceiling < 150_000  # the ceiling wins over the cost trigger
    settings.ASSISTANT_COMPACTION = {}
    assert limits_for("anthropic", "claude-sonnet-4-5").trigger == 50_000  # under it


def test_below_the_trigger_the_recent_window_and_the_pins_follow_the_ceiling(settings):
    settings.ASSISTANT_DEFAULT_CONTEXT_WINDOW = SMALL_WINDOW
    conversation = Conversation.objects.create(title="small", system_prompt="You help.")
    add_message(conversation, "user", "Hi")
    add_message(conversation, "assistant", "Hello.", provider="anthropic", model=SMALL_MODEL)
    config = conversation_config(conversation.pk)
    defaults = compaction_config()
    assert int(0.8 * SMALL_WINDOW) == config.CONTEXT_TOKEN_THRESHOLD
    share = config.CONTEXT_TOKEN_THRESHOLD / defaults.CONTEXT_TOKEN_THRESHOLD
    assert int(defaults.MAX_RECENT_TOKENS * share) == config.MAX_RECENT_TOKENS
    assert int(defaults.PINNED_MAX_TOKENS * share) == config.PINNED_MAX_TOKENS
    assert current_limits(conversation.pk).trigger == config.CONTEXT_TOKEN_THRESHOLD


def test_before_the_first_answer_the_configured_chat_model_answers(settings):
    settings.ASSISTANT_DEFAULT_CONTEXT_WINDOW = SMALL_WINDOW
    settings.ASSISTANT_SUMMARIZER = "anthropic"
    settings.ANTHROPIC_CHAT_MODEL = SMALL_MODEL
    conversation = Conversation.objects.create(title="new", system_prompt="You help.")
    add_message(conversation, "user", "Hi")
    assert current_limits(conversation.pk).model == SMALL_MODEL
    assert int(0.8 * SMALL_WINDOW) == conversation_config(conversation.pk).CONTEXT_TOKEN_THRESHOLD


@pytest.mark.parametrize("fraction", [0, 1.5, "0.8"])
def test_a_fraction_out_of_range_is_refused(settings, fraction):
    settings.ASSISTANT_COMPACTION = {"CONTEXT_CEILING_FRACTION": fraction}
    with pytest.raises(ImproperlyConfigured, match="CONTEXT_CEILING_FRACTION"):
        compaction_config()


@pytest.mark.parametrize(
    ("provider", "model", "trigger"),
    [
        ("anthropic", SMALL_MODEL, 50_000),
        ("anthropic", SMALL_MODEL, 200_000),
        ("openai", "gpt-3.5-turbo", 50_000),  # the catalog's: 16,385 less 4,096
    ],
)
def test_a_small_window_models_requests_stay_under_its_ceiling_above_the_trigger(
    conversation, settings, provider, model, trigger
):
    settings.ASSISTANT_DEFAULT_CONTEXT_WINDOW = SMALL_WINDOW
    settings.ASSISTANT_COMPACTION = {"CONTEXT_TOKEN_THRESHOLD": trigger}
    settings.ASSISTANT_SUMMARIZER = "offline"
    ceiling = int(0.8 * send_bound(model, provider))
    add_message(conversation, "user", "Read every module and report.")
    largest = 0
    for index in range(40):
        ensure_context_summary(conversation)
        context = build_context(conversation)
        payload = context.to_anthropic()  # validated: every call paired with its result
        assert payload["messages"][0]["role"] == "user"
        largest = max(largest, context.tokens.total)
        call = {"id": f"toolu_{index}", "name": "Read", "arguments": {"path": f"/f{index}.py"}}
        add_message(
            conversation,
            "assistant",
            f"Reading f{index}.",
            tool_calls=[call],
            provider=provider,
            model=model,
        )
        add_message(
            conversation, "tool", html(3000, marker=f"file {index} "), tool_call_id=call["id"]
        )
    assert 0.5 * ceiling < largest <= ceiling
