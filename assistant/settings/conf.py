"""The one place for compaction thresholds: `settings.ASSISTANT_COMPACTION`.

A host project sets it in its Django settings (the app reads settings only,
never the environment; this repository's demo project fills it from the
ASSISTANT_COMPACTION environment variable, a JSON object). Every key declares
its type and valid range next to its default (`key(default, ...)`, checked by
assistant.settings.keys as every declaration's keys are); unknown
keys, renamed keys, wrong types, values out of range and contradicting keys
are refused with ImproperlyConfigured naming the key, at start-up
(AssistantConfig.ready) and on every read, so a typo never falls back
silently to a default.

Cross-key rules (`_BELOW`): the smaller key's default follows the larger key
when the user did not write it, keeping the proportion of the two defaults
(MAX_RECENT_TOKENS is 0.4 of CONTEXT_TOKEN_THRESHOLD, at most 20,000), so a
derived default is never refused. The larger key is the one users tune and
never follows: a smaller value the user wrote against it is refused, naming
both keys and saying which value is the default.

Adding a key is one line: `NAME: int = key(10, at_least=1)  # what it does`.
"""

import copy
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from assistant.settings.app import app_setting
from assistant.settings.keys import key, validated

ToolPolicy = Literal["prune", "summarize", "keep"]
POLICIES = ("prune", "summarize", "keep")


