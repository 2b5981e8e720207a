"""Provider differences live in assistant/providers/ alone: outside it, no code
names a provider or compares a provider's name. Only the testing kit, whose fake
server speaks every wire, is exempt."""

from __future__ import annotations

import ast
from pathlib import Path

from assistant.providers.catalog import CHAT_PROVIDERS

APP = Path(__file__).resolve().parent.parent / "assistant"
EXEMPT = ("providers", "testing", "migrations")
# A setting's declared choices name the providers it accepts (ASSISTANT_SUMMARIZER): the
# settings are read before any provider is imported, and nothing branches on them there.
DECLARATIONS = ("settings/app.py",)
NAMES = {*CHAT_PROVIDERS, "openai_responses", "bedrock", "vertex"}


def provider_literals(path: Path) -> list[str]:
    """Each string constant of a module that is a provider's name, as "line: text": a
    branch on a provider, or a request shape chosen by name."""
    return [
        f"{node.lineno}: {node.value!r}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.lower() in NAMES
    ]


def test_no_code_outside_providers_names_a_provider():
    offending = {
        str(path.relative_to(APP)): hits
        for path in sorted(APP.rglob("*.py"))
        if path.relative_to(APP).parts[0] not in EXEMPT
        and str(path.relative_to(APP)) not in DECLARATIONS
        and (hits := provider_literals(path))
    }
    assert offending == {}


def test_the_rule_catches_a_provider_branch(tmp_path):
    branch = tmp_path / "branch.py"
    branch.write_text('def f(provider):\n    return 1 if provider == "gemini" else 2\n')
    assert provider_literals(branch) == ["2: 'gemini'"]
