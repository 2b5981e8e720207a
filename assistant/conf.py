"""The one place for compaction thresholds: `settings.ASSISTANT_COMPACTION`.

A deployment overrides any key (in settings, or as a JSON object in the
ASSISTANT_COMPACTION environment variable); unknown keys and wrong types are
refused so a typo cannot silently fall back to a default.
"""

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

ToolPolicy = Literal["prune", "summarize", "keep"]


@dataclass(frozen=True)
class CompactionConfig:
    # DESIGN section 6
    TOOL_RESULT_CHAR_THRESHOLD: int = 1500
    TRUNCATION_KEEP_CHARS: int = 800
    CONTEXT_TOKEN_THRESHOLD: int = 50_000
    MAX_MESSAGES_BEFORE_SUMMARY: int = 40
    MIN_RECENT_MESSAGES: int = 6
    RECENT_FRACTION: float = 0.4
    MAX_RECENT_TOKENS: int = 20_000
    MIN_CALLS_TO_DEDUP: int = 2
    MAX_FORK_DEPTH: int = 3
    CHARS_PER_TOKEN: int = 4
    # Input limits
    MAX_CONTENT_BYTES: int = 5 * 1024 * 1024
    # Per-tool policy: "prune" (summarize or truncate past the threshold, dedup),
    # "summarize" (always summarize past the threshold), "keep" (never touch).
    TOOL_POLICIES: dict[str, ToolPolicy] = field(default_factory=dict)
    DEFAULT_TOOL_POLICY: ToolPolicy = "prune"
    # Pre-build the next window summary in the worker past this share of the trigger.
    SOFT_WATERMARK: float = 0.8
    # A summary lease older than this is considered abandoned (its holder died).
    SUMMARY_LEASE_SECONDS: int = 120
    # How long a pre-exchange caller waits for another process's summary.
    SUMMARY_WAIT_SECONDS: float = 30.0
    # The summarizer's input is cut into chunks of at most this many tokens.
    SUMMARIZER_MAX_INPUT_TOKENS: int = 60_000
    # Identifiers carried forward from summary to summary, at most this many chars.
    CARRIED_IDENTIFIERS_MAX_CHARS: int = 10_000
    # Key details listed under a truncated tool result, at most this many chars.
    TRUNCATION_DETAILS_MAX_CHARS: int = 600
    # Cap of the offline summarizer's output.
    OFFLINE_SUMMARY_MAX_CHARS: int = 6000
    # Emergency level 1 keeps this share of the usual recent window.
    EMERGENCY_RECENT_FRACTION: float = 0.2

    def policy_for(self, tool_name: str | None) -> ToolPolicy:
        return self.TOOL_POLICIES.get(tool_name or "", self.DEFAULT_TOOL_POLICY)


_POLICIES = {"prune", "summarize", "keep"}


def _coerce(name: str, expected: Any, value: Any) -> Any:
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected in (int, float) and (isinstance(value, bool) or not isinstance(value, expected)):
        raise ImproperlyConfigured(f"ASSISTANT_COMPACTION[{name!r}] must be {expected.__name__}")
    return value


def compaction_config() -> CompactionConfig:
    """Defaults merged with settings.ASSISTANT_COMPACTION; read on each call so
    `override_settings` and per-test settings take effect."""
    overrides = dict(getattr(settings, "ASSISTANT_COMPACTION", None) or {})
    known = {f.name: f for f in fields(CompactionConfig)}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ImproperlyConfigured(f"Unknown ASSISTANT_COMPACTION keys: {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, value in overrides.items():
        declared = known[name].type
        if declared in ("int", int):
            values[name] = _coerce(name, int, value)
        elif declared in ("float", float):
            values[name] = _coerce(name, float, value)
        else:
            values[name] = value
    policies = values.get("TOOL_POLICIES", {})
    if not isinstance(policies, dict) or not set(policies.values()) <= _POLICIES:
        raise ImproperlyConfigured(
            "ASSISTANT_COMPACTION['TOOL_POLICIES'] must map tool names to prune|summarize|keep"
        )
    if values.get("DEFAULT_TOOL_POLICY", "prune") not in _POLICIES:
        raise ImproperlyConfigured(
            "ASSISTANT_COMPACTION['DEFAULT_TOOL_POLICY'] must be prune|summarize|keep"
        )
    return CompactionConfig(**values)