@dataclass(frozen=True)
class CompactionConfig:
    # The strategies of docs/compaction.rst
    TOOL_RESULT_CHAR_THRESHOLD: int = key(1500, at_least=1)
    TRUNCATION_KEEP_CHARS: int = key(800, at_least=1)  # < TOOL_RESULT_CHAR_THRESHOLD, follows it
    CONTEXT_TOKEN_THRESHOLD: int = key(50_000, at_least=100)
    # The hard ceiling: no request goes over this share of the answering model's window
    # less its output cap (the catalog's), whatever CONTEXT_TOKEN_THRESHOLD says; below
    # the trigger it is the trigger, and MAX_RECENT_TOKENS and PINNED_MAX_TOKENS follow
    # it (assistant.window.limits, docs/compaction.rst "The hard ceiling").
    CONTEXT_CEILING_FRACTION: float = key(0.8, above=0, at_most=1)
    MAX_MESSAGES_BEFORE_SUMMARY: int = key(40, at_least=2)
    MIN_RECENT_MESSAGES: int = key(6, at_least=1)  # < MAX_MESSAGES_BEFORE_SUMMARY, follows it
    # 0 keeps exactly MIN_RECENT_MESSAGES (LangChain's keep=("messages", N)).
    RECENT_FRACTION: float = key(0.4, at_least=0, below=1)
    # Follows CONTEXT_TOKEN_THRESHOLD unless written: 0.4 of it, at most 20,000.
    MAX_RECENT_TOKENS: int = key(20_000, at_least=1)  # < CONTEXT_TOKEN_THRESHOLD
    # What a shift keeps verbatim: "newest_step", what every request must send (the
    # turn's user message, the newest step, the pins), the rest summarized, indexed and
    # recallable; "recent", the recent window above (MIN_RECENT_MESSAGES,
    # RECENT_FRACTION, MAX_RECENT_TOKENS). Writing those three alone does not change it
    # (`manage.py check` warns, assistant.W003: recent_window_unasked).
    VERBATIM_AFTER_SHIFT: Literal["newest_step", "recent"] = "newest_step"
    MIN_CALLS_TO_DEDUP: int = key(2, at_least=2)
    MAX_FORK_DEPTH: int = key(3, at_least=0)
    CHARS_PER_TOKEN: int = key(4, at_least=1, at_most=16)
    # Input limits (add_message refuses more, with a ValidationError)
    MAX_CONTENT_BYTES: int = key(5 * 1024 * 1024, at_least=1)
    MAX_TOOL_CALLS: int = key(256, at_least=1)  # tool calls in one assistant message
    MAX_TOOL_CALLS_BYTES: int = key(5 * 1024 * 1024, at_least=1)  # one message's calls, JSON
    MAX_METADATA_BYTES: int = key(256 * 1024, at_least=1)  # one message's metadata, as JSON
    MAX_JSON_DEPTH: int = key(64, at_least=1, at_most=500)  # nesting of arguments, metadata
    # Per-tool policy: "prune" (summarize or truncate past the threshold, dedup),
    # "summarize" (always summarize past the threshold), "keep" (never touch).
    TOOL_POLICIES: dict[str, ToolPolicy] = field(default_factory=dict)
    DEFAULT_TOOL_POLICY: ToolPolicy = "prune"
    # Pre-build the next window summary in the worker past this share of the trigger.
    SOFT_WATERMARK: float = key(0.8, above=0, at_most=1)
    # Once a Celery worker serves the conversation, ask it for the next window
    # summary inside a turn, and let every shift the request does not need to fit
    # wait for it (assistant.summary.worker): the chat waits on the summarizer only to
    # fit the trigger. Off: the hook summarizes early shifts itself (a chat much
    # faster than its worker shifts later and sends more tokens; `make bench`,
    # "summaries off the chat path", measures both).
    PREBUILD_IN_TURN: bool = True
    # A summary lease older than this is considered abandoned (its holder died).
    SUMMARY_LEASE_SECONDS: int = key(120, at_least=1)
    # How long an early shift waits for the summary it asked the worker for.
    SUMMARY_WAIT_SECONDS: float = key(30.0, at_least=0)
    # The chat path's deadline for a summary it needs to fit the trigger: the most it
    # waits for another process's, or for its own summarizer call (whatever
    # LLM_TIMEOUT_SECONDS and LLM_MAX_RETRIES say); past it the shift is made with the
    # offline summarizer (docs/operations.rst, "Faults").
    SUMMARY_CHAT_DEADLINE_SECONDS: float = key(5.0, above=0, at_most=600)
    # A lease holder whose heartbeat stopped for this long (a frozen or partitioned
    # process) is given up on and its lease taken over (< SUMMARY_LEASE_SECONDS):
    # see assistant.summary.leases.
    SUMMARY_STALL_SECONDS: float = key(1.0, above=0)
    # The summarizer's input is cut into chunks of at most this many tokens.
    SUMMARIZER_MAX_INPUT_TOKENS: int = key(60_000, at_least=500)
    # Fact statements carried forward from summary to summary, at most this many tokens.
    CARRIED_FACTS_MAX_TOKENS: int = key(1500, at_least=0, at_most=10_000)
    # Key details listed under a truncated tool result, at most this many chars.
    TRUNCATION_DETAILS_MAX_CHARS: int = key(600, at_least=0)
    # Names (definitions, paths, keys, code-shaped names) of a truncated tool result
    # that its preview does not show, listed under it, at most this many chars.
    TRUNCATION_NAMES_MAX_CHARS: int = key(1200, at_least=0)
    # Cap of the offline summarizer's output.
    OFFLINE_SUMMARY_MAX_CHARS: int = key(6000, at_least=100)
    # Emergency level 1 keeps this share of the usual recent window.
    EMERGENCY_RECENT_FRACTION: float = key(0.2, above=0, below=1)
    # Inside a turn (agent loops): past this share of the token trigger the
    # pre-call hook compacts consumed tool results, except the newest few,
    # and only in batches that free at least COMPACT_MIN_FREE_TOKENS.
    COMPACT_WATERMARK: float = key(0.3, above=0, at_most=1)
    KEEP_NEWEST_TOOL_RESULTS: int = key(3, at_least=0)
    COMPACT_MIN_FREE_TOKENS: int = key(3000, at_least=0)
    # What a first window summary is expected to take, to judge an early shift.
    SUMMARY_ESTIMATE_TOKENS: int = key(2000, at_least=1)
    # When compaction prepared by the worker is applied: "cache_aware" (near
    # the token trigger, or once the provider's prompt cache has expired) or
    # "eager" (right away, for providers or deployments without prompt caching).
    COMPACTION_TIMING: Literal["cache_aware", "eager"] = "cache_aware"
    # The provider's prompt-cache lifetime where no request recorded the one it chose
    # (CACHE_LIFETIME): 300 (Anthropic's default), 3600 for its 1-hour cache.
    CACHE_TTL_SECONDS: int = key(300, at_least=1)
    # Each request's prompt-cache lifetime (docs/compaction.rst, "Cache lifetimes"): "auto"
    # (chosen per conversation from its gaps and the planned rewrite, where the provider
    # sells more than one), or one fixed: "5m" or "1h" (Anthropic), "in_memory" or "24h"
    # (OpenAI, 24h where the model offers it); a lifetime the provider does not sell
    # falls back to its default.
    CACHE_LIFETIME: Literal["auto", "5m", "1h", "in_memory", "24h"] = "auto"
    # Send `prompt_cache_key` to OpenAI-compatible servers other than OpenAI's own API too.
    PROMPT_CACHE_KEY_COMPATIBLE: bool = False
    # How a window summary is asked for: "transcript" (the summary model reads the
    # newly old messages as a fresh transcript, input at 1.0x) or "cached_suffix" (the
    # chat model gets the conversation's own request, which its prompt cache holds, with
    # the summary instruction appended: input mostly at the cache-read price).
    SUMMARY_REQUEST: Literal["transcript", "cached_suffix"] = "transcript"
    # Whose compaction keeps the context under the trigger (docs/provider-compaction.rst):
    # "ours" (the window shift); "provider" (the provider's own server-side compaction
    # at CONTEXT_TOKEN_THRESHOLD where chat_step's wire has one: Anthropic's
    # compact_20260112, the Responses API's compaction; ours elsewhere, and after a
    # compaction of theirs that failed); "auto" (ours, but each window shift it would
    # make is the provider's on-demand compaction where the wire has one: Anthropic's).
    PROVIDER_COMPACTION: Literal["ours", "provider", "auto"] = "ours"
    # A failed summary (or one that would not shrink the context) is retried
    # for the same split only after this delay, doubled at each failure.
    SUMMARY_RETRY_SECONDS: int = key(60, at_least=1)
    # The artifact index (files, URLs, record ids, the summarized results with the names
    # found in them, each with the handle of its latest original) the window summary
    # carries, at most this many tokens (and at most half the summary's room). A long
    # agent session summarizes hundreds of results, about ten tokens each: 800 named only
    # the newest fifty or so, and what an agent needs again often lies further back;
    # with a shift keeping only the newest step verbatim, the index is where the model
    # finds the names the older steps held.
    ARTIFACT_INDEX_MAX_TOKENS: int = key(3000, at_least=0, at_most=10_000)
    # The recall tools (assistant.recall): the characters of an original one recall
    # page shows (its frame on top) and a search result's cap, and the most matches
    # search_history lists.
    RECALL_MAX_CHARS: int = key(8000, at_least=1000, at_most=200_000)
    SEARCH_MAX_RESULTS: int = key(8, at_least=1, at_most=50)
    # Pinned messages (docs/compaction.rst, "Pinned messages"): what they may take in
    # all, in tokens. Below the trigger minus MAX_RECENT_TOKENS; unless written it
    # follows that room (4,000 of the defaults' 30,000).
    PINNED_MAX_TOKENS: int = key(4000, at_least=0)
    # The language summaries are written in: "auto" (that of the conversation's user
    # messages, assistant.text.language) or a language's name ("French").
    SUMMARY_LANGUAGE: str = "auto"
    # The deployment's own instructions, added to every summarizer prompt.
    SUMMARY_INSTRUCTIONS: str = ""

    def policy_for(self, tool_name: str | None) -> ToolPolicy:
        return self.TOOL_POLICIES.get(tool_name or "", self.DEFAULT_TOOL_POLICY)


