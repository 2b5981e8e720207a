"""Fact statements: the sentence, row or line that says what a value is."""

import pytest

from assistant.text.fact_statements import key_statements, statements

FILLER = "<p>We talked about tone and structure for new readers. It reads well.</p>\n"


def texts(text):
    return [s.text for s in statements(text)]


def test_a_statement_is_the_sentence_holding_the_value_without_its_markup():
    page = (
        FILLER
        * 3
        + "<p>It went live. The webhook secret for the autumn newsletter is marmalade-sky. "
        "Readers liked it.</p>\n<p>Send invoices to <b>billing@example.org</b> "
        "by Friday.</p>\n"
    )

    assert texts(page) == [
        "The webhook secret for the autumn newsletter is marmalade-sky.",
        "Send invoices to billing@example.org by Friday.",
    ]


def test_a_table_row_is_a_statement_and_a_rare_one_ranks_first():
    rows = "\n".join(f"| post-{n} | Weekly digest number {n} | published |" for n in range(40))
    table = (
        f"| id | title | status |\n|---|---|---|\n{rows}\n| ORD-7F3A | Refund of the order | open |"
    )

    found = statements(table)

    assert found[-1].text == "ORD-7F3A | Refund of the order | open"
    assert (found[-1].rarity, found[0].rarity) == (1, 40)
    assert key_statements(table, 60) == ["ORD-7F3A | Refund of the order | open"]


def test_bare_values_sizes_dates_and_our_markers_are_not_statements():
    text = (
        "[Tool result compacted: showing the first 800 of 18,017 characters. "
        "The full original is stored and can be restored.]\n"
        "https://example.com/feed-budget-cache\n"
        "18,017 characters\n"
        "Updated on 2024-01-12 by the team.\n"
        "Export ran in 300 ms for the whole team today.\n"
    )

    assert texts(text) == []


def test_a_long_minified_json_line_is_split_between_its_records():
    records = ",".join(f'{{"id":"row-{n}","note":"nothing to see"}}' for n in range(30))
    text = f'[{records},{{"id":"x","note":"The refund for booking QX-7ZL4P is USD 3,200."}}]'

    found = statements(text)

    assert [s.text for s in found if s.rarity == 1] == [
        '"id":"x","note":"The refund for booking QX-7ZL4P is USD 3,200."'
    ]
    assert len(found) == 31  # one per record: "id" names a field, "row-7" is its value


def test_json_keys_are_no_values():
    record = '{"basic_economy": 3, "economy": 16, "business": 14, "prices": {"economy": 163}}'

    assert texts(record) == []


def test_key_statements_keep_their_order_within_the_budget():
    text = (
        "Order ORD-2024-0042 failed with HTTP 503.\n"
        + FILLER
        + "The config file is /etc/shop/main.yaml on every host.\n"
    )

    assert key_statements(text, 1000) == [
        "Order ORD-2024-0042 failed with HTTP 503.",
        "The config file is /etc/shop/main.yaml on every host.",
    ]
    # a statement the head shows whole is left out; one the head cuts is kept whole
    head = "Order ORD-2024-0042 failed with HTTP 503.\n<p>We talked about tone and str"
    assert key_statements(text, 1000, exclude=head) == [
        "The config file is /etc/shop/main.yaml on every host."
    ]
    cut = "Order ORD-2024-0042 failed wi"
    assert key_statements(text, 1000, exclude=cut) == key_statements(text, 1000)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Note that the preview passphrase for the fair is now velvet-quiet.", "velvet-quiet"),
        ("We settled on velvet-quiet as the preview passphrase for the fair.", "velvet-quiet"),
        ("Heads up: the staging password changed to ember-sky.", "ember-sky"),
        ("The API token: abc-def-ghi for the bot.", "abc-def-ghi"),
    ],
)
def test_a_plain_word_secret_is_stated_with_its_value(text, value):
    assert [(s.text, s.values) for s in statements(text)] == [(text, (value,))]


def test_a_secret_word_without_a_value_states_nothing():
    assert statements("The password is set to the usual one, ask Bob for it.") == []
