"""Which identifiers and sentences of a text a later turn is likely to need.

Deterministic and cheap: an identifier scores by how specific it is (a URL,
a path, an order number or an error outranks a date, which outranks a bare
number), and a sentence by the most specific identifier it holds. Truncated
tool results keep their key sentences; summaries carry key identifiers.
"""

from __future__ import annotations

import re
from collections import Counter

from assistant.llm.identifiers import extract_identifiers

_TAG = re.compile(r"<[^>]{0,500}>")
_SEGMENT = re.compile(r"[^\n]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(\[])")
_ERROR = re.compile(r"(?:Error|Exception|failed|errno|HTTP\s?[45]\d\d)", re.I)
_LETTER_AND_DIGIT = re.compile(r"(?=.*[A-Za-z])(?=.*\d)")
_DATE_OR_NUMBER = re.compile(r"^[\d\s,./:+\-TZ%]+[A-Za-z%]{0,8}$")
MAX_SENTENCE_CHARS = 240
# Two or three capitalized words after a lowercase word: "author is Dmitri Brennan".
_NAME = re.compile(r"(?<=[a-z,] )[A-Z][a-z]{1,30}(?: [A-Z][a-z]{1,30}){1,2}\b")
_UPPER = re.compile(r"[A-Z]+")
_LOWER = re.compile(r"[a-z]+")
_DIGITS = re.compile(r"\d+")


def identifier_score(item: str) -> int:
    """3: URLs, paths, emails, ids with letters and digits, errors, quoted
    titles; 2: money and other marked amounts; 1: dates and plain numbers."""
    if "://" in item or "@" in item or item.count("/") >= 2 or _ERROR.search(item):
        return 3
    if item[:1] in "$€£#":
        return 2
    if _DATE_OR_NUMBER.match(item):
        return 1
    if _LETTER_AND_DIGIT.match(item) or " " in item:
        return 3
    return 2


def sentences(text: str) -> list[str]:
    """Lines of the text without markup, long lines cut at sentence ends."""
    plain = _TAG.sub(" ", text)
    found = []
    for line in _SEGMENT.findall(plain):
        line = " ".join(line.split())
        if not line:
            continue
        if len(line) <= MAX_SENTENCE_CHARS:
            found.append(line)
        else:
            found.extend(s[:MAX_SENTENCE_CHARS] for s in _SENTENCE_END.split(line) if s)
    return found


def key_sentences(text: str, budget: int, *, exclude: str = "") -> list[str]:
    """The sentences holding the most specific identifiers (score 2 or more),
    in their original order, within `budget` characters. Among equals, the
    sentence whose identifiers have the rarest shape in the text wins: one
    order number stands out from fifty table rows. Sentences already in
    `exclude` are skipped."""
    candidates = []
    shapes: Counter[str] = Counter()
    for index, sentence in enumerate(sentences(text)):
        items = extract_identifiers(sentence)
        shapes.update({_shape(item) for item in items})
        if items and sentence not in exclude:
            candidates.append((index, sentence, items))
    ranked = []
    for index, sentence, items in candidates:
        score = max(identifier_score(item) for item in items)
        if score >= 2:
            rarity = min(shapes[_shape(item)] for item in items)
            ranked.append((-score, rarity, index, sentence))
    chosen, used = [], 0
    for _, _, index, sentence in sorted(ranked):
        if used + len(sentence) + 1 > budget:
            continue
        chosen.append((index, sentence))
        used += len(sentence) + 1
    return [sentence for _, sentence in sorted(chosen)]


def _shape(item: str) -> str:
    """post-14 and post-7 share a shape (a-0); ORD-2024-0042 has another (A-0-0)."""
    return _DIGITS.sub("0", _LOWER.sub("a", _UPPER.sub("A", item)))


def key_identifiers(text: str, *, minimum: int = 2) -> list[str]:
    """Identifiers of the key sentences: every identifier of a sentence that
    holds a specific one (so the date next to an order number comes along)
    and the proper names in it, none from sentences of bare dates and numbers."""
    found: list[str] = []
    for sentence in sentences(text):
        items = extract_identifiers(sentence)
        if items and max(identifier_score(i) for i in items) >= minimum:
            found.extend(items)
            found.extend(_NAME.findall(sentence))
    return list(dict.fromkeys(found))