# Keys that were renamed: the old name is refused, naming the new one.
RENAMED: dict[str, str] = {"CARRIED_IDENTIFIERS_MAX_CHARS": "CARRIED_FACTS_MAX_TOKENS"}

# The keys of the recent window a shift keeps verbatim under VERBATIM_AFTER_SHIFT
# "recent" (under "newest_step" a shift keeps none of it; staff's and emergency
# level 1's shifts, which ask for a recent window, still read them).
RECENT_WINDOW_KEYS = ("MIN_RECENT_MESSAGES", "RECENT_FRACTION", "MAX_RECENT_TOKENS")

# (smaller key, larger key, why): the first must stay below the second, and
# its default follows the second (see the module doc).
_BELOW = (
    (
        "MAX_RECENT_TOKENS",
        "CONTEXT_TOKEN_THRESHOLD",
        "the verbatim tail alone would reach the trigger, so every request would shift",
    ),
    (
        "TRUNCATION_KEEP_CHARS",
        "TOOL_RESULT_CHAR_THRESHOLD",
        "a truncated result would be as long as the results left whole",
    ),
    (
        "MIN_RECENT_MESSAGES",
        "MAX_MESSAGES_BEFORE_SUMMARY",
        "a shift would have to keep every message, so the window could never shift",
    ),
    (
        "SUMMARY_STALL_SECONDS",
        "SUMMARY_LEASE_SECONDS",
        "a holder's lease would expire before it could be judged stalled",
    ),
)


