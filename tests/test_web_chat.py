"""The demo's web chat through its real views (Django's test client): the typed
commands /new, /clear, /resume and /status, editing a user message (a branch) and
flipping between its branches ("< 2/3 >"), summarizing before or after a message, and
the stream's compaction events."""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from assistant.models import Conversation, Message
from assistant.services import add_message, conversation_tree
from demo import web_chat
from tests.builders import chat_turns
from tests.fake_llm import ok

pytestmark = pytest.mark.django_db


def page(conversation: Conversation) -> str:
    return f"/chat/{conversation.pk}/"


def command(client: Client, conversation: Conversation, text: str) -> dict:
    response = client.post(f"{page(conversation)}send", {"text": text})
    assert response.status_code == 200
    return response.json()


def chat() -> Conversation:
    conversation = Conversation.objects.create(title="Release notes", system_prompt="You help.")
    add_message(conversation, "user", "The release codename is juniper-fox.")
    add_message(conversation, "assistant", "Noted: juniper-fox.")
    return conversation


def gone_to(answer: dict) -> Conversation:
    (pk,) = re.fullmatch(r"/chat/(\d+)/", answer["go"]).groups()
    return Conversation.objects.get(pk=pk)


def test_the_typed_commands_start_clear_resume_and_report_sessions():
    first = chat()
    client = Client()
    stored = Message.objects.count()

    status = command(client, first, "/status")["status"]
    assert re.fullmatch(
        r"\d+ tokens of 50,000 before compaction \(\d+\.\d% of claude-sonnet-4-6's window\), "
        r"0 summaries, 0 compactions\.",
        status,
    )

    second = gone_to(command(client, first, "/new"))
    assert (second.parent_conversation_id, second.parent_link) == (first.pk, "session")
    assert "juniper-fox" in (second.parent_conversation_summary or "")
    assert "1 summary, " in command(client, second, "/status")["status"]

    third = gone_to(command(client, second, "/clear"))
    assert third.parent_conversation_id == second.pk
    assert third.parent_conversation_summary is None

    listed = command(client, third, "/resume")["status"]
    assert all(f"#{c.pk} Release notes" in listed for c in (first, second, third))
    resumed = command(client, third, f"/resume {first.pk}")
    assert gone_to(resumed).pk == first.pk and resumed["reopened"] is True

    other = chat()
    refused = command(client, third, f"/resume {other.pk}")["status"]
    assert refused == f"No session {other.pk} in this chat: /resume lists them."
    assert command(client, first, "/bogus")["status"] == (
        "Unknown command /bogus: the commands are /new, /clear, /resume [id], /status."
    )
    # Commands are answered at once: none is stored as a message or sent to the model.
    assert Message.objects.count() == stored + 2  # the other chat's two


def test_a_message_is_sent_as_before():
    conversation = chat()

    response = Client().post(f"{page(conversation)}send", {"text": "/tmp is full?"[1:]})

    assert response.status_code == 204
    assert conversation.messages.order_by("-id").first().content == "tmp is full?"


def places(html: str) -> list[str]:
    return re.findall(r'<span class="place">(\d+/\d+)</span>', html)


def test_a_user_message_is_edited_and_its_branches_flipped():
    parent = chat()
    edited = parent.messages.get(role="user")
    client = Client()

    made = client.post(
        f"{page(parent)}edit", {"message_id": edited.pk, "text": "It is <b>oak</b>."}
    )

    first = Conversation.objects.get(parent_conversation=parent, parent_link="branch")
    assert made.status_code == 302 and made["Location"] == page(first)
    assert list(first.messages.values_list("role", "content")) == [("user", "It is <b>oak</b>.")]
    shown = client.get(page(first)).content.decode()
    assert 'data-pending="True"' in shown  # the edit's answer streams on opening
    assert "It is &lt;b&gt;oak&lt;/b&gt;." in shown and "<b>oak</b>" not in shown
    assert places(shown) == ["2/2"]
    assert f'<button name="to" value="{parent.pk}" class="previous">' in shown

    client.post(f"{page(parent)}edit", {"message_id": edited.pk, "text": "It is elm."})
    second = Conversation.objects.filter(parent_conversation=parent).latest("id")
    assert places(client.get(page(second)).content.decode()) == ["3/3"]
    parent_page = client.get(page(parent)).content.decode()
    assert places(parent_page) == ["1/3"]
    assert 'data-pending="False"' in parent_page  # answered: nothing streams on opening

    flipped = client.post(f"{page(second)}switch", {"to": first.pk})

    assert flipped.status_code == 302 and flipped["Location"] == page(first)
    siblings = conversation_tree(parent).siblings_at(edited.pk)
    assert [node.active for node in siblings] == [True, True, False]
    shown = client.get(page(first)).content.decode()
    assert places(shown) == ["2/3"]
    assert f'value="{parent.pk}" class="previous"' in shown
    assert f'value="{second.pk}" class="next"' in shown


