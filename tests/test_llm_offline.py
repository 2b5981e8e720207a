"""The offline summarizer: deterministic, readable, its Critical context made of fact statements."""

import pytest

from assistant.providers import OfflineProvider, render_transcript, validate_summary
from assistant.providers.summary_prompt import HEADINGS

PLANTED = [
    "post-1001", "post-1002", "ORD-2024-0042", "ORD-2024-0043", "#4821", "#4822",
    "https://blog.example.com/posts/launch-day", "https://cdn.example.com/img/hero.png",
    "/var/www/blog/config.yml", "/etc/nginx/sites-enabled/blog", "src/blog/views.py",
    "ops@example.com", "editor@example.org", "9f3c2a1b7e4d", "0a1b2c3d4e5f6a7b",
    "123e4567-e89b-12d3-a456-426614174000", "$1,249.99", "$18.50", "12.5%", "99.95%",
    "350 ms", "2,048 rows", "2024-03-05", "2025-11-30", "March 3, 2024",
    "The Big Launch", "Spring Sale Recap", "blog_posts", "audit_log", "3.11.7",
    "user_42", "call_77", "INV-2023-0099", "#77", "4.2.1", "1,500 words",
    "https://api.example.com/v2/stats?range=30d", "/srv/data/export-2024.csv",
    "2024-12-24T10:30:00Z", "TKT-9001",
]  # fmt: skip
SQL = {"blog_posts": "SELECT * FROM blog_posts", "audit_log": "INSERT INTO audit_log"}
FILLER = (
    "we went over the draft again and talked about tone and structure and how the intro "
    "reads for new visitors who arrive from search"
)


def _conversation() -> list[dict]:
    messages = []
    for i in range(300):
        role = ("user", "assistant", "tool")[i % 3]
        text = f"{FILLER} turn {'abcdefghij'[i % 10]}"
        if i % 7 == 0 and (i // 7) < len(PLANTED):
            item = PLANTED[i // 7]
            planted = f'"{item}"' if item[0].isupper() and " " in item else SQL.get(item, item)
            text = f"{text} note {planted} here."
        message = {"role": role, "content": text}
        if role == "tool":
            message.update(tool_call_id=f"c{i}", tool_name="search")
        messages.append(message)
    return messages


def _summary(transcript, previous=None):
    return OfflineProvider().summarize(transcript, previous_summary=previous)


def test_the_conversation_plants_every_identifier():
    text = render_transcript(_conversation())

    assert [p for p in PLANTED if p in text] == PLANTED


def _critical(text):
    return text.split("## Critical context\n", 1)[1].splitlines()


def test_its_critical_context_states_every_specific_value(settings):
    settings.ASSISTANT_COMPACTION = {"OFFLINE_SUMMARY_MAX_CHARS": 12_000}

    result = _summary(render_transcript(_conversation()))

    critical = "\n".join(_critical(result.text))
    # sizes, numbers and dates only the assistant or a tool mentioned are not facts to
    # carry (a user's are); every other value is stated
    assert [p for p in PLANTED if p not in critical] == [
        "99.95%", "350 ms", "2024-03-05", "2025-11-30", "3.11.7", "4.2.1", "1,500 words",
        "2024-12-24T10:30:00Z",
    ]  # fmt: skip
    assert f"- {FILLER} turn a note post-1001 here." in critical


def test_the_default_cap_holds_and_every_line_is_whole():
    result = _summary(render_transcript(_conversation()))

    assert len(result.text) <= 6000
    for line in _critical(result.text):
        assert line.startswith(f"- {FILLER} turn ") and line.endswith(" here.")


def test_the_cap_comes_from_settings(settings):
    settings.ASSISTANT_COMPACTION = {"OFFLINE_SUMMARY_MAX_CHARS": 1500}
    noisy = [{"role": "tool", "content": f"row post-{n} is stored at /srv/{n}/x.json",
              "tool_call_id": "c", "tool_name": "sql"} for n in range(2000)]  # fmt: skip
    messages = [{"role": "user", "content": "Audit order ORD-2024-0042 please."}, *noisy]

    result = _summary(render_transcript(messages))

    assert len(result.text) <= 1500
    critical = _critical(result.text)
    assert critical[0] == "- Audit order ORD-2024-0042 please."  # the user's come first
    assert critical[-1] == "- row post-1999 is stored at /srv/1999/x.json"  # then the newest
    assert "- row post-0 is stored at /srv/0/x.json" not in critical


def test_it_reads_as_a_summary_whole_words_and_no_markers():
    long_goal = "Please migrate the newsletter archive " + "and the related templates " * 12
    compacted = (
        "[Tool result compacted: showing the first 800 of 18,017 characters. "
        "The full original is stored and can be restored.]\n<p>Archive ready.</p>\n"
        "[Key details further in the original:\nThe export lives at /srv/exports/news.tar.gz "
        "for the team.]"
    )
    transcript = render_transcript(
        [
            {"role": "user", "content": long_goal},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "fetch"}]},
            {"role": "tool", "content": compacted, "tool_call_id": "c1", "tool_name": "fetch"},
            {"role": "assistant", "content": "The archive is ready."},
        ]
    )

    text = _summary(transcript).text

    goal = text.split("## Goal\n- ", 1)[1].split("\n", 1)[0]
    assert goal.endswith("…") and len(goal) <= 200
    assert goal[:-1].split()[-1] in {"and", "the", "related", "templates"}  # a whole word
    assert "## Progress\n- The archive is ready.\n- Called fetch once." in text
    assert _critical(text) == ["- The export lives at /srv/exports/news.tar.gz for the team."]
    assert "Tool result compacted" not in text and "characters" not in text


