"""Malformed configuration fails loudly, naming the variable."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from assistant.conf import compaction_config
from config import env


@pytest.mark.parametrize(
    ("reader", "value", "message"),
    [
        (lambda: env.env_bool("FLAG", False), "maybe", "FLAG must be a boolean"),
        (lambda: env.env_int("FLAG", 1), "12x", "FLAG must be an integer"),
        (lambda: env.env_int("FLAG", 1, minimum=1), "0", "FLAG must be at least 1"),
        (lambda: env.env_float("FLAG", 1.0), "fast", "FLAG must be a number"),
        (lambda: env.env_json_object("FLAG"), "[1]", "FLAG must be a JSON object"),
        (lambda: env.env_json_object("FLAG"), "{oops", "FLAG must be a JSON object"),
        (lambda: env.env_choice("FLAG", "a", {"a", "b"}), "c", "FLAG must be one of a, b"),
        (lambda: env.env_database("FLAG", "sqlite://"), "mongo://x/y", "FLAG"),
        (lambda: env.env_url("FLAG", "", {"redis"}), "http://secret@host", "FLAG must be a URL"),
    ],
)
def test_a_malformed_value_names_the_variable(monkeypatch, reader, value, message):
    monkeypatch.setenv("FLAG", value)

    with pytest.raises(ImproperlyConfigured, match=message):
        reader()


def test_a_url_error_does_not_echo_credentials(monkeypatch):
    monkeypatch.setenv("FLAG", "http://user:hunter2@host")

    with pytest.raises(ImproperlyConfigured) as raised:
        env.env_url("FLAG", "", {"redis"})

    assert "hunter2" not in str(raised.value)


def test_parsed_values(monkeypatch):
    monkeypatch.setenv("FLAG", " yes ")
    assert env.env_bool("FLAG", False) is True
    monkeypatch.setenv("FLAG", "postgres://u@db:5433/app")
    assert env.env_database("FLAG", "sqlite://")["PORT"] == 5433
    monkeypatch.delenv("FLAG")
    assert env.env_int("FLAG", 7) == 7


def test_compaction_defaults_match_the_design():
    config = compaction_config()

    assert (config.TOOL_RESULT_CHAR_THRESHOLD, config.TRUNCATION_KEEP_CHARS) == (1500, 800)
    assert (config.CONTEXT_TOKEN_THRESHOLD, config.MAX_MESSAGES_BEFORE_SUMMARY) == (50_000, 40)
    assert (config.MIN_RECENT_MESSAGES, config.RECENT_FRACTION) == (6, 0.4)
    assert (config.MAX_RECENT_TOKENS, config.MIN_CALLS_TO_DEDUP) == (20_000, 2)
    assert (config.MAX_FORK_DEPTH, config.CHARS_PER_TOKEN) == (3, 4)
    assert config.MAX_CONTENT_BYTES == 5 * 1024 * 1024


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"TOOL_RESULT_CHAR_TRESHOLD": 10}, "Unknown ASSISTANT_COMPACTION keys"),
        ({"CONTEXT_TOKEN_THRESHOLD": "50k"}, "must be int"),
        ({"TOOL_POLICIES": {"run_sql": "shred"}}, "prune|summarize|keep"),
    ],
)
def test_bad_compaction_settings_are_refused(overrides, message):
    with (
        override_settings(ASSISTANT_COMPACTION=overrides),
        pytest.raises(ImproperlyConfigured, match=message),
    ):
        compaction_config()


def test_compaction_overrides_apply():
    with override_settings(
        ASSISTANT_COMPACTION={"RECENT_FRACTION": 1, "TOOL_POLICIES": {"a": "keep"}}
    ):
        config = compaction_config()

    assert config.RECENT_FRACTION == 1.0
    assert config.policy_for("a") == "keep"
    assert config.policy_for("b") == "prune"
