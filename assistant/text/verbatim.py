"""Deterministic extraction of what later turns need verbatim: ids, paths, URLs, numbers...

Nothing here knows a workload: ids are recognized by shape (letters and digits in either
case, hex, UUIDs, hashes, dashed or underscored codes), as are emails, URLs, paths,
amounts with a currency, error codes and lines, code names and people's names.

Runs in workers over large tool results, so it avoids regexes that try every position of
the text: the full-text patterns start with a literal or a narrow character set (which `re`
scans for quickly), and the rest runs only on whitespace-separated tokens that contain a
digit, `/`, `\\`, `_`, `#` or a currency sign. Quantifiers are bounded so pathological
input stays linear.
"""

from __future__ import annotations

import re

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]{0,6}\.?"
_UNIT = (
    r"(?:%|ms|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?|months?|years?"
    r"|[KMGT]i?B|bytes?|tokens?|chars?|characters?|words?|rows?|items?|users?|requests?"
    r"|px|em|rem|pt|mm|cm|km|m|kg|g|lbs?|USD|EUR|GBP|k|K|M|x)"
)

# On the full text; each starts with a literal or a narrow character set (no leading \b,
# which would make `re` try every position).
_URL = re.compile(r"https?://[^\s<>\"'`)\]}]{1,2000}", re.I)
_EMAIL_DOMAIN = re.compile(r"@[\w-]{1,63}(?:\.[\w-]{1,63}){1,8}\b")
_EMAIL_LOCAL = re.compile(r"[\w.+-]{1,64}\Z")
_MONTH_DATE = re.compile(rf"{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?,? \d{{4}}\b")
_QUOTED = re.compile(r"\"([A-Z0-9][^\"\n]{1,148}[^\"\s])\"|“([^”\n]{2,150})”")
_SQL_TABLE = re.compile(r"(?:FROM|INTO|UPDATE|JOIN)\s{1,20}[`\"\[]?([A-Za-z_][\w.]{0,100})")
# POSIX errno names (ENOENT) and constant-like error codes (ERR_CONNECTION_REFUSED).
_ERRNO_NAMES = (
    "ENOENT|EACCES|EPERM|EEXIST|EISDIR|ENOTDIR|ENOTEMPTY|EINVAL|EAGAIN|EBUSY|EBADF|EPIPE"
    "|ENOSPC|EMFILE|ENOMEM|EROFS|EXDEV|ELOOP|ENAMETOOLONG|ECONNREFUSED|ECONNRESET"
    "|ECONNABORTED|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EADDRINUSE|EADDRNOTAVAIL|ENOTFOUND"
    "|EAI_AGAIN|ENOTCONN|EINTR|EIO|ENOSYS|ENOTSUP|EPROTO|ESRCH|ECHILD|EDEADLK"
)
_ERROR_CODE = re.compile(rf"\b(?:{_ERRNO_NAMES}|ERR_[A-Z0-9_]{{2,40}})\b")
# Two or three capitalized words after a lowercase word or a comma: "author is Dmitri Brennan".
_NAME = re.compile(r"(?<=[a-z,] )[A-Z][a-z]{1,30}(?: [A-Z][a-z]{1,30}){1,2}\b")
_ERROR_WORD = re.compile(
    r"(?:Error|Exception|failed|errno|ERRNO|HTTP\s?[45]\d\d"
    r"|[45]\d\d (?:Bad|Not|Internal|Service|Too|Unauthorized|Forbidden|Gateway))\b"
)

# On candidate tokens only, first alternative wins.
_CANDIDATE = re.compile(r"[\d/\\#$€£_]|[a-z][A-Z]")
_CURRENCY_CODES = frozenset({"USD", "EUR", "GBP", "CHF", "JPY", "CAD", "AUD", "CNY", "INR", "SEK"})
_IN_TOKEN = re.compile(
    "|".join(
        [
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
            r"\b\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b",
            r"\b\d{1,2}/\d{1,2}/\d{2,4}\b",
            # absolute or ~/./.. paths with two or more segments; relative ones need an extension
            r"(?<![\w/.])(?:~|\.{1,2})?(?:/[\w.@%+-]{1,100}){2,30}/?",
            r"\b[\w.-]{1,100}(?:/[\w.-]{1,100}){1,30}\.[A-Za-z]\w{0,5}\b",
            r"[A-Za-z]:\\(?:[\w.@%+-]{1,100}\\){1,30}[\w.@%+-]{0,100}",
            # hex with a prefix, in either case: 0xDEADBEEF, 0x1f
            r"\b0[xX][0-9a-fA-F]{2,64}\b",
            # ids of dashed, dotted or underscored parts holding a digit, in either case:
            # post-1234, ORD-2024-0042, ORD-7F3A, FACT-1F9D6, call_1, spotter-gqc.1, ORA-00942
            r"\b(?=[\w.:-]{0,160}\d)(?=[\w.:-]{0,160}[A-Za-z])"
            r"[A-Za-z0-9]{1,40}(?:[-_.:][A-Za-z0-9]{1,40}){1,6}\b",
            r"(?<![\w&])#\d{1,20}\b",
            # hashes and hex ids (a letter and a digit, one case): a3f9c2e1, 9F86D081884C
            r"\b(?=[0-9a-f]{0,63}[a-f])(?=[0-9a-f]{0,63}\d)[0-9a-f]{7,64}\b",
            r"\b(?=[0-9A-F]{0,63}[A-F])(?=[0-9A-F]{0,63}\d)[0-9A-F]{7,64}\b",
            # codes of capitals and digits: Q7ZL4, X9KD2P
            r"\b(?=[A-Z0-9]{0,39}[A-Z])(?=[A-Z0-9]{0,39}\d)[A-Z0-9]{5,40}\b",
            # code names: snake_case and camelCase of 8 or more characters
            r"\b[A-Za-z][a-z0-9]{0,40}(?:_[A-Za-z0-9]{1,40}){1,8}\b(?<=\w{8})",
            r"\b[a-z]{1,40}(?:[A-Z][a-z0-9]{1,40}){1,8}\b",
            r"[$€£]\d[\d,]{0,30}(?:\.\d{1,10})?(?:[kKmMbB]n?\b)?",
            rf"\b\d[\d,]{{0,30}}(?:\.\d{{1,10}})?{_UNIT}(?!\w)",
            r"\b\d{1,20}(?:\.\d{1,20}){1,4}\b",
            r"\b\d{1,3}(?:,\d{3}){1,10}\b",
            # long numbers are ids: accounts, orders, phone numbers, all-digit hashes
            r"\b\d{5,40}\b",
        ]
    )
)
_NUMBER = re.compile(r"[$€£]?\d[\d,]{0,30}(?:\.\d{1,10})?")
_UNIT_TOKEN = re.compile(rf"{_UNIT}[.,;:!?)]*")
_TRAILING = ".,;:!?'\"\u201d\u2019)]}>"
_MAX_ERROR_CHARS = 200


