"""The language detectors compared for the summaries' language (docs/compaction.rst,
"What summaries are told"): accuracy on tests/data/language_messages.json (short
chat messages, 20 per language), time per call and the model's first load.

    python -m bench.language

measures every candidate installed: the app's own detector (assistant.text.language),
py3langid and lingua-language-detector (`pip install lingua-language-detector`; it
is not a dependency of the project). Not part of `make bench`: it needs no database."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from assistant.text.language import LANGUAGE_NAMES, detect_language

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "language_messages.json"


def messages() -> dict[str, list[str]]:
    """The committed set: an English language name to its messages."""
    return json.loads(DATA.read_text(encoding="utf-8"))


def py3langid_detector() -> Callable[[str], str | None]:
    import py3langid

    return lambda text: LANGUAGE_NAMES.get(py3langid.classify(text)[0])


def lingua_detector() -> Callable[[str], str | None]:
    from lingua import LanguageDetectorBuilder

    detector = LanguageDetectorBuilder.from_all_languages().build()

    def detect(text: str) -> str | None:
        language = detector.detect_language_of(text)
        return language.name.title() if language is not None else None

    return detect


CANDIDATES: dict[str, Callable[[], Callable[[str], str | None]]] = {
    "assistant.text.language": lambda: lambda text: detect_language([text]),
    "py3langid": py3langid_detector,
    "lingua-language-detector": lingua_detector,
}


def measure(name: str, make: Callable[[], Callable[[str], str | None]]) -> dict[str, object]:
    """Accuracy (share named right), per language, time per call (median, ms) and the
    load (the first call, model included, ms)."""
    data = messages()
    started = time.perf_counter()
    detect = make()
    detect(data["English"][0])
    load_ms = (time.perf_counter() - started) * 1000
    right, times, wrong = 0, [], {}
    total = 0
    for language, texts in data.items():
        misses = []
        for text in texts:
            before = time.perf_counter()
            found = detect(text)
            times.append((time.perf_counter() - before) * 1000)
            total += 1
            if found == language:
                right += 1
            else:
                misses.append(found)
        if misses:
            wrong[language] = misses
    return {
        "candidate": name,
        "accuracy": round(right / total, 4),
        "right": right,
        "messages": total,
        "median_ms": round(statistics.median(times), 3),
        "p95_ms": round(sorted(times)[int(len(times) * 0.95)], 3),
        "load_ms": round(load_ms, 1),
        "wrong": wrong,
    }


def main() -> None:
    for name, make in CANDIDATES.items():
        try:
            result = measure(name, make)
        except ImportError as error:
            print(f"{name}: not installed ({error})")
            continue
        print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
