"""Malformed configuration fails loudly, naming the variable; a deployment
cannot start insecurely by omission."""

import logging
import os
import re
import subprocess
import sys
from dataclasses import fields
from io import StringIO
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from assistant import providers as llm
from assistant.checks import app_settings_are_valid, recent_window_is_asked_for, summarizer_can_run
from assistant.models import CompactionEvent
from assistant.providers import registry
from assistant.services import build_context, ensure_context_summary
from assistant.settings import conf
from assistant.settings.app import AppSettings, app_setting
from assistant.settings.cleanup import CleanupConfig, cleanup_config
from assistant.settings.conf import (
    RENAMED,
    CompactionConfig,
    check_summarizer_deadline,
    compaction_config,
    validated_config,
)
from assistant.settings.keys import declared_keys, declared_types
from assistant.window import choose_split
from config import env
from tests.builders import chat_turns, html, tool_turn
from tests.conftest import settings_as_found


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
    assert (config.VERBATIM_AFTER_SHIFT, config.ARTIFACT_INDEX_MAX_TOKENS) == ("newest_step", 3000)


def test_overrides_undone_out_of_order_fail_the_test_and_leak_into_no_other():
    """As @override_settings beside a value set through the `settings` fixture: the
    decorator is undone at the test's end, the fixture's override at its teardown."""
    from django.conf import settings

    before = settings.ASSISTANT_COMPACTION
    decorator = override_settings(ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": 12_000})
    fixture = override_settings(ASSISTANT_SUMMARIZER="anthropic")
    leaked = pytest.raises(pytest.fail.Exception, match="left Django's settings overridden")
    with leaked, settings_as_found():
        decorator.enable()
        fixture.enable()
        decorator.disable()
        fixture.disable()  # restores the settings it found: the decorator's
        assert compaction_config().CONTEXT_TOKEN_THRESHOLD == 12_000

    assert before == settings.ASSISTANT_COMPACTION
    assert compaction_config().CONTEXT_TOKEN_THRESHOLD == 50_000
    with settings_as_found(), override_settings(ASSISTANT_SUMMARIZER="anthropic"):
        pass  # undone in order: nothing to say


@pytest.mark.parametrize(
    ("written", "kept"),
    [
        ({"CONTEXT_TOKEN_THRESHOLD": 20_000}, "newest_step"),
        # Writing a key of the recent window no longer asks for it (`check` warns).
        ({"MIN_RECENT_MESSAGES": 4}, "newest_step"),
        ({"RECENT_FRACTION": 0.2}, "newest_step"),
        ({"MAX_RECENT_TOKENS": 8_000}, "newest_step"),
        ({"MAX_RECENT_TOKENS": 8_000, "VERBATIM_AFTER_SHIFT": "recent"}, "recent"),
        ({"VERBATIM_AFTER_SHIFT": "recent"}, "recent"),
    ],
)
def test_only_verbatim_after_shift_decides_what_a_shift_keeps(written, kept):
    assert kept == validated_config(written).VERBATIM_AFTER_SHIFT


@pytest.mark.parametrize(
    ("written", "named"),
    [
        ({"MAX_RECENT_TOKENS": 8_000}, ["MAX_RECENT_TOKENS"]),
        (
            {"MIN_RECENT_MESSAGES": 6, "RECENT_FRACTION": 0.4},  # even at their defaults
            ["MIN_RECENT_MESSAGES", "RECENT_FRACTION"],
        ),
        ({"MAX_RECENT_TOKENS": 8_000, "VERBATIM_AFTER_SHIFT": "recent"}, []),
        ({"MAX_RECENT_TOKENS": 8_000, "VERBATIM_AFTER_SHIFT": "newest_step"}, []),
        ({"CONTEXT_TOKEN_THRESHOLD": 20_000}, []),
        ({}, []),
    ],
)
def test_check_warns_of_a_recent_window_written_without_verbatim_after_shift(
    settings, written, named
):
    settings.ASSISTANT_COMPACTION = written

    warnings = recent_window_is_asked_for()

    assert [w.id for w in warnings] == (["assistant.W003"] if named else [])
    if named:
        message = warnings[0].msg
        assert all(f"ASSISTANT_COMPACTION[{name!r}]" in message for name in named)
        assert "ASSISTANT_COMPACTION['VERBATIM_AFTER_SHIFT'] is not" in message
        assert "'recent'" in warnings[0].hint
        out, err = StringIO(), StringIO()
        call_command("check", stdout=out, stderr=err)  # a warning: check still passes
        assert "(assistant.W003)" in err.getvalue()


def test_an_unknown_verbatim_after_shift_is_refused_naming_the_key():
    with pytest.raises(
        ImproperlyConfigured, match=r"'VERBATIM_AFTER_SHIFT'\] must be newest_step\|recent"
    ):
        validated_config({"VERBATIM_AFTER_SHIFT": "all"})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"TOOL_RESULT_CHAR_TRESHOLD": 10}, "Unknown ASSISTANT_COMPACTION keys"),
        ({"CONTEXT_TOKEN_THRESHOLD": "50k"}, "must be int"),
        ({"TOOL_POLICIES": {"run_sql": "shred"}}, "prune|summarize|keep"),
        ({"RECENT_FRACTION": True}, "'RECENT_FRACTION'\\] must be float"),
        # Before the ranges: 57 summarizer calls in 60 turns instead of 4.
        ({"CONTEXT_TOKEN_THRESHOLD": 0}, r"'CONTEXT_TOKEN_THRESHOLD'\] must be >= 100, got 0"),
        # Before the ranges: the window never shifted.
        ({"RECENT_FRACTION": 1.5}, r"'RECENT_FRACTION'\] must be >= 0 and < 1, got 1.5"),
        ({"RECENT_FRACTION": -0.1}, r"'RECENT_FRACTION'\] must be >= 0 and < 1, got -0.1"),
        ({"SOFT_WATERMARK": 1.2}, r"'SOFT_WATERMARK'\] must be > 0 and <= 1, got 1.2"),
        ({"MIN_CALLS_TO_DEDUP": 1}, r"'MIN_CALLS_TO_DEDUP'\] must be >= 2, got 1"),
        ({"MAX_FORK_DEPTH": -1}, r"'MAX_FORK_DEPTH'\] must be >= 0, got -1"),
        # Written against the other key's default: refused, saying which is the default.
        (
            {"MAX_RECENT_TOKENS": 60_000},
            r"'MAX_RECENT_TOKENS'\] \(60000\) must be below 'CONTEXT_TOKEN_THRESHOLD' "
            r"\(50000, the default\)",
        ),
        # Both written, contradicting each other: refused, naming both.
        (
            {"CONTEXT_TOKEN_THRESHOLD": 10_000, "MAX_RECENT_TOKENS": 20_000},
            r"'MAX_RECENT_TOKENS'\] \(20000\) must be below 'CONTEXT_TOKEN_THRESHOLD' \(10000\)",
        ),
        (
            {"TRUNCATION_KEEP_CHARS": 1500},
            r"'TRUNCATION_KEEP_CHARS'\] \(1500\) must be below 'TOOL_RESULT_CHAR_THRESHOLD' "
            r"\(1500, the default\)",
        ),
        (
            {"MIN_RECENT_MESSAGES": 40},
            r"'MIN_RECENT_MESSAGES'\] \(40\) must be below 'MAX_MESSAGES_BEFORE_SUMMARY'",
        ),
        (
            {"SUMMARY_STALL_SECONDS": 120},
            r"'SUMMARY_STALL_SECONDS'\] \(120.0\) must be below 'SUMMARY_LEASE_SECONDS' "
            r"\(120, the default\)",
        ),
        ({"SUMMARY_STALL_SECONDS": 0}, r"'SUMMARY_STALL_SECONDS'\] must be > 0, got 0.0"),
        # A chat that never waits for any summarizer, or one that waits for minutes.
        (
            {"SUMMARY_CHAT_DEADLINE_SECONDS": 0},
            r"'SUMMARY_CHAT_DEADLINE_SECONDS'\] must be > 0 and <= 600, got 0.0",
        ),
        (
            {"SUMMARY_CHAT_DEADLINE_SECONDS": 900},
            r"'SUMMARY_CHAT_DEADLINE_SECONDS'\] must be > 0 and <= 600, got 900.0",
        ),
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
        ASSISTANT_COMPACTION={"SOFT_WATERMARK": 1, "TOOL_POLICIES": {"a": "keep"}}
    ):
        config = compaction_config()

    assert config.SOFT_WATERMARK == 1.0
    assert config.policy_for("a") == "keep"
    assert config.policy_for("b") == "prune"


