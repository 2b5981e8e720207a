"""What every summarizer request is told: the conversation's language
(SUMMARY_LANGUAGE "auto" detects it, a fixed one overrides), the deployment's
SUMMARY_INSTRUCTIONS, and one call's `instructions=`; through the real SDKs to
the testing kit's fake server, for every kind of summary: the window summary
(from a transcript and as a cached suffix), a tool result's, and a fork's."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.test import override_settings

from assistant.models import Message
from assistant.providers.summary_prompt import HEADINGS
from assistant.services import (
    add_message,
    build_context,
    compact_tool_results,
    fork_continuation,
    generate_parent_summary,
    regenerate_window_summary,
    run_staff_action,
)
from assistant.staff.operations import REGENERATE_SUMMARY
from assistant.summary.guidance import guidance_for
from assistant.text.language import detect_language
from tests.builders import html
from tests.scenarios import staff_user

pytestmark = pytest.mark.django_db

FRENCH_TURNS = [
    "Bonjour, je voudrais que tu vérifies les articles du blog et que tu corriges les titres.",
    "Merci. Est-ce que tu peux aussi regarder le flux RSS pour voir s'il est valide ?",
    "Parfait, et pour la page d'accueil, il faut que le lien vers la boutique soit en haut.",
    "Très bien. Dis-moi quand c'est fait, je dois partir dans une heure.",
]
# A loaded machine must not push a summary to the offline fallback (no request then).
NO_FALLBACK_FOR_LOAD = {"SUMMARY_CHAT_DEADLINE_SECONDS": 300}
INSTRUCTIONS = "Keep every ticket number (TKT-...) verbatim and list open refunds first."


def french_conversation(conversation):
    for n, text in enumerate(FRENCH_TURNS):
        add_message(conversation, "user", text)
        add_message(
            conversation,
            "assistant",
            "",
            tool_calls=[{"id": f"s{n}", "name": "search", "arguments": {"q": f"post {n}"}}],
        )
        add_message(conversation, "tool", html(3_000, marker=f"TKT-{n}0{n} "), tool_call_id=f"s{n}")
        add_message(conversation, "assistant", f"C'est fait pour l'étape {n}.")
    return conversation


def summarizer_texts(fake_llm) -> list[str]:
    return [json.dumps(r.body, ensure_ascii=False) for r in fake_llm.requests]


def every_kind_of_summary(conversation) -> None:
    """A tool result's summary, a window summary, and a fork's summary."""
    assert compact_tool_results(conversation) >= 1
    assert regenerate_window_summary(conversation, keep_last=2)
    fork = fork_continuation(conversation, summarize=False)
    assert fork is not None
    assert generate_parent_summary(fork)


@pytest.mark.parametrize("request_kind", ["transcript", "cached_suffix"])
def test_every_summarizer_request_of_a_french_conversation_asks_for_french(
    conversation, fake_llm, settings, request_kind
):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {
        **NO_FALLBACK_FOR_LOAD,
        "TOOL_POLICIES": {"search": "summarize"},
        "SUMMARY_REQUEST": request_kind,
    }
    every_kind_of_summary(french_conversation(conversation))

    texts = summarizer_texts(fake_llm)
    assert len(texts) >= 5  # four tool results, the window, the fork
    assert all("in French" in text for text in texts)
    assert all("content under them in French" in text for text in texts)
    # The headings the code reads stay as they are.
    assert all(all(heading in text for heading in HEADINGS) for text in texts)


def test_a_fixed_summary_language_overrides_the_detected_one(conversation, fake_llm, settings):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {**NO_FALLBACK_FOR_LOAD, "SUMMARY_LANGUAGE": "German"}
    french_conversation(conversation)
    assert regenerate_window_summary(conversation, keep_last=2)
    texts = summarizer_texts(fake_llm)
    assert texts and all("in German" in t and "in French" not in t for t in texts)


@pytest.mark.parametrize("request_kind", ["transcript", "cached_suffix"])
def test_summary_instructions_reach_every_summarizer_request(
    conversation, fake_llm, settings, request_kind
):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {
        **NO_FALLBACK_FOR_LOAD,
        "TOOL_POLICIES": {"search": "summarize"},
        "SUMMARY_REQUEST": request_kind,
        "SUMMARY_INSTRUCTIONS": INSTRUCTIONS,
    }
    every_kind_of_summary(french_conversation(conversation))
    texts = summarizer_texts(fake_llm)
    assert len(texts) >= 5
    assert all(INSTRUCTIONS in text for text in texts)


def test_one_calls_instructions_follow_the_deployments(conversation, fake_llm, settings):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {**NO_FALLBACK_FOR_LOAD, "SUMMARY_INSTRUCTIONS": INSTRUCTIONS}
    french_conversation(conversation)
    assert regenerate_window_summary(
        conversation, keep_last=2, instructions="Focus on the RSS feed's validity."
    )
    (text,) = summarizer_texts(fake_llm)
    assert text.index(INSTRUCTIONS) < text.index("Focus on the RSS feed's validity.")
    # The call's instructions end with the call.
    fake_llm.reset()
    add_message(conversation, "user", "Et maintenant la page contact, s'il te plaît.")
    add_message(conversation, "assistant", "D'accord.")
    assert regenerate_window_summary(conversation, keep_last=1)
    (later,) = summarizer_texts(fake_llm)
    assert INSTRUCTIONS in later and "RSS feed's validity" not in later


def test_the_staff_regenerate_action_takes_instructions(conversation, fake_llm, settings):
    fake_llm.use_anthropic(settings)
    staff = staff_user()
    french_conversation(conversation)
    before = build_context(conversation).window_summary
    outcome = run_staff_action(
        REGENERATE_SUMMARY, conversation.pk, staff.pk, "Keep the shop link's position."
    )
    assert outcome.changed
    assert build_context(conversation).window_summary != before
    (text,) = summarizer_texts(fake_llm)
    assert "Keep the shop link's position." in text
    entry = LogEntry.objects.get(user=staff, object_id=str(conversation.pk))
    assert "Keep the shop link's position." in entry.change_message


@pytest.mark.parametrize(
    ("text", "language"),
    [
        (FRENCH_TURNS[0], "French"),
        ("Could you check the blog posts and fix the titles that are wrong?", "English"),
        (
            "Kannst du bitte die Artikel prüfen und die Titel korrigieren, die nicht stimmen?",
            "German",
        ),
        ("¿Puedes revisar los artículos del blog y corregir los títulos que están mal?", "Spanish"),
        ("Проверь, пожалуйста, статьи в блоге и исправь заголовки.", "Russian"),
        ("ブログの記事を確認して、タイトルを直してください。", "Japanese"),
        ("请检查博客文章并修改错误的标题。", "Chinese"),
        ("ok", None),
        ("https://example.org/feed.xml 42 1234", None),
    ],
)
def test_the_language_rule(text, language):
    assert detect_language([text]) == language


def test_the_language_is_that_of_the_users_messages_not_the_tools(conversation):
    french_conversation(conversation)
    # Tool results in English, code and HTML do not change the answer.
    assert Message.objects.filter(conversation=conversation, role="tool").count() == 4
    with override_settings(ASSISTANT_COMPACTION={}):
        assert guidance_for(conversation.pk).language == "French"


def test_the_compact_conversation_command_takes_instructions(conversation, fake_llm, settings):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {
        **NO_FALLBACK_FOR_LOAD,
        "TOOL_POLICIES": {"search": "summarize"},
    }
    french_conversation(conversation)
    out = StringIO()
    call_command(
        "compact_conversation",
        str(conversation.pk),
        "--level",
        "1",
        "--instructions",
        "Name the RSS feed's errors.",
        stdout=out,
    )
    texts = summarizer_texts(fake_llm)
    assert "shrank the context" in out.getvalue()
    assert texts and all("Name the RSS feed's errors." in text for text in texts)
