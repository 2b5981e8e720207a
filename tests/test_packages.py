"""The house by concept (docs/architecture.rst): each package says in its docstring
what it may import, and .importlinter enforces exactly that; no module name
stands in two packages; other code uses a package's face."""

from __future__ import annotations

import ast
import configparser
import re
from collections import defaultdict
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "assistant"
CONTRACTS = APP.parent / ".importlinter"
# Their modules are each public (read everywhere): no face contract.
PUBLIC_MODULES = {"settings", "ops"}
# Faces and data, held by the layers contract alone.
NOT_CONCEPTS = {"admin", "management", "migrations", "models", "testing", "templates", "static"}


def packages() -> list[str]:
    return sorted(
        path.name
        for path in APP.iterdir()
        if (path / "__init__.py").exists() and path.name not in NOT_CONCEPTS
    )


def top_level_units() -> set[str]:
    units = {path.stem for path in APP.glob("*.py") if path.name != "__init__.py"}
    units |= {path.name for path in APP.iterdir() if (path / "__init__.py").exists()}
    return units - {"migrations"}


def may_import(package: str) -> set[str]:
    doc = ast.get_docstring(ast.parse((APP / package / "__init__.py").read_text())) or ""
    found = re.search(r"May import: ([^.]*)\.", doc.replace("\n", " "))
    assert found, f"assistant/{package}/__init__.py's docstring has no 'May import:' line"
    names = found.group(1)
    return set() if names == "nothing of the app" else {n.strip() for n in names.split(",")}


def contracts() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(CONTRACTS)
    return parser


def listed(value: str) -> set[str]:
    return {line.strip() for line in value.splitlines() if line.strip()}


@pytest.mark.parametrize("package", packages())
def test_a_packages_contract_is_its_docstrings_may_import_line(package):
    section = f"importlinter:contract:{package}"
    parser = contracts()
    assert parser.has_section(section), f".importlinter has no contract for {package}"
    contract = parser[section]
    assert contract["type"] == "forbidden"
    assert listed(contract["source_modules"]) == {f"assistant.{package}"}
    allowed = may_import(package) | {package}
    assert allowed <= top_level_units(), f"{package} names what does not exist"
    expected = {f"assistant.{unit}" for unit in top_level_units() - allowed}
    assert listed(contract["forbidden_modules"]) == expected


@pytest.mark.parametrize("package", sorted(set(packages()) - PUBLIC_MODULES))
def test_other_code_uses_a_packages_face(package):
    contract = contracts()[f"importlinter:contract:{package}-face"]
    assert contract["type"] == "protected"
    assert listed(contract["protected_modules"]) == {f"assistant.{package}.*"}
    assert listed(contract["allowed_importers"]) == {f"assistant.{package}"}


def test_no_module_name_stands_in_two_packages():
    # The provider folders share the base interface's module names (wire, provider),
    # as allauth's providers all have a provider.py; a management command's module is
    # named for the command (manage.py cleanup).
    where: dict[str, list[str]] = defaultdict(list)
    for path in APP.rglob("*.py"):
        parts = path.relative_to(APP).parts
        if path.name == "__init__.py" or parts[0] == "migrations":
            continue
        if (parts[0] == "providers" and len(parts) == 3) or parts[:2] == ("management", "commands"):
            continue
        where[path.stem].append(str(path.relative_to(APP)))
    repeated = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert repeated == {}


# The provider folders that only embed (semantic recall): their models' table and embedder.
EMBEDDING_ONLY = {"voyage", "local"}


def test_every_provider_folder_has_the_base_interfaces_modules():
    folders = [p for p in (APP / "providers").iterdir() if (p / "__init__.py").exists()]
    assert {p.name for p in folders} == {
        "anthropic",
        "gemini",
        "offline",
        "openai",
        *EMBEDDING_ONLY,
    }
    for folder in folders:
        if folder.name in EMBEDDING_ONLY:
            assert (folder / "models.py").exists(), f"{folder.name} has no models' table"
            assert (folder / "embeddings.py").exists(), f"{folder.name} has no embedder"
            continue
        assert (folder / "provider.py").exists(), f"{folder.name} has no summarizer client"
        if folder.name != "offline":
            assert (folder / "wire.py").exists(), f"{folder.name} has no wire"


def test_the_architecture_page_lists_what_each_package_may_import():
    page = (APP.parent / "docs" / "architecture.rst").read_text()
    table = page.split("What each package may import in fact", 1)[1].split("Why these cuts", 1)[0]
    rows = re.findall(r"\* - ``(\w+)``\n\s+- ([^*]+)", table)
    shown = {name: {n.strip() for n in names.split(",")} for name, names in rows}
    for package in set(packages()) - {"settings", "ops"}:
        assert shown.get(package) == may_import(package), package