def test_an_edit_or_a_flip_outside_the_chat_is_refused_and_makes_nothing():
    parent = chat()
    answer = parent.messages.get(role="assistant")
    other = chat()
    client = Client()
    before = Conversation.objects.count()

    refused = client.post(f"{page(parent)}edit", {"message_id": answer.pk, "text": "x"})
    assert refused.status_code == 400
    assert refused.json()["error"] == "Only a user message of this chat, with text, can be edited."
    foreign = client.post(f"{page(parent)}switch", {"to": other.pk})
    assert foreign.status_code == 400
    assert client.post(f"{page(parent)}switch", {"to": "x"}).status_code == 400
    assert Conversation.objects.count() == before


def test_an_empty_edit_is_refused_before_any_branch_is_made():
    parent = chat()
    before = Conversation.objects.count()

    refused = Client().post(
        f"{page(parent)}edit", {"message_id": parent.messages.get(role="user").pk, "text": " "}
    )

    assert refused.status_code == 400
    assert Conversation.objects.count() == before


def test_the_chat_is_summarized_before_or_after_a_message_and_a_refusal_says_why():
    conversation = Conversation.objects.create(title="Cut", system_prompt="You help.")
    messages = chat_turns(conversation, 6, size=400)
    add_message(conversation, "user", "And now?")
    client = Client()
    cut_at = messages[6]  # the fourth turn's user message

    made = client.post(f"{page(conversation)}cut", {"message_id": cut_at.pk, "side": "before"})

    assert made.status_code == 200, made.content
    conversation.refresh_from_db()
    assert conversation.compaction_through_message_id < cut_at.pk
    again = client.post(
        f"{page(conversation)}cut", {"message_id": messages[0].pk, "side": "before"}
    )
    assert again.status_code == 400 and "already" in again.json()["error"]
    assert client.post(f"{page(conversation)}cut", {"message_id": cut_at.pk}).status_code == 400

    after = client.post(f"{page(conversation)}cut", {"message_id": messages[7].pk, "side": "after"})
    assert after.status_code == 200, after.content
    conversation.refresh_from_db()
    assert conversation.segment_summary["after"] >= messages[7].pk
    shown = client.get(page(conversation)).content.decode()
    assert shown.count('class="cut"') == len(messages) + 1


@pytest.mark.django_db(transaction=True)
def test_the_stream_says_compacting_then_compacted_before_the_answer(
    fake_llm, monkeypatch, settings
):
    settings.ASSISTANT_COMPACTION = {"CONTEXT_TOKEN_THRESHOLD": 2_000}
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-anthropic")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.url)
    web_chat.claude.cache_clear()
    conversation = Conversation.objects.create(title="Long", system_prompt="You help.")
    chat_turns(conversation, 8, size=2_000)
    add_message(conversation, "user", "What next?")
    fake_llm.script_anthropic(ok("Next: the release."))

    async def read():
        return [shown async for shown in web_chat.answer_events(conversation)]

    shown = async_to_sync(read)()

    names = [re.match(r"event: (\w+)", text).group(1) for text in shown]
    data = [json.loads(text.split("data: ", 1)[1]) for text in shown]
    assert names[0] == "compaction" and data[0]["status"] == "compacting"
    ends = [
        d
        for n, d in zip(names, data, strict=True)
        if n == "compaction" and d["status"] != "compacting"
    ]
    assert ends and ends[0]["status"] == "completed"
    assert ends[0]["after"] < ends[0]["before"]
    assert names[-1] == "done" and data[-1]["text"] == "Next: the release."
    assert names.index("delta") > names.index("compaction")
