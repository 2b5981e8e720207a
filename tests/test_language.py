"""The summaries' language comes from a maintained detector
(py3langid, its model in its wheel) instead of hand-kept word lists; the names stay
English ("French"), too little text stays None, and a given text always gets the
same answer. tests/data/language_messages.json is the committed set the candidates
were measured on (bench/language.py, docs/compaction.rst)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.services import add_message, regenerate_window_summary
from assistant.summary.guidance import guidance_for
from assistant.text.language import LANGUAGE_NAMES, detect_language
from tests.builders import html

DATA = Path(__file__).resolve().parent / "data" / "language_messages.json"
# A French message that the hand-kept word lists scored 3 for French and 3 for Spanish.
WORD_LIST_TIE = (
    "Bonjour ! Peux-tu vérifier toutes les commandes remboursées de la boutique et me dire "
    "lesquelles sont encore en attente ?"
)


def test_the_issues_french_message_is_french():
    assert detect_language([WORD_LIST_TIE]) == "French"


@pytest.mark.django_db
def test_a_conversation_opened_by_the_issues_message_gets_french_summaries(
    conversation, fake_llm, settings
):
    fake_llm.use_anthropic(settings)
    settings.ASSISTANT_COMPACTION = {"SUMMARY_CHAT_DEADLINE_SECONDS": 300}
    for n, text in enumerate([WORD_LIST_TIE, "Et la page suivante ?", "Merci !", "Et ensuite ?"]):
        add_message(conversation, "user", text)
        call = {"id": f"c{n}", "name": "orders", "arguments": {"page": n}}
        add_message(conversation, "assistant", "", tool_calls=[call])
        add_message(conversation, "tool", html(3_000, marker=f"order {n} "), tool_call_id=f"c{n}")
        add_message(conversation, "assistant", f"Page {n} vérifiée.")

    assert guidance_for(conversation.pk).language == "French"
    assert regenerate_window_summary(conversation, keep_last=2)
    (request,) = fake_llm.requests
    assert "content under them in French" in json.dumps(request.body, ensure_ascii=False)


def test_the_committed_set_is_named_right_in_at_least_99_percent():
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert len(data) >= 12 and all(len(texts) >= 20 for texts in data.values())
    assert {"Russian", "Greek", "Arabic", "Hindi", "Japanese", "Chinese", "Korean"} <= set(data)
    named = [
        (language, detect_language([text])) for language, texts in data.items() for text in texts
    ]

    right = sum(language == found for language, found in named)
    assert right / len(named) >= 0.99, [pair for pair in named if pair[0] != pair[1]]


@pytest.mark.parametrize(
    "text",
    [
        "ok",
        "Merci !",
        "https://example.org/feed.xml 42 1234",
        "see alice@example.org and https://example.org/a/very/long/path/to/a/page",
        "好的",
        "",
    ],
)
def test_too_little_text_stays_none(text):
    assert detect_language([text]) is None


def test_the_names_stay_those_of_the_word_lists():
    # The languages the word lists and scripts named before keep their names.
    before = [
        "English",
        "French",
        "German",
        "Spanish",
        "Italian",
        "Portuguese",
        "Dutch",
        "Swedish",
        "Polish",
        "Turkish",
        "Indonesian",
        "Japanese",
        "Korean",
        "Chinese",
        "Russian",
        "Greek",
        "Arabic",
        "Hebrew",
        "Hindi",
        "Thai",
    ]
    assert set(before) <= set(LANGUAGE_NAMES.values())
    assert detect_language(["Dzień dobry, czy możesz sprawdzić zamówienia?"]) == "Polish"
    assert detect_language(["שלום, אתה יכול לבדוק את ההזמנות של החנות?"]) == "Hebrew"


def test_a_text_gets_the_same_answer_in_every_process():
    code = (
        "import json, sys\n"
        "from assistant.text.language import detect_language\n"
        f"data = json.load(open({str(DATA)!r}, encoding='utf-8'))\n"
        "print(json.dumps([detect_language([t]) for ts in data.values() for t in ts]))\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
        ).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert json.loads(runs[0]) == [detect_language([t]) for ts in data.values() for t in ts]