def test_the_compaction_settings_are_validated_once_per_change(settings, monkeypatch):
    validations = []
    real = conf.validated_config
    monkeypatch.setattr(conf, "validated_config", lambda o: validations.append(o) or real(o))
    settings.ASSISTANT_COMPACTION = {"MAX_RECENT_TOKENS": 3_000}

    first = compaction_config()
    assert compaction_config() is first
    with override_settings(ASSISTANT_COMPACTION={"MAX_RECENT_TOKENS": 2_000}):
        assert compaction_config().MAX_RECENT_TOKENS == 2_000
        assert compaction_config().MAX_RECENT_TOKENS == 2_000
    assert compaction_config().MAX_RECENT_TOKENS == 3_000
    settings.ASSISTANT_COMPACTION["MAX_RECENT_TOKENS"] = 1_000  # changed in place
    assert compaction_config().MAX_RECENT_TOKENS == 1_000

    assert validations == [
        {"MAX_RECENT_TOKENS": 3_000},
        {"MAX_RECENT_TOKENS": 2_000},
        {"MAX_RECENT_TOKENS": 3_000},
        {"MAX_RECENT_TOKENS": 1_000},
    ]


def test_every_numeric_compaction_key_declares_a_range():
    numeric = [f for f in fields(CompactionConfig) if f.type in (int, float)]

    assert "CONTEXT_TOKEN_THRESHOLD" in {f.name for f in numeric}
    assert [f.name for f in numeric if not str(f.metadata.get("range", ""))] == []


