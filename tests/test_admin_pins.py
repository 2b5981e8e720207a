"""The admin's side of pins and summary instructions through Django's test client: pinning from the
message list (a refusal said, nothing dropped), and the instructions box of the
compact and regenerate actions reaching the summarizer's prompt."""

from __future__ import annotations

import json

import pytest
from django.contrib import messages as django_messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import ValidationError
from django.test import Client, override_settings
from django.urls import reverse

from assistant.models import Message
from assistant.services import add_message, queue_staff_action
from assistant.staff.operations import REGENERATE_SUMMARY
from tests.builders import html
from tests.scenarios import staff_user, tool_heavy_conversation

pytestmark = pytest.mark.django_db

MESSAGES = reverse("admin:assistant_message_changelist")
CONVERSATIONS = reverse("admin:assistant_conversation_changelist")


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(staff_user())
    return client


def flashed(response) -> list[str]:
    return [str(m) for m in django_messages.get_messages(response.wsgi_request)]


@override_settings(ASSISTANT_COMPACTION={"PINNED_MAX_TOKENS": 400})
def test_staff_pin_and_unpin_from_the_message_list(staff_client, conversation):
    small = add_message(conversation, "user", "Always sign as Ada.")
    large = add_message(conversation, "user", "long " * 400)
    response = staff_client.post(
        MESSAGES,
        {"action": "pin_messages", ACTION_CHECKBOX_NAME: [small.pk, large.pk]},
        follow=True,
    )
    said = flashed(response)
    assert any(f"Message {large.pk}:" in m and "PINNED_MAX_TOKENS (400)" in m for m in said)
    assert "1 message(s) pinned." in said
    assert list(Message.objects.filter(pinned=True).values_list("pk", flat=True)) == [small.pk]
    listed = staff_client.get(MESSAGES, {"pinned__exact": "1"})
    assert listed.context["cl"].result_count == 1

    staff_client.post(MESSAGES, {"action": "unpin_messages", ACTION_CHECKBOX_NAME: [small.pk]})
    assert not Message.objects.filter(pinned=True).exists()


@override_settings(ASSISTANT_COMPACTION={"PINNED_MAX_TOKENS": 400})
def test_a_refused_pin_shows_only_its_error(staff_client, conversation):
    """A refused pin is said as a refusal, not as a green "0 message(s) pinned."."""
    large = add_message(conversation, "user", "long " * 400)

    response = staff_client.post(
        MESSAGES, {"action": "pin_messages", ACTION_CHECKBOX_NAME: [large.pk]}, follow=True
    )

    said = [(m.level, str(m)) for m in django_messages.get_messages(response.wsgi_request)]
    assert [level for level, _ in said] == [django_messages.ERROR]
    assert said[0][1].startswith(f"Message {large.pk}: ")
    assert not Message.objects.get(pk=large.pk).pinned


def test_pinning_needs_the_compact_permission(conversation):
    client = Client()
    client.force_login(staff_user("reader", compact=False))
    message = add_message(conversation, "user", "Hello.")
    client.post(MESSAGES, {"action": "pin_messages", ACTION_CHECKBOX_NAME: [message.pk]})
    assert not Message.objects.get(pk=message.pk).pinned


def test_the_regenerate_confirmation_has_an_instructions_box(staff_client):
    conversation, _ = tool_heavy_conversation()
    page = staff_client.post(
        CONVERSATIONS,
        {"action": "regenerate_window_summary", ACTION_CHECKBOX_NAME: [conversation.pk]},
    )
    assert 'name="instructions"' in page.content.decode()


def test_the_compact_actions_instructions_reach_the_summarizer(
    staff_client, conversation, fake_llm, settings
):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {"TOOL_POLICIES": {"search": "summarize"}}
    add_message(conversation, "user", "Search the orders.")
    add_message(
        conversation, "assistant", "", tool_calls=[{"id": "s1", "name": "search", "arguments": {}}]
    )
    add_message(conversation, "tool", html(5_000, marker="ORDERS "), tool_call_id="s1")
    add_message(conversation, "assistant", "Found them.")
    staff_client.post(
        CONVERSATIONS,
        {
            "action": "compact_tool_results_now",
            ACTION_CHECKBOX_NAME: [conversation.pk],
            "post": "yes",
            "instructions": "List every order id first.",
        },
    )
    (request,) = fake_llm.requests
    assert "List every order id first." in json.dumps(request.body)


def test_instructions_too_long_are_refused_before_anything_is_queued(conversation):
    with pytest.raises(ValidationError) as refused:
        queue_staff_action(REGENERATE_SUMMARY, conversation.pk, instructions="x" * 4001)
    assert refused.value.code == "invalid_instructions"


# --- the admin answers bad input with a message or a 400, never a 500 ---------


def test_the_regenerate_action_with_instructions_too_long_says_so_and_queues_nothing(
    staff_client, django_capture_on_commit_callbacks
):
    conversation, _ = tool_heavy_conversation()
    with django_capture_on_commit_callbacks() as enqueued:
        response = staff_client.post(
            CONVERSATIONS,
            {
                "action": "regenerate_window_summary",
                ACTION_CHECKBOX_NAME: [conversation.pk],
                "post": "yes",
                "instructions": "x" * 5000,
            },
            follow=True,
        )
    assert response.status_code == 200
    assert any("instructions must be a text of at most 4000" in m for m in flashed(response))
    assert enqueued == []


def test_the_request_download_in_an_unknown_shape_is_a_400(staff_client, conversation):
    add_message(conversation, "user", "Hello.")
    url = reverse("admin:assistant_conversation_request", args=[conversation.pk])
    response = staff_client.get(url, {"shape": "bogus"})
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_provider"
