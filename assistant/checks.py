"""Django system checks (`manage.py check`, and before runserver, migrate and
the worker's start): configuration that starts but would not do what it says."""

from __future__ import annotations

from typing import Any

from django.core import checks

from assistant.llm import offline_reason

SUMMARIZER_OFFLINE = "assistant.W001"


@checks.register(checks.Tags.compatibility)
def summarizer_can_run(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Warn when the configured summarizer has no key, so the app would
    summarize with the offline summarizer."""
    reason = offline_reason()
    if reason is None:
        return []
    return [
        checks.Warning(
            f"{reason}: summaries would be made by the offline summarizer.",
            hint=(
                "Set the key in your Django settings (for example ANTHROPIC_API_KEY = "
                "os.environ['ANTHROPIC_API_KEY']): the app reads Django settings only, never "
                "environment variables. Or set ASSISTANT_SUMMARIZER = 'offline' if that is meant."
            ),
            id=SUMMARIZER_OFFLINE,
        )
    ]