def _emails(text: str) -> list[tuple[int, str]]:
    found = []
    for match in _EMAIL_DOMAIN.finditer(text):
        local = _EMAIL_LOCAL.search(text, max(0, match.start() - 64), match.start())
        if local:
            found.append((local.start(), text[local.start() : match.end()]))
    return found


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
        # a long line (a one-line JSON blob): keep a window around the keyword
        lo = max(start, match.start() - _MAX_ERROR_CHARS // 2)
        line = text[lo : min(end, lo + _MAX_ERROR_CHARS)].strip()
        if line:
            found.append((lo, line))
    return found


# Minified JSON or HTML is one long "word": break it at quotes and brackets too (same length,
# so positions still hold).
_SEPARATORS = str.maketrans({c: " " for c in "\"'`<>(){}[];|="})


def _token_identifiers(text: str) -> list[tuple[int, str]]:
    found = []
    text = text.translate(_SEPARATORS)
    tokens = text.split()
    cursor = 0
    candidate = _CANDIDATE.search
    for index, token in enumerate(tokens):
        if not candidate(token):
            continue
        # Tokens come in order and only candidate tokens contain these characters, so the
        # next occurrence from the cursor is this token.
        position = text.find(token, cursor)
        cursor = position + len(token)
        if "://" in token or "@" in token:
            continue  # URLs and emails come from the full-text patterns
        # "300 ms", "2,048 rows": a bare number followed by a unit token
        bare = token.rstrip(_TRAILING)
        if index and tokens[index - 1] in _CURRENCY_CODES and _NUMBER.fullmatch(bare):
            found.append((position, f"{tokens[index - 1]} {bare}"))  # "USD 3,200"
            continue
        if index + 1 < len(tokens) and _NUMBER.fullmatch(bare):
            unit = _UNIT_TOKEN.fullmatch(tokens[index + 1])
            if unit:
                found.append((position, f"{bare} {unit.group().rstrip(_TRAILING)}"))
                continue
        found.extend((position + m.start(), m.group()) for m in _IN_TOKEN.finditer(token))
    return found


def extract_identifiers(text: str) -> list[str]:
    """Identifiers in order of first appearance, without duplicates."""
    if not text:
        return []
    found: list[tuple[int, str]] = [(m.start(), m.group()) for m in _URL.finditer(text)]
    found += _emails(text)
    found += [(m.start(), m.group()) for m in _MONTH_DATE.finditer(text)]
    found += [
        (m.start(m.lastindex or 0), m.group(m.lastindex or 0)) for m in _QUOTED.finditer(text)
    ]
    found += [(m.start(1), m.group(1)) for m in _SQL_TABLE.finditer(text)]
    found += [(m.start(), m.group()) for m in _ERROR_CODE.finditer(text)]
    found += [(m.start(), m.group()) for m in _NAME.finditer(text) if _after_lowercase(text, m)]
    found += _token_identifiers(text)
    found += _error_lines(text)
    # Longest first at a position; an item inside an earlier one (the id in an error line,
    # the name in a quoted title) is already there verbatim.
    found.sort(key=lambda item: (item[0], -len(item[1])))
    seen: set[str] = set()
    result = []
    covered = 0
    for start, raw in found:
        value = raw.strip().rstrip(_TRAILING)
        end = start + len(raw)
        if end <= covered:
            continue
        covered = max(covered, end)
        if len(value) > 1 and value not in seen:
            seen.add(value)
            result.append(value)
    return result


def _after_lowercase(text: str, match: re.Match[str]) -> bool:
    """A name follows a lowercase word ("changed to Tomasz Nakamura"), not a capitalized
    one ("The Big Launch"), so sentence starts and titles are not taken for names."""
    before = text[max(0, match.start() - 32) : match.start()].split()
    return bool(before) and (before[-1].islower() or before[-1].endswith(","))
