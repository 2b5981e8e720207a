"""The catalog's windows and output caps against the providers' published figures
(tests/fixtures/model_windows.json, kept apart from the catalog: a table no one
checks drifts, as a harness's own did with a 200K model listed at 1M)."""

from __future__ import annotations

import json
from pathlib import Path

from assistant.providers.catalog import WIRES

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "model_windows.json").read_text())
PUBLISHED = {(entry["provider"], entry["model"]): entry for entry in FIXTURE["models"]}
# The Responses API lists the same models as Chat Completions.
SAME_TABLE = {"openai_responses": "openai", "gemini_interactions": "gemini"}


def listed() -> dict[tuple[str, str], tuple[int, int]]:
    return {
        (SAME_TABLE.get(name, name), model): (info.window, info.max_output)
        for name, wire in WIRES.items()
        for model, info in wire.models.items()
    }


def test_every_listed_model_has_its_published_figures_or_says_it_has_none():
    assert set(listed()) == set(PUBLISHED)
    for entry in PUBLISHED.values():
        assert entry["source"].startswith("https://") and entry["read"]
        assert entry["confirmed"] or entry.get("note")  # an unconfirmed figure says so


def test_the_catalog_has_each_models_published_window_and_output_cap():
    wrong = {
        key: (figures, (PUBLISHED[key]["window"], PUBLISHED[key]["max_output"]))
        for key, figures in listed().items()
        if PUBLISHED[key]["confirmed"]
        and figures != (PUBLISHED[key]["window"], PUBLISHED[key]["max_output"])
    }
    assert wrong == {}
