"""Deterministic identifier extraction."""

import pytest

from assistant.llm import extract_identifiers


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
