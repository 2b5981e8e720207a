"""Fact statements: the sentences, table rows or lines of a text that say what a value is.

Deterministic and cheap. A statement holds a specific identifier (an id, a path, a URL, an
email, an amount, an error, a name) or names a secret ("the webhook secret is
marmalade-sky"), and has words around it: a bare URL, size or date says nothing a later
turn could use. Markup and our own markers are stripped; statements rank by the most
specific identifier they hold, then by how rare its shape is in the text (one order number
stands out from fifty table rows).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass

from assistant.text.verbatim import extract_identifiers

MAX_STATEMENT_CHARS = 300
MAX_ROWS_OF_A_SHAPE = 3
_ID_DIGITS = 8
# Our own bracketed notes in a compacted message; never content to carry.
OUR_MARKERS = re.compile(
    r"\[(?:Tool result compacted:|Summary of a [\d,]+-character|Already retrieved earlier"
    r"|Key details further in (?:the original|its first [\d,]+ characters):"
    r"|cut for the summarizer)[^\]\n]{0,300}\]?"
)
_TAG = re.compile(r"<[^>]{0,500}>")
_ENTITY = re.compile(r"&(?:nbsp|amp|lt|gt|quot|#39);")
_ENTITIES = {"&nbsp;": " ", "&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'"}
# Lines split at sentence ends; long ones (minified JSON) between records, at escaped
# newlines and table cells too.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(\[])")
_LONG_LINE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(\[])|[}\]]\s*,\s*[{\[]|\\n|\s\|\s")
_TABLE_EDGES = re.compile(r"^(?:[\s|*>-]+|#{1,6}\s)+|[\s|,;]+$")
_TABLE_CELLS = re.compile(r"\s*\|\s*(?:\|\s*)*")
# A JSON field around a value: `"note": "` before it, `"}]` after it.
_JSON_KEY = re.compile(r'^[\[{\s,]*"?[\w -]{1,40}"\s*:\s*"?')
_JSON_END = re.compile(r'[\s"}\],]+$')
_WORD = re.compile(r"\b[A-Za-z][a-z]{1,30}\b")
_ERROR = re.compile(r"(?:Error|Exception|failed|errno|HTTP\s?[45]\d\d)", re.I)
_LETTER_AND_DIGIT = re.compile(r"(?=.*[A-Za-z])(?=.*\d)")
_DATE_OR_NUMBER = re.compile(r"^[\d\s,./:+\-TZ%]+[A-Za-z%]{0,8}$")
# "the staging password is now orchid-sky", "API token: x", "use orchid-sky as the
# staging password": a value named as a secret (plain words, so no identifier shape).
_SECRET_WORD = r"\b(?:secret|password|passphrase|passcode|pin|token|api key|access key)\b"
_NOT_A_VALUE = r"(?!(?:the|an?|now|still|also|being|not|set|to|changed)\b)"
_SECRET = re.compile(
    rf"{_SECRET_WORD}[^.!?\n]{{0,80}}?(?:\b(?:is|was|are|becomes|changed to|set to)\b|[:=])"
    rf"(?:\s+(?:now|still))?\s*[\"'`]?{_NOT_A_VALUE}([^\s\"'`]{{3,80}})"
    rf"|\b{_NOT_A_VALUE}([^\s\"'`]{{3,80}})\s+(?:as|for)\s+(?:the|our|a|an)\b"
    rf"[^.!?\n]{{0,60}}?{_SECRET_WORD}",
    re.I,
)
# What a line must hold for extract_identifiers to find anything in it. Most prose holds
# none of it, and the extractor is the expensive part, so the test runs on the line's
# letter classes with plain substring searches (as fast as a regex is slow here).
_CLASSES = str.maketrans(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "a" * 26 + "A" * 26 + "0" * 10,
)
# a digit or a value character; a capital inside a sentence (names, camelCase); a
# capitalized run (error codes, SQL)
_VALUE_MARKS = ("0", "@", "/", "\\", "_", "#", "$", "€", "£", '"', "“", "a A", "aA", ", A", "AAAA")
_VALUE_WORDS = ("secret", "password", "passphrase", "passcode", "token", "key", "error", "fail")


def _may_hold_values(text: str) -> bool:
    classes = text.translate(_CLASSES)
    if any(mark in classes for mark in _VALUE_MARKS):
        return True
    lower = text.lower()
    return any(word in lower for word in _VALUE_WORDS)


_UPPER = re.compile(r"[A-Z]+")
_LOWER = re.compile(r"[a-z]+")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Statement:
    text: str
    score: int  # 3: ids, paths, URLs, emails, errors, names, secrets; 2: amounts, codes
    rarity: int  # how many statements of the text share its identifiers' shape
    position: int  # order in the text
    values: tuple[str, ...] = ()  # the identifiers (or the secret) it states


def identifier_score(item: str) -> int:
    """3: URLs, paths, emails, ids with letters and digits, errors, names and quoted
    titles; 2: money and other marked amounts, code names, numbers of 8 digits or more;
    1: dates and plain numbers."""
    if "://" in item or "@" in item or item.count("/") >= 2 or _ERROR.search(item):
        return 3
    if item[:1] in "$€£#":
        return 2
    if item.isdigit() and len(item) >= _ID_DIGITS:
        return 2  # a long number is an id (an account, an order), not a count
    if _DATE_OR_NUMBER.match(item):
        return 1
    if _LETTER_AND_DIGIT.match(item) or " " in item:
        return 3
    return 2


def plain_text(text: str) -> str:
    """The text without markup, HTML entities or our own markers."""
    text = OUR_MARKERS.sub(" ", text)
    text = _TAG.sub(" ", text)
    return _ENTITY.sub(lambda m: _ENTITIES[m.group()], text)


def segments(text: str) -> list[str]:
    """The pieces of the plain text that may hold a value: lines, split at sentence ends
    (long ones between JSON records and at escaped newlines too), a piece still too long
    cut at a word boundary; table rows as `a | b | c`."""
    found = []
    for line in plain_text(text).splitlines():
        if not _may_hold_values(line):
            continue
        line = " ".join(line.split())
        split = _SENTENCE_END if len(line) <= MAX_STATEMENT_CHARS else _LONG_LINE_SPLIT
        for piece in split.split(line):
            if not _may_hold_values(piece):
                continue
            piece = _TABLE_CELLS.sub(" | ", _TABLE_EDGES.sub("", piece)).strip(" |")
            if '":' in piece:  # JSON: without the brackets of its record
                piece = piece.strip(" [{}],")
                if piece.count('":') == 1:  # one field: its value
                    piece = _JSON_END.sub("", _JSON_KEY.sub("", piece))
            if piece.endswith("]") and "[" not in piece:
                piece = piece[:-1]  # the end of a bracketed list around it
            while len(piece) > MAX_STATEMENT_CHARS:
                cut = piece.rfind(" ", 0, MAX_STATEMENT_CHARS)
                cut = cut if cut > MAX_STATEMENT_CHARS // 2 else MAX_STATEMENT_CHARS
                found.append(piece[:cut].strip())
                piece = piece[cut:].strip()
            if piece:
                found.append(piece)
    return found


def _without(segment: str, items: list[str]) -> str:
    """The segment without its values (an error line or a name is words, not a value)."""
    for item in items:
        if " " not in item:
            segment = segment.replace(item, " ")
    return segment


def _shape(item: str) -> str:
    """post-14 and post-7 share a shape (a-0); ORD-2024-0042 has another (A-0-0)."""
    return _DIGITS.sub("0", _LOWER.sub("a", _UPPER.sub("A", item)))


def statements(text: str, *, min_score: int = 2, min_words: int = 3) -> list[Statement]:
    """Every fact statement of the text, in order: segments holding a value of at least
    `min_score` (identifier_score) and at least `min_words` words besides their values."""
    return list(_statements(text, min_score, min_words))


# One shift reads a large tool result twice (its truncation for the summarizer, its
# facts to carry): about 2.5 us a character each time, 5 s for a 2 MB log on the
# chat path. A few entries only: each holds its text.
@functools.lru_cache(maxsize=4)
def _statements(text: str, min_score: int, min_words: int) -> tuple[Statement, ...]:
    candidates = []
    shapes: Counter[str] = Counter()
    seen: set[str] = set()
    for position, segment in enumerate(segments(text)):
        if segment in seen:
            continue  # a repeated line is one fact, and no row of data
        seen.add(segment)
        # a JSON key ("basic_economy": 3) names a field, it is no value
        items = [i for i in extract_identifiers(segment) if f'"{i}":' not in segment]
        secret = _SECRET.search(segment)
        score = max((identifier_score(item) for item in items), default=0)
        if secret:
            score, items = 3, [*items, (secret.group(1) or secret.group(2)).rstrip(".,;:!?")]
        if score < min_score or len(_WORD.findall(_without(segment, items))) < min_words:
            continue  # bare sizes, dates and values with nothing saying what they are
        item_shapes = {_shape(item) for item in items}
        shapes.update(item_shapes)
        candidates.append((position, segment, score, item_shapes, tuple(items)))
    return tuple(
        Statement(segment, score, min(shapes[s] for s in item_shapes), position, items)
        for position, segment, score, item_shapes, items in candidates
    )


def message_facts(text: str, role: str) -> list[Statement]:
    """The statements of one message worth carrying in a summary. A user's own words count
    with any value, dates and numbers included, and two words around it ("Restore
    post-17 from #88."); from a tool, rows of data are left out: statements whose values
    share their shape with more than MAX_ROWS_OF_A_SHAPE others (fifty orders)."""
    if role == "user":
        return statements(text, min_score=1, min_words=2)
    found = statements(text)
    if role == "tool":
        found = [s for s in found if s.rarity <= MAX_ROWS_OF_A_SHAPE]
    return found


def key_statements(text: str, budget: int, *, exclude: str = "") -> list[str]:
    """The most specific statements of the text within `budget` characters, in their
    original order, without duplicates. Among equals the rarest shape wins, then the
    later statement. Statements already in `exclude` are skipped."""
    found = [s for s in statements(text) if s.text not in exclude]
    ranked = sorted(found, key=lambda s: (-s.score, s.rarity, -s.position))
    chosen, used, seen = [], 0, set()
    for statement in ranked:
        cost = len(statement.text) + 1
        if statement.text in seen or used + cost > budget:
            continue
        seen.add(statement.text)
        chosen.append(statement)
        used += cost
    return [s.text for s in sorted(chosen, key=lambda s: s.position)]
