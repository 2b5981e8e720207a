"""Django system checks (`manage.py check`, and before runserver, migrate and
the worker's start): configuration that starts but would not do what it says."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from assistant.providers import (
    MODEL_SETTINGS,
    embeddings_off_reason,
    model_info,
    offline_reason,
    price_of,
)
from assistant.settings.app import app_setting, app_setting_problems
from assistant.settings.conf import recent_window_unasked

UNKNOWN_SUMMARIZER = "assistant.E001"
BAD_SETTING = "assistant.E002"
SUMMARIZER_OFFLINE = "assistant.W001"
UNKNOWN_MODEL = "assistant.W002"
RECENT_WINDOW_UNASKED = "assistant.W003"
EMBEDDINGS_OFF = "assistant.W004"


@checks.register(checks.Tags.compatibility)
def app_settings_are_valid(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """An error for each plain setting the app refuses (assistant/settings/app.py: the
    type and range declared beside its default): ASSISTANT_SUMMARIZER naming no
    summarizer is assistant.E001, any other assistant.E002."""
    return [
        checks.Error(
            problem,
            hint="A provider's name (anthropic, openai, gemini), offline, or auto."
            if name == "ASSISTANT_SUMMARIZER"
            else 'See docs/configuration.rst, "Other settings", for its type and range.',
            id=UNKNOWN_SUMMARIZER if name == "ASSISTANT_SUMMARIZER" else BAD_SETTING,
        )
        for name, problem in app_setting_problems().items()
    ]


@checks.register(checks.Tags.compatibility)
def summarizer_can_run(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Warn when the configured summarizer has no key, so the app would
    summarize with the offline summarizer (a setting the app refuses is
    app_settings_are_valid's error)."""
    try:
        reason = offline_reason()
    except ImproperlyConfigured:
        return []
    if reason is None:
        return []
    return [
        checks.Warning(
            f"{reason}: summaries would be made by the offline summarizer.",
            hint=(
                "Set the key in your Django settings (for example OPENAI_API_KEY = ...) or in "
                "the environment variable its SDK reads (ANTHROPIC_API_KEY, OPENAI_API_KEY, "
                "GOOGLE_API_KEY or GEMINI_API_KEY). Or set ASSISTANT_SUMMARIZER = 'offline' if "
                "that is meant."
            ),
            id=SUMMARIZER_OFFLINE,
        )
    ]


@checks.register(checks.Tags.compatibility)
def models_are_known(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Warn for each configured model no provider's table lists (docs/providers.rst):
    its window falls back to ASSISTANT_DEFAULT_CONTEXT_WINDOW, and without a price in
    ASSISTANT_MODEL_PRICES its calls are counted at zero."""
    if app_setting_problems():
        return []  # app_settings_are_valid's errors come first
    warnings: list[checks.CheckMessage] = []
    for setting, provider in MODEL_SETTINGS.items():
        model = str(app_setting(setting))
        gaps = [
            gap
            for gap, missing in (
                ("window", model_info(model, provider) is None),
                ("price", price_of(model) is None),
            )
            if missing
        ]
        if not gaps:
            continue
        gap = " and ".join(gaps)
        warnings.append(
            checks.Warning(
                f"settings.{setting} is {model!r}, whose {gap} no table lists.",
                hint=(
                    "Its window is ASSISTANT_DEFAULT_CONTEXT_WINDOW and its calls are counted "
                    "at zero: add its prices to ASSISTANT_MODEL_PRICES, or set "
                    "ASSISTANT_DEFAULT_CONTEXT_WINDOW to its window."
                ),
                id=UNKNOWN_MODEL,
            )
        )
    return warnings


@checks.register(checks.Tags.compatibility)
def recent_window_is_asked_for(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Warn when ASSISTANT_COMPACTION writes a key of the recent window
    (MIN_RECENT_MESSAGES, RECENT_FRACTION, MAX_RECENT_TOKENS) but not
    VERBATIM_AFTER_SHIFT: a shift keeps that window only under "recent", and
    writing them no longer asks for it."""
    written = recent_window_unasked(getattr(settings, "ASSISTANT_COMPACTION", None) or {})
    if not written:
        return []
    names = ", ".join(f"ASSISTANT_COMPACTION[{name!r}]" for name in written)
    return [
        checks.Warning(
            f"{names} set, but ASSISTANT_COMPACTION['VERBATIM_AFTER_SHIFT'] is not: it is "
            "'newest_step', so a window shift keeps only the newest step verbatim, not the "
            "recent window those keys size.",
            hint=(
                "Set ASSISTANT_COMPACTION['VERBATIM_AFTER_SHIFT'] = 'recent' to keep the recent "
                "window, or 'newest_step' to keep the default and silence this warning."
            ),
            id=RECENT_WINDOW_UNASKED,
        )
    ]


@checks.register(checks.Tags.compatibility)
def embeddings_can_run(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """An error when the embedding settings ask for a model or a dimension count the app
    refuses (assistant.E002: a count the model cannot produce, over pgvector's HNSW limit,
    or unknown for an unlisted model); a warning when the chosen provider cannot run (no
    key, its extra not installed), so search would be full-text alone (assistant.W004)."""
    if app_setting_problems():
        return []  # app_settings_are_valid's errors come first
    hint = 'See docs/operations.rst, "Where embeddings come from".'
    try:
        reason = embeddings_off_reason()
    except ImproperlyConfigured as refused:
        return [checks.Error(str(refused), hint=hint, id=BAD_SETTING)]
    if reason is None:
        return []
    return [
        checks.Warning(
            f"{reason}: search_history would be full-text search alone.",
            hint=f"{hint} Or set ASSISTANT_EMBEDDINGS = 'off' if that is meant.",
            id=EMBEDDINGS_OFF,
        )
    ]
