"""Deterministic identifier extraction."""

import pytest

from assistant.providers import extract_identifiers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see https://example.com/posts/7?x=1, then", ["https://example.com/posts/7?x=1"]),
        ("logs in /var/log/app/error.log now", ["/var/log/app/error.log"]),
        ("edit src/app/main.py please", ["src/app/main.py"]),
        ("mail bob@example.org today", ["bob@example.org"]),
        ("post post-1234 is live", ["post-1234"]),
        ("issue #1234 again", ["#1234"]),
        ("order ORD-2024-0042 shipped", ["ORD-2024-0042"]),
        ("id 123e4567-e89b-12d3-a456-426614174000", ["123e4567-e89b-12d3-a456-426614174000"]),
        ("commit a1b2c3d4e5f0 merged", ["a1b2c3d4e5f0"]),
        ("it costs $1,234.50 in total", ["$1,234.50"]),
        ("conversion is 12.5% now", ["12.5%"]),
        ("took 300 ms", ["300 ms"]),
        ("exported 2,048 rows.", ["2,048 rows"]),
        ("version 3.11.7", ["3.11.7"]),
        ("due 2024-03-05 or March 3, 2024", ["2024-03-05", "March 3, 2024"]),
        ('titled "The Big Launch" and “Spring Sale”', ["The Big Launch", "Spring Sale"]),
        ("SELECT * FROM blog_posts; INSERT INTO audit_log", ["blog_posts", "audit_log"]),
        (
            "step 2\npsycopg2.OperationalError: connection failed\nstep 3",
            ["psycopg2.OperationalError: connection failed"],
        ),
        ("upstream: HTTP 503 from the API", ["upstream: HTTP 503 from the API"]),
    ],
)
def test_it_extracts_each_kind_of_identifier(text, expected):
    assert extract_identifiers(text) == expected


def test_it_keeps_first_appearance_order_without_duplicates():
    text = "post-2 then #9 then post-2 again and https://a.io/x and #9"

    assert extract_identifiers(text) == ["post-2", "#9", "https://a.io/x"]


def test_it_does_not_report_a_path_inside_a_url():
    assert extract_identifiers("GET https://example.com/api/v2/posts/7 done") == [
        "https://example.com/api/v2/posts/7"
    ]


def test_it_finds_identifiers_inside_minified_json():
    text = '[{"id":"post-17","url":"https://b.io/p/17","price":"$19.99","path":"/srv/a/b.txt"}]'

    assert extract_identifiers(text) == [
        "post-17",
        "https://b.io/p/17",
        "$19.99",
        "/srv/a/b.txt",
    ]


def test_plain_prose_has_no_identifiers():
    assert extract_identifiers("We talked about the weather and then went home.") == []


def test_it_finishes_on_a_megabyte_of_pathological_text():
    # bounded quantifiers keep this linear; a regression shows up as a hang
    text = "a-" * 300_000 + "x" * 200_000 + "1 " * 100_000

    assert extract_identifiers(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ref ORD-7F3A and FACT-1F9D6", ["ORD-7F3A", "FACT-1F9D6"]),
        ("register 0xDEADBEEF, then 0x1f", ["0xDEADBEEF", "0x1f"]),
        ("commits a3f9c2e1 and 9F86D081884C", ["a3f9c2e1", "9F86D081884C"]),
        ("booking QX-7ZL4P and code Q7ZL4", ["QX-7ZL4P", "Q7ZL4"]),
        ("pay USD 3,200 or €12,480 or £740.12", ["USD 3,200", "€12,480", "£740.12"]),
        ("got ENOENT then ERR_CONNECTION_REFUSED", ["ENOENT", "ERR_CONNECTION_REFUSED"]),
        ("ORA-00942 from the report job", ["ORA-00942"]),
        ("account 351601615504 is closed", ["351601615504"]),
        ("the reviewer is now Tomasz Nakamura.", ["Tomasz Nakamura"]),
        ("Spring Sale Recap was read by many.", []),  # a capitalized start is not a name
        ("copy C:\\Users\\ana\\report.xlsx over", ["C:\\Users\\ana\\report.xlsx"]),
        ("calls add_annotation_refs and renderMessage", ["add_annotation_refs", "renderMessage"]),
    ],
)
def test_it_knows_ids_of_any_case_amounts_error_codes_and_names(text, expected):
    assert extract_identifiers(text) == expected


# Excerpts of real tool output from bench/data/real (third-party conversations, MIT).
TAU_BENCH_JSON = (
    '{"name": {"first_name": "Omar", "last_name": "Davis"}, "address": {"address1": '
    '"281 Spruce Street", "city": "San Diego", "zip": "92164"}, "email": '
    '"omar.davis7857@example.com", "dob": "1982-10-19", "payment_methods": '
    '{"gift_card_3481935": {"source": "gift_card", "amount": 22, "id": "gift_card_3481935"}}}'
)
SWE_AGENT_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/pydicom__pydicom/reproduce_bug.py", line 17, in <module>\n'
    "    result = np.array_equal(ds.pixel_array, pixel_array)\n"
    '  File "/pydicom__pydicom/pydicom/dataset.py", line 836, in __getattr__\n'
    "    return object.__getattribute__(self, name)\n"
)
GIT_LOG = (
    "0629d16 feat: auto-cleanup review tmux sessions with heartbeat + TTL registry\n"
    "9dd68ea fix: sort commit links by single DateTime, not tuple\n"
)
CAT_N = (
    "Here's the result of running `cat -n` on "
    "/workspace/ponylang__ponyc__0.1/src/libponyc/expr/match.c:\n"
    '     1\t#include "match.h"\n'
    '     3\t#include "../type/subtype.h"\n'
)
SQL_TABLE = (
    "| id | title | status | views | updated |\n|---|---|---|---|---|\n"
    "| 1001 | Spring launch | published | 812 | 2024-03-02 |\n"
    "| 1002 | Invoice INV-7F3A2 disputed | draft | 0 | 2024-03-05 |\n"
)
HTML_PAGE = (
    '<html><body><div class="post"><p>Contact <a href="mailto:press@example.org">'
    "press@example.org</a> before 5 pm.</p><p>Webhook: "
    "https://hooks.example.net/T0A7/B9X2?ref=autumn</p></div></body></html>"
)


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        (
            TAU_BENCH_JSON,
            ["omar.davis7857@example.com", "1982-10-19", "gift_card_3481935", "Omar", "92164"],
        ),
        (
            SWE_AGENT_TRACEBACK,
            ["/pydicom__pydicom/reproduce_bug.py", "/pydicom__pydicom/pydicom/dataset.py"],
        ),
        (GIT_LOG, ["0629d16", "9dd68ea"]),
        (CAT_N, ["/workspace/ponylang__ponyc__0.1/src/libponyc/expr/match.c"]),
        (SQL_TABLE, ["INV-7F3A2", "2024-03-02", "2024-03-05"]),
        (HTML_PAGE, ["press@example.org", "https://hooks.example.net/T0A7/B9X2?ref=autumn"]),
    ],
)
def test_it_finds_the_values_of_real_tool_output(text, wanted):
    found = extract_identifiers(text)

    assert [value for value in wanted if value not in found] == []
