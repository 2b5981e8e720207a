"""Django system checks (`manage.py check`, and before runserver, migrate and
the worker's start): configuration that starts but would not do what it says."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from assistant.providers import MODEL_SETTINGS, model_info, offline_reason, price_of
from assistant.settings.app import app_setting

UNKNOWN_SUMMARIZER = "assistant.E001"
SUMMARIZER_OFFLINE = "assistant.W001"
UNKNOWN_MODEL = "assistant.W002"


@checks.register(checks.Tags.compatibility)
def summarizer_can_run(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Warn when the configured summarizer has no key, so the app would
    summarize with the offline summarizer; an error when ASSISTANT_SUMMARIZER names
    no summarizer at all."""
    try:
        reason = offline_reason()
    except ImproperlyConfigured as error:
        return [
            checks.Error(
                str(error),
                hint="A provider's name (anthropic, openai, gemini), offline, or auto.",
                id=UNKNOWN_SUMMARIZER,
            )
        ]
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