def validated_config(overrides: dict[str, Any]) -> CompactionConfig:
    """Defaults merged with `overrides`, every key checked (see the module doc)."""
    values = validated("ASSISTANT_COMPACTION", CompactionConfig, overrides, RENAMED)
    known = {f.name: f for f in fields(CompactionConfig)}
    config = CompactionConfig(**values)
    derived: dict[str, Any] = {}
    for smaller, larger, why in _BELOW:
        if smaller not in values:
            derived[smaller] = _following(smaller, larger, getattr(config, larger), known)
        elif values[smaller] >= getattr(config, larger):
            written = "" if larger in values else ", the default"
            raise ImproperlyConfigured(
                f"ASSISTANT_COMPACTION[{smaller!r}] ({values[smaller]}) must be below "
                f"{larger!r} ({getattr(config, larger)}{written}): {why}"
            )
    return _with_pin_room(replace(config, **derived), values, known)


def recent_window_unasked(overrides: dict[str, Any]) -> list[str]:
    """The recent-window keys `overrides` writes while it leaves VERBATIM_AFTER_SHIFT
    unwritten: a deployment that may expect a shift to keep that window, which it keeps
    only under VERBATIM_AFTER_SHIFT "recent"."""
    if not isinstance(overrides, dict) or "VERBATIM_AFTER_SHIFT" in overrides:
        return []
    return [name for name in RECENT_WINDOW_KEYS if name in overrides]


def _with_pin_room(
    config: CompactionConfig, values: dict[str, Any], known: dict[str, Any]
) -> CompactionConfig:
    """PINNED_MAX_TOKENS below the room the trigger leaves beside the verbatim window
    (CONTEXT_TOKEN_THRESHOLD - MAX_RECENT_TOKENS); unless written, it follows that room."""
    room = config.CONTEXT_TOKEN_THRESHOLD - config.MAX_RECENT_TOKENS
    if "PINNED_MAX_TOKENS" not in values:
        default_room = known["CONTEXT_TOKEN_THRESHOLD"].default - known["MAX_RECENT_TOKENS"].default
        pinned = known["PINNED_MAX_TOKENS"].default
        return replace(config, PINNED_MAX_TOKENS=min(pinned, room * pinned // default_room))
    if room <= config.PINNED_MAX_TOKENS:
        raise ImproperlyConfigured(
            f"ASSISTANT_COMPACTION['PINNED_MAX_TOKENS'] ({config.PINNED_MAX_TOKENS}) must be "
            f"below CONTEXT_TOKEN_THRESHOLD - MAX_RECENT_TOKENS ({room}): the pinned messages "
            "and the verbatim window would fill the trigger, so every request would shift"
        )
    return config


def _following(smaller: str, larger: str, value: int, known: dict[str, Any]) -> int:
    """The default of `smaller` when `larger` is `value`: its own default, or
    less, keeping the proportion of the two defaults; at least 1."""
    default, larger_default = known[smaller].default, known[larger].default
    return max(1, min(default, math.floor(value * default / larger_default)))


def check_summarizer_deadline(config: CompactionConfig) -> None:
    """A summarizer call ends (every attempt at LLM_TIMEOUT_SECONDS) before
    the summary lease is presumed dead: else a holder whose call is only slow
    loses its lease to an ordinary claim and the summary is made twice."""
    timeout = float(app_setting("LLM_TIMEOUT_SECONDS"))
    attempts = int(app_setting("LLM_MAX_RETRIES")) + 1
    if timeout * attempts >= config.SUMMARY_LEASE_SECONDS:
        raise ImproperlyConfigured(
            f"LLM_TIMEOUT_SECONDS ({timeout:g}) times the attempts (LLM_MAX_RETRIES + 1 = "
            f"{attempts}) must be below ASSISTANT_COMPACTION['SUMMARY_LEASE_SECONDS'] "
            f"({config.SUMMARY_LEASE_SECONDS}): a slow summarizer call would outlive its lease"
        )


# The settings last validated (a deep copy) and their config. compaction_config() runs
# several times for every stored message: validating the same settings each time cost
# more than the message's queries. Compared by value, so a dict changed in place is
# validated anew; dropped when a setting changes (override_settings sends the signal).
_validated: tuple[dict[str, Any], CompactionConfig] | None = None


def compaction_config() -> CompactionConfig:
    """Defaults merged with settings.ASSISTANT_COMPACTION; validated once per
    value of the setting, so `override_settings` and per-test settings take effect."""
    global _validated
    overrides = dict(getattr(settings, "ASSISTANT_COMPACTION", None) or {})
    cached = _validated
    if cached is not None and cached[0] == overrides:
        return cached[1]
    config = validated_config(overrides)
    _validated = (copy.deepcopy(overrides), config)
    return config


def _forget_validated(*, setting: str, **kwargs: Any) -> None:
    global _validated
    if setting == "ASSISTANT_COMPACTION":
        _validated = None


setting_changed.connect(_forget_validated, dispatch_uid="assistant.settings.conf.compaction_config")
