"""Facts carried forward from summary to summary as statements, within a token budget."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from assistant.settings.conf import compaction_config
from assistant.summary.facts import CARRIED_HEADING, carried_facts, summary_body, with_carried_facts

BODY = "## Goal\n- Ship the autumn newsletter.\n\n## Critical context\n- none"


def user(text):
    return {"role": "user", "content": text}


def tool(text):
    return {"role": "tool", "content": text, "tool_name": "fetch_url", "tool_call_id": "c1"}


def test_facts_the_summarizer_dropped_are_carried_as_statements():
    messages = [
        user("Note: the webhook secret for the autumn newsletter is marmalade-sky."),
        tool(
            "<p>Filler text here.</p>"
            "<p>The tenant id is 12f46120-d2e9-4f15-8f1c-54d6f0149100 now.</p>"
        ),
    ]

    summary = with_carried_facts(BODY, messages, None, 1500)

    assert summary == (
        f"{BODY}\n\n{CARRIED_HEADING}\n"
        "- Note: the webhook secret for the autumn newsletter is marmalade-sky.\n"
        "- The tenant id is 12f46120-d2e9-4f15-8f1c-54d6f0149100 now."
    )
    assert summary_body(summary) == BODY
    assert carried_facts(summary)[1] == "The tenant id is 12f46120-d2e9-4f15-8f1c-54d6f0149100 now."


def test_a_fact_the_summary_states_is_not_carried_twice():
    body = BODY + "\n- The autumn newsletter webhook secret is marmalade-sky."
    messages = [user("Note: the webhook secret for the autumn newsletter is marmalade-sky.")]

    assert with_carried_facts(body, messages, None, 1500) == body


def test_carried_facts_stay_carried_while_the_summarizer_keeps_dropping_them():
    first = with_carried_facts(BODY, [user("The order ref for Lisbon is ORD-7F3A.")], None, 1500)
    second = with_carried_facts(BODY, [user("Nothing new today, thanks.")], first, 1500)

    assert carried_facts(second) == ["The order ref for Lisbon is ORD-7F3A."]


def test_the_budget_keeps_the_newest_facts_and_lists_them_oldest_first():
    messages = [user(f"The ticket for team number {n} is TCK-{n:05X} today.") for n in range(10)]

    summary = with_carried_facts(BODY, messages, None, 60)  # about 14 tokens a statement

    assert carried_facts(summary) == [
        f"The ticket for team number {n} is TCK-{n:05X} today." for n in (6, 7, 8, 9)
    ]


def test_rows_of_data_our_markers_bare_sizes_and_dates_are_never_carried():
    rows = "\n".join(
        f"| {1000 + n} | post-{n} | Weekly digest | 2024-01-{n + 1:02d} |" for n in range(20)
    )
    compacted = (
        "[Tool result compacted: showing the first 800 of 18,017 characters. "
        "The full original is stored and can be restored.]\n"
        f"{rows}\n18,017 characters\n2024-01-12"
    )

    assert with_carried_facts(BODY, [tool(compacted)], None, 1500) == BODY


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"CARRIED_IDENTIFIERS_MAX_CHARS": 10_000},
            "'CARRIED_IDENTIFIERS_MAX_CHARS'\\] was renamed: use 'CARRIED_FACTS_MAX_TOKENS'",
        ),
        ({"CARRIED_FACTS_MAX_TOKENS": -1}, "must be >= 0 and <= 10000, got -1"),
        ({"CARRIED_FACTS_MAX_TOKENS": 10_001}, "must be >= 0 and <= 10000, got 10001"),
    ],
)
def test_the_carried_facts_budget_is_checked(overrides, message):
    with (
        override_settings(ASSISTANT_COMPACTION=overrides),
        pytest.raises(ImproperlyConfigured, match=message),
    ):
        compaction_config()


def test_the_carried_facts_budget_defaults_to_1500_tokens():
    assert compaction_config().CARRIED_FACTS_MAX_TOKENS == 1500


def test_another_fact_with_the_same_value_does_not_count_as_stated():
    body = BODY + "\n- The billing contact for the wine club is oskar.brennan@example.com."
    messages = [user("Please use oskar.brennan@example.com for the press contact from now on.")]

    assert carried_facts(with_carried_facts(body, messages, None, 1500)) == [
        "Please use oskar.brennan@example.com for the press contact from now on."
    ]
