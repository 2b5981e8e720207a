"""Which language a conversation's user writes in, by a cheap deterministic rule
(docs/compaction.rst, "The summaries' language"): the script of the letters
first (Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, Hangul, kana, Han),
then, for Latin letters, which language's most common short words the text
uses most. The same text always gives the same answer; a text with too few
of either gives None (the prompt then asks for the language of the user's
messages)."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

# Each language's most frequent function words, the same count for each so no
# language is favoured by a longer list. Words shared by two languages count for both.
_STOPWORDS = {
    "English": "the and is are was to of in that it for with you this not have be on what",
    "French": "le la les et est des une que qui dans pour pas vous avec sur ce je il du",
    "German": "der die das und ist nicht ich sie es mit den ein eine zu auf für von dem",
    "Spanish": "el la los las y es que de en un una por para con no se del lo como su",
    "Italian": "il la che di e è un una per non con sono del della gli le si mi lo",
    "Portuguese": "o a os as e é que de do da em um uma para não com se no na por",
    "Dutch": "de het een en is van dat niet ik je op te met voor zijn er maar ook",
    "Swedish": "och att det som en är på för med inte jag har av den till ett om",
    "Polish": "i w nie na się to że jest z do co jak ale o po tak za od",
    "Turkish": "ve bir bu da de için ile ne var çok mi ama daha gibi olan ben sen",
    "Indonesian": "dan yang di ini itu dengan untuk tidak ada dari saya akan ke kami",
}
_WORDS = {name: frozenset(words.split()) for name, words in _STOPWORDS.items()}
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)

# Unicode name prefixes of letters, by the language their script points to.
_SCRIPTS = (
    ("HIRAGANA", "Japanese"),
    ("KATAKANA", "Japanese"),
    ("HANGUL", "Korean"),
    ("CJK", "Chinese"),
    ("CYRILLIC", "Russian"),
    ("GREEK", "Greek"),
    ("ARABIC", "Arabic"),
    ("HEBREW", "Hebrew"),
    ("DEVANAGARI", "Hindi"),
    ("THAI", "Thai"),
)
# Below these, the text says too little to tell.
MIN_LETTERS = 12
MIN_STOPWORDS = 3


def _script_language(letters: list[str]) -> str | None:
    """The language of a non-Latin script that makes up at least a third of the letters
    (kana anywhere in Han text is Japanese)."""
    counts: Counter[str] = Counter()
    for letter in letters:
        name = unicodedata.name(letter, "")
        for prefix, language in _SCRIPTS:
            if name.startswith(prefix):
                counts[language] += 1
                break
    if counts["Japanese"] and counts["Japanese"] + counts["Chinese"] >= len(letters) / 3:
        return "Japanese"
    best = counts.most_common(1)
    if best and best[0][1] >= len(letters) / 3:
        return best[0][0]
    return None


def detect_language(texts: Iterable[str]) -> str | None:
    """The language `texts` are written in (an English name, "French"), or None."""
    text = "\n".join(texts)
    letters = [c for c in text if c.isalpha()]
    if len(letters) < MIN_LETTERS:
        return None
    script = _script_language(letters)
    if script is not None:
        return script
    words = Counter(word.lower() for word in _WORD.findall(text))
    scores = {name: sum(words[w] for w in vocab) for name, vocab in _WORDS.items()}
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    (best, score), (_, second) = ranked[0], ranked[1]
    if score < MIN_STOPWORDS or score == second:
        return None
    return best
