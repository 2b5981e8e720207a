"""Which language a conversation's user writes in (docs/compaction.rst, "What
summaries are told"): py3langid, a maintained naive Bayes detector whose model
ships in its wheel (offline, deterministic: the same text always gives the same
answer), named in English ("French"). Addresses and numbers are left out first; a
text with too few letters left, or in a language not named here, gives None (the
prompt then asks for the language of the user's messages).

Chosen over lingua-language-detector by measurement (bench/language.py, on
tests/data/language_messages.json): the same accuracy on short messages, a wheel
one twentieth the size and a call thirty times faster."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

import py3langid

#: English names of the languages the detector tells apart, by ISO 639 code (a code
#: not here gives None: the prompt then asks for the language of the user's messages).
LANGUAGE_NAMES = {
    "af": "Afrikaans", "am": "Amharic", "ar": "Arabic", "az": "Azerbaijani",
    "be": "Belarusian", "bg": "Bulgarian", "bn": "Bengali", "bs": "Bosnian",
    "ca": "Catalan", "cs": "Czech", "cy": "Welsh", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish",
    "fr": "French", "ga": "Irish", "gl": "Galician", "gu": "Gujarati",
    "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian",
    "hy": "Armenian", "id": "Indonesian", "is": "Icelandic", "it": "Italian",
    "ja": "Japanese", "ka": "Georgian", "kk": "Kazakh", "km": "Khmer",
    "kn": "Kannada", "ko": "Korean", "la": "Latin", "lt": "Lithuanian",
    "lv": "Latvian", "mk": "Macedonian", "ml": "Malayalam", "mn": "Mongolian",
    "mr": "Marathi", "ms": "Malay", "my": "Burmese", "nb": "Norwegian",
    "ne": "Nepali", "nl": "Dutch", "nn": "Norwegian", "no": "Norwegian",
    "pa": "Punjabi", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "si": "Sinhala", "sk": "Slovak", "sl": "Slovenian",
    "sq": "Albanian", "sr": "Serbian", "sv": "Swedish", "sw": "Swahili",
    "ta": "Tamil", "te": "Telugu", "th": "Thai", "tl": "Tagalog", "tr": "Turkish",
    "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek", "vi": "Vietnamese",
    "zh": "Chinese",
    # py3langid's regional and other codes of the languages above
    "ary": "Arabic", "arz": "Arabic", "uzs": "Uzbek", "wuu": "Chinese", "yue": "Chinese",
}  # fmt: skip

# Below this many letters (URLs, e-mail addresses and numbers aside), the text says
# too little to tell. A letter of Han, kana or Hangul is about a word: it counts as
# IDEOGRAPH_LETTERS; a vowel sign (Devanagari's, Thai's) counts as a letter.
MIN_LETTERS = 12
IDEOGRAPH_LETTERS = 3
_IDEOGRAPHS = re.compile(r"[\u1100-\u11ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
# What is no language: addresses (their words are names, not prose).
_NOT_PROSE = re.compile(r"\S+://\S+|www\.\S+|\S+@\S+\.\S+")


def letters(text: str) -> int:
    """How many letters `text` holds, an ideograph counted as IDEOGRAPH_LETTERS."""
    plain = sum(c.isalpha() or unicodedata.category(c) == "Mc" for c in text)
    ideographs = len(_IDEOGRAPHS.findall(text))
    return plain + ideographs * (IDEOGRAPH_LETTERS - 1)


def detect_language(texts: Iterable[str]) -> str | None:
    """The language `texts` are written in (an English name, "French"), or None."""
    text = _NOT_PROSE.sub(" ", "\n".join(texts))
    if letters(text) < MIN_LETTERS:
        return None
    code, _ = py3langid.classify(text)
    return LANGUAGE_NAMES.get(code)