def test_a_renamed_compaction_key_is_refused_naming_the_new_one(monkeypatch):
    monkeypatch.setitem(RENAMED, "TOOL_RESULT_CHARS", "TOOL_RESULT_CHAR_THRESHOLD")

    with (
        override_settings(ASSISTANT_COMPACTION={"TOOL_RESULT_CHARS": 2000}),
        pytest.raises(
            ImproperlyConfigured,
            match=r"'TOOL_RESULT_CHARS'\] was renamed: use 'TOOL_RESULT_CHAR_THRESHOLD' instead",
        ),
    ):
        compaction_config()


# --- start-up and deployment settings (subprocesses: settings load once per process) ---------

BASE_DIR = Path(__file__).resolve().parent.parent
PRODUCTION = {
    # What docs/demo-environment.rst documents for a deployment behind a TLS proxy.
    "DJANGO_SECRET_KEY": "k3y-" + "x7Qp9vL2mZ8rT4wN6yB1cF5hJ0dG3sK" * 2,
    "DJANGO_DEBUG": "false",
    "DJANGO_ALLOWED_HOSTS": "chat.example.com",
    "DJANGO_BEHIND_TLS_PROXY": "true",
    "DJANGO_SECURE_SSL_REDIRECT": "true",
    "DJANGO_SECURE_COOKIES": "true",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_PRELOAD": "true",
    # A deployment summarizes with a provider: without a key, check warns (assistant.W001).
    "ANTHROPIC_API_KEY": "sk-ant-not-a-real-key",
}


def run_with(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "ASSISTANT_", "DATABASE_", "CELERY_", "REDIS_"))
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env={
            **inherited,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "ASSISTANT_VAR_DIR": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_a_secret_key_outside_debug_the_app_refuses_to_start(tmp_path):
    env = {key: value for key, value in PRODUCTION.items() if key != "DJANGO_SECRET_KEY"}

    refused = run_with(env, tmp_path, "check")
    in_debug = run_with({"DJANGO_DEBUG": "true"}, tmp_path, "check")

    assert refused.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false" in (
        refused.stderr
    )
    assert in_debug.returncode == 0, in_debug.stderr


def test_check_deploy_is_clean_with_the_documented_production_settings(tmp_path):
    clean = run_with(PRODUCTION, tmp_path, "check", "--deploy", "--fail-level", "WARNING")
    plain = {key: PRODUCTION[key] for key in ("DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS")}
    bare = run_with(plain, tmp_path, "check", "--deploy", "--fail-level", "WARNING")

    assert clean.returncode == 0, clean.stderr
    assert "System check identified no issues" in clean.stdout
    # Without them, Django names what is missing.
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in bare.stderr


def test_the_production_settings_come_from_the_environment(tmp_path):
    script = (
        "from django.conf import settings as s; print(s.SECURE_PROXY_SSL_HEADER, "
        "s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, "
        "s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS)"
    )

    result = run_with(PRODUCTION, tmp_path, "shell", "-c", script)

    assert result.stdout.strip().splitlines()[-1] == (
        "('HTTP_X_FORWARDED_PROTO', 'https') True True True 31536000 True"
    )