def test_it_writes_the_six_sections_and_passes_validation():
    transcript = render_transcript(
        [
            {"role": "user", "content": "Fix the RSS feed. It must stay under 1 MB."},
            {"role": "assistant", "content": "I found the bug in feed.py. We will use caching."},
            {"role": "user", "content": "Should we also ping the CDN?"},
        ]
    )

    text = _summary(transcript).text

    assert validate_summary(text) == text
    assert text.splitlines()[0] == HEADINGS[0]
    assert "## Goal\n- Fix the RSS feed. It must stay under 1 MB." in text
    assert "## Constraints\n- It must stay under 1 MB." in text
    assert "## Progress\n- I found the bug in feed.py." in text
    assert "## Key decisions\n- We will use caching." in text
    assert "## Next steps\n- Should we also ping the CDN?" in text


def test_it_is_deterministic():
    transcript = render_transcript(_conversation())

    assert _summary(transcript).text == _summary(transcript).text


def test_an_update_carries_the_previous_critical_context_forward():
    first = _summary(render_transcript([{"role": "user", "content": "Restore post-17 from #88."}]))
    second = _summary(
        render_transcript([{"role": "user", "content": "Now check ORD-2024-0042."}]),
        previous=first.text,
    )

    assert _critical(second.text) == ["- Restore post-17 from #88.", "- Now check ORD-2024-0042."]
    assert "## Goal\n- Restore post-17 from #88." in second.text


def test_usage_is_a_chars_per_token_estimate():
    result = _summary("[user] " + "x" * 393)

    assert result.usage.input_tokens == 100
    assert result.usage.output_tokens == -(-len(result.text) // 4)
    assert (result.provider, result.model, result.fallback) == (
        "offline",
        "offline-summarizer",
        False,
    )


@pytest.mark.parametrize("transcript", ["", "   "])
def test_an_empty_transcript_still_gives_a_valid_summary(transcript):
    text = _summary(transcript).text

    assert validate_summary(text) == text


def test_an_update_keeps_a_previous_summary_that_has_no_sections():
    from assistant.providers.offline.provider import OfflineProvider

    previous = "Notes from the old system.\nThe refund for ORD-1999-0001 was approved."

    result = OfflineProvider().summarize("[user] and ORD-2024-0042?", previous_summary=previous)

    progress = result.text.split("## Progress", 1)[1].split("## Key decisions", 1)[0]
    assert "The refund for ORD-1999-0001 was approved." in progress
    assert "ORD-2024-0042" in result.text
