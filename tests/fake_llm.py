"""The fake Anthropic / Gemini server of `assistant.testing.fake_provider`, as a
pytest fixture (tests use it through `pytest_plugins` in conftest.py).

    def test_x(fake_llm, settings):
        fake_llm.use_anthropic(settings)          # or use_gemini
        fake_llm.script_anthropic(rate_limited(), ok(text=...))
        ...
        assert fake_llm.count("anthropic.messages") == 2
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from assistant.testing.fake_provider import (  # noqa: F401  (the tests' names)
    ANTHROPIC_OVERFLOW,
    DEFAULT_SUMMARY,
    GEMINI_OVERFLOW,
    KINDS,
    FakeProvider,
    Reply,
    Request,
    count,
    malformed,
    ok,
    overflow,
    overloaded,
    prompt_tokens,
    rate_limited,
    raw,
    slow,
)

FakeLLM = FakeProvider


@pytest.fixture
def fake_llm() -> Iterator[FakeProvider]:
    fake = FakeProvider().start()
    yield fake
    fake.stop()