def test_docker_compose_requires_a_secret_key_and_probes_liveness():
    compose = (BASE_DIR / "docker-compose.yml").read_text()

    assert "DJANGO_SECRET_KEY: ${DJANGO_SECRET_KEY:?" in compose
    assert "change-me" not in compose
    assert "http://127.0.0.1:8000/healthz'" in compose


def test_the_demo_broker_keeps_its_control_folder_under_var(tmp_path):
    script = "from django.conf import settings as s; print(s.CELERY_BROKER_TRANSPORT_OPTIONS)"

    result = run_with({"DJANGO_DEBUG": "true"}, tmp_path, "shell", "-c", script)

    assert f"'control_folder': '{tmp_path / 'broker' / 'control'}'" in result.stdout
    assert (tmp_path / "broker" / "control").is_dir()


def test_an_out_of_range_threshold_stops_the_app_at_start_up(tmp_path):
    env = {"DJANGO_DEBUG": "true", "ASSISTANT_COMPACTION": '{"RECENT_FRACTION": 1.5}'}

    result = run_with(env, tmp_path, "check")

    assert result.returncode != 0
    assert "ASSISTANT_COMPACTION['RECENT_FRACTION'] must be >= 0 and < 1, got 1.5" in result.stderr


# --- settings as users write them ------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "followed"),
    [
        # The verbatim budget is 0.4 of the trigger, at most 20,000.
        ({"CONTEXT_TOKEN_THRESHOLD": 20_000}, {"MAX_RECENT_TOKENS": 8_000}),
        ({"CONTEXT_TOKEN_THRESHOLD": 200_000}, {"MAX_RECENT_TOKENS": 20_000}),
        # A truncation keeps 800/1500 of the threshold, at most 800 characters.
        ({"TOOL_RESULT_CHAR_THRESHOLD": 600}, {"TRUNCATION_KEEP_CHARS": 320}),
        # At least 6/40 of the message-count trigger stay verbatim, at most 6.
        ({"MAX_MESSAGES_BEFORE_SUMMARY": 20}, {"MIN_RECENT_MESSAGES": 3}),
        ({"MAX_MESSAGES_BEFORE_SUMMARY": 4}, {"MIN_RECENT_MESSAGES": 1}),
        # What the user wrote is kept as written.
        (
            {"CONTEXT_TOKEN_THRESHOLD": 20_000, "MAX_RECENT_TOKENS": 5_000},
            {"MAX_RECENT_TOKENS": 5_000},
        ),
    ],
)
def test_a_default_that_depends_on_another_setting_follows_it(written, followed):
    with override_settings(ASSISTANT_COMPACTION=written):
        config = compaction_config()

    assert {name: getattr(config, name) for name in followed} == followed


def test_a_trigger_written_alone_runs_a_conversation(conversation):
    # A threshold set alone, under the default verbatim budget, once stopped the app
    # ("MAX_RECENT_TOKENS (20000) must be below ...").
    over = []
    with override_settings(ASSISTANT_COMPACTION={"CONTEXT_TOKEN_THRESHOLD": 20_000}):
        for turn in range(12):
            ensure_context_summary(conversation)
            before = build_context(conversation).tokens.total
            tool_turn(conversation, f"Page {turn}?", [("fetch", {"n": turn}, html(8_000))])
            newest = build_context(conversation).tokens.total - before
            if before > 20_000 + newest:
                over.append(before)

    assert over == []
    shifts = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert shifts.count() == 1


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "RECENT_FRACTION": 0,
        "MIN_RECENT_MESSAGES": 4,
        "MAX_MESSAGES_BEFORE_SUMMARY": 12,
        "COMPACTION_TIMING": "eager",
    }
)
def test_recent_fraction_zero_keeps_exactly_min_recent_messages(conversation):
    # LangChain's keep=("messages", N): whatever the length of the window.
    messages = chat_turns(conversation, 7, size=2_000)

    assert choose_split(messages) == 14 - 4
    summary = ensure_context_summary(conversation)
    sent = build_context(conversation).messages

    assert summary
    assert [m["content"] for m in sent] == [m.content for m in messages[-4:]]


