"""Deterministic extraction of what later turns need verbatim: ids, paths, URLs, numbers...

Runs in workers over large tool results, so every pattern is precompiled and linear.
"""

from __future__ import annotations

import re

_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
_UNITS = (
    r"(?:%|ms|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?|months?|years?"
    r"|[KMGT]i?B|bytes?|tokens?|chars?|characters?|words?|rows?|items?|users?|requests?"
    r"|px|em|rem|pt|mm|cm|km|m|kg|g|lbs?|USD|EUR|GBP|k|K|M|x)"
)

# Token-level categories, in the order they claim text: once a category matched a span, the
# span is blanked so a later category cannot match inside it (no path inside a URL).
_TOKEN_PATTERNS = [
    re.compile(r"\bhttps?://[^\s<>\"'`)\]}]+", re.I),
    re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"),
    re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
    # absolute or ~/./.. paths with two or more segments, and relative paths with an extension
    re.compile(r"(?<![\w/.])(?:~|\.{1,2})?(?:/[\w.@%+-]+){2,}/?|\b[\w.-]+(?:/[\w.-]+)+\.[A-Za-z]\w{0,5}\b"),
    re.compile(
        r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
        r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
        rf"|\b{_MONTHS} \d{{1,2}}(?:st|nd|rd|th)?,? \d{{4}}\b|\b\d{{1,2}} {_MONTHS},? \d{{4}}\b"
    ),
    # ids: post-1234, ORD-2024-0042, call_1, user_42
    re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*[-_]\d+\b"),
    re.compile(r"(?<![\w&])#\d+\b"),
    re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b"),
    re.compile(
        r"[$€£]\s?\d[\d,]*(?:\.\d+)?(?:\s?[kKmMbB]n?\b)?"
        rf"|\b\d[\d,]*(?:\.\d+)?\s?{_UNITS}(?![\w])"
        r"|\b\d+(?:\.\d+)+\b|\b\d{1,3}(?:,\d{3})+\b"
    ),
]
_QUOTED = re.compile(r"\"([A-Z0-9][^\"\n]{1,148}[^\"\s])\"|“([^”\n]{2,150})”")
_SQL_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN)\s+[`\"\[]?([A-Za-z_][\w.]*)")
_ERROR_WORD = re.compile(
    r"\w*(?:Error|Exception)\b|\b(?:failed|errno|ERRNO)\b|\bHTTP\s?[45]\d\d\b"
    r"|\b[45]\d\d (?:Bad|Not|Internal|Service|Too|Unauthorized|Forbidden|Gateway)\b"
)
_TRAILING = ".,;:!?'\"”’)]}>"
_MAX_ERROR_CHARS = 200


def _blank(match: re.Match[str]) -> str:
    return " " * (match.end() - match.start())


def _error_lines(text: str) -> list[tuple[int, str]]:
    found = []
    last_line_start = -1
    for match in _ERROR_WORD.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        if start == last_line_start:
            continue
        last_line_start = start
        end = text.find("\n", match.end())
        end = len(text) if end == -1 else end
        # long lines (a one-line JSON blob): keep a window around the keyword
        lo = max(start, match.start() - _MAX_ERROR_CHARS // 2)
        line = text[lo : min(end, lo + _MAX_ERROR_CHARS)].strip()
        if line:
            found.append((lo, line))
    return found


def extract_identifiers(text: str) -> list[str]:
    """Identifiers in order of first appearance, without duplicates."""
    if not text:
        return []
    found: list[tuple[int, str]] = []
    masked = text
    for pattern in _TOKEN_PATTERNS:
        hits = [(m.start(), m.group().rstrip(_TRAILING)) for m in pattern.finditer(masked)]
        if hits:
            found.extend(hits)
            masked = pattern.sub(_blank, masked)
    found.extend((m.start(), m.group(1) or m.group(2)) for m in _QUOTED.finditer(text))
    found.extend((m.start(1), m.group(1)) for m in _SQL_TABLE.finditer(text))
    found.extend(_error_lines(text))
    found.sort(key=lambda item: item[0])
    seen: set[str] = set()
    result = []
    for _, value in found:
        value = value.strip()
        if len(value) > 1 and value not in seen:
            seen.add(value)
            result.append(value)
    return result