def test_the_system_check_warns_when_the_summarizer_has_no_key(settings, monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings.ASSISTANT_SUMMARIZER = "anthropic"
    settings.ANTHROPIC_API_KEY = ""
    settings.OPENAI_API_KEY = ""
    settings.GEMINI_API_KEY = ""
    out, err = StringIO(), StringIO()

    call_command("check", stdout=out, stderr=err)

    assert (
        "(assistant.W001) ASSISTANT_SUMMARIZER is 'anthropic' but neither "
        "settings.ANTHROPIC_API_KEY nor ANTHROPIC_API_KEY is set: summaries would be made by "
        "the offline summarizer." in err.getvalue()
    )
    assert [w.id for w in summarizer_can_run()] == ["assistant.W001"]
    # The key its SDK reads from the environment is followed.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-exported")
    assert summarizer_can_run() == []
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    settings.ASSISTANT_SUMMARIZER = "auto"
    assert summarizer_can_run()[0].msg == (
        "ASSISTANT_SUMMARIZER is 'auto' and none of settings.ANTHROPIC_API_KEY, "
        "ANTHROPIC_API_KEY, settings.OPENAI_API_KEY, OPENAI_API_KEY, settings.GEMINI_API_KEY, "
        "GOOGLE_API_KEY, GEMINI_API_KEY is set: summaries would be made by the offline "
        "summarizer."
    )
    settings.ANTHROPIC_API_KEY = "sk-ant-in-settings"
    assert summarizer_can_run() == []
    settings.ASSISTANT_SUMMARIZER = "offline"
    settings.ANTHROPIC_API_KEY = ""
    assert summarizer_can_run() == []


def test_the_first_offline_fallback_is_logged_once_per_process(settings, caplog, monkeypatch):
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    settings.ASSISTANT_SUMMARIZER = "gemini"
    settings.GEMINI_API_KEY = ""
    registry._warn_offline_once.cache_clear()
    caplog.set_level(logging.WARNING, logger="assistant.providers")

    first = llm.summarize("<conversation>user: ship the fix on Friday</conversation>")
    llm.summarize("<conversation>user: and the docs</conversation>")

    assert first.provider == "offline"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "summarizer_offline: ASSISTANT_SUMMARIZER is 'gemini' but neither "
        "settings.GEMINI_API_KEY nor GOOGLE_API_KEY nor GEMINI_API_KEY is set; summaries come "
        "from the offline summarizer"
    ]


def test_a_summarizer_call_that_could_outlive_its_lease_is_refused():
    # 40 s a try, 3 tries: a slow but healthy holder would lose its 120 s lease mid-call.
    with (
        override_settings(LLM_TIMEOUT_SECONDS=40.0, LLM_MAX_RETRIES=2),
        pytest.raises(ImproperlyConfigured) as refused,
    ):
        check_summarizer_deadline(compaction_config())

    assert str(refused.value) == (
        "LLM_TIMEOUT_SECONDS (40) times the attempts (LLM_MAX_RETRIES + 1 = 3) must be below "
        "ASSISTANT_COMPACTION['SUMMARY_LEASE_SECONDS'] (120): a slow summarizer call would "
        "outlive its lease"
    )
    with override_settings(LLM_TIMEOUT_SECONDS=39.0, LLM_MAX_RETRIES=2):
        assert check_summarizer_deadline(compaction_config()) is None


def test_a_summarizer_name_that_is_none_is_refused_not_taken_for_auto(settings):
    settings.ASSISTANT_SUMMARIZER = "claude"
    settings.ANTHROPIC_API_KEY = "sk-ant-in-settings"

    with pytest.raises(ImproperlyConfigured, match="'claude'"):
        registry.provider_name()
    with pytest.raises(SystemCheckError, match=r"assistant\.E001"):
        call_command("check", stdout=StringIO(), stderr=StringIO())
    settings.ASSISTANT_SUMMARIZER = "Anthropic"  # any case
    assert registry.provider_name() == "anthropic"


# --- one mechanism for every setting (assistant.settings.keys) -------------------------------


def refusal(setting: str, name: str, value: object) -> str:
    """What the app says of `value` written for `name` of `setting` (a dict setting's
    key, or for "app" a plain setting)."""
    try:
        if setting == "ASSISTANT_COMPACTION":
            validated_config({name: value})
        elif setting == "ASSISTANT_CLEANUP":
            cleanup_config({name: value})
        else:
            with override_settings(**{name: value}):
                app_setting(name)
    except ImproperlyConfigured as refused:
        return str(refused)
    return "accepted"


@pytest.mark.parametrize(
    ("setting", "name", "label"),
    [
        ("ASSISTANT_COMPACTION", "MAX_TOOL_CALLS", "ASSISTANT_COMPACTION['MAX_TOOL_CALLS']"),
        ("ASSISTANT_CLEANUP", "BATCH_SIZE", "ASSISTANT_CLEANUP['BATCH_SIZE']"),
        ("app", "ASSISTANT_MAX_TASK_DELIVERIES", "ASSISTANT_MAX_TASK_DELIVERIES"),
    ],
)
def test_each_declaration_refuses_a_bad_value_in_the_same_words(setting, name, label):
    # Three mechanisms before: the cleanup keys said "must be a positive integer", the
    # plain settings were not checked at all.
    assert refusal(setting, name, 0) == f"{label} must be >= 1, got 0"
    assert refusal(setting, name, "3") == f"{label} must be int, got '3'"
    assert refusal(setting, name, True) == f"{label} must be int, got True"
    assert refusal(setting, name, 3) == "accepted"


def test_a_dict_setting_refuses_unknown_keys_in_the_same_words():
    assert refusal("ASSISTANT_COMPACTION", "BATCH_SIZE", 1) == (
        "Unknown ASSISTANT_COMPACTION keys: BATCH_SIZE"
    )
    assert refusal("ASSISTANT_CLEANUP", "MAX_TOOL_CALLS", 1) == (
        "Unknown ASSISTANT_CLEANUP keys: MAX_TOOL_CALLS"
    )


@pytest.mark.parametrize("declaration", [CompactionConfig, CleanupConfig, AppSettings])
def test_every_numeric_key_of_every_declaration_declares_a_range(declaration):
    kinds = declared_types(declaration)
    numeric = [
        spec.name
        for spec in fields(declaration)
        if kinds[spec.name] in (int, float, int | None, float | None)
    ]

    assert numeric
    assert [
        name for name in numeric if "range" not in declared_keys(declaration)[name].metadata
    ] == []


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("LLM_MAX_RETRIES", -1, "LLM_MAX_RETRIES must be >= 0, got -1"),
        ("LLM_TIMEOUT_SECONDS", "30", "LLM_TIMEOUT_SECONDS must be float, got '30'"),
        ("ASSISTANT_SUMMARY_FALLBACK", "no", "ASSISTANT_SUMMARY_FALLBACK must be true or false"),
        ("OPENAI_BASE_URL", 8080, "OPENAI_BASE_URL must be a string"),
        ("ASSISTANT_MODEL_PRICES", {"m": {"input": "1"}}, "ASSISTANT_MODEL_PRICES must map names"),
    ],
)
def test_a_plain_setting_the_app_refuses_is_an_error_of_check(settings, name, value, message):
    setattr(settings, name, value)

    errors = app_settings_are_valid()

    assert [e.id for e in errors] == ["assistant.E002"]
    assert message in errors[0].msg
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        app_setting(name)
    with pytest.raises(SystemCheckError, match=r"assistant\.E002"):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_an_unknown_summarizer_is_refused_by_its_declaration_once(settings):
    settings.ASSISTANT_SUMMARIZER = "claude"

    refused = (
        "ASSISTANT_SUMMARIZER must be anthropic|openai|gemini|gemini_interactions|offline|auto,"
        " got 'claude'"
    )
    assert refusal("app", "ASSISTANT_SUMMARIZER", "claude") == refused
    errors = app_settings_are_valid() + summarizer_can_run()
    assert [(e.id, e.msg) for e in errors] == [("assistant.E001", refused)]
    # What the declaration admits is what the registry chooses from; blank is auto.
    assert registry.SUMMARIZER_CHOICES == (
        "anthropic",
        "openai",
        "gemini",
        "gemini_interactions",
        "offline",
        "auto",
    )
    assert set(registry.PROVIDERS) == set(registry.SUMMARIZER_CHOICES) - {"auto"}
    settings.ASSISTANT_SUMMARIZER = ""
    assert registry.summarizer_setting() == "auto"
    settings.ASSISTANT_SUMMARIZER = "OFFLINE"
    assert registry.summarizer_setting() == "offline"
    assert app_settings_are_valid() == []


def test_a_refused_api_key_is_not_shown(settings):
    settings.ANTHROPIC_API_KEY = b"sk-ant-hunter2"

    errors = app_settings_are_valid()

    assert [e.msg for e in errors] == [
        "ANTHROPIC_API_KEY must be a string of at most 4000 characters, got a bytes "
        "(not shown: a secret)"
    ]
