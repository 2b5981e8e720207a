"""The docs' own directives.

- ``assistant-settings``: a table of one settings declaration of the app
  (``compaction``: ``ASSISTANT_COMPACTION`` in assistant/settings/conf.py; ``cleanup``:
  ``ASSISTANT_CLEANUP`` in assistant/settings/cleanup.py; ``app``: the plain
  settings of assistant/settings/app.py), names, types, defaults and ranges read
  from the declaration at build time. Its content describes each setting, one
  ``NAME: text`` paragraph each; a declared setting with no description, or a
  description of no declared setting, fails the build.
- ``markdown-tables``: a Markdown file of titles and pipe tables that a tool
  writes (``make bench``), rendered as it is.
- ``example``: a code block a reader copies, marked either ``:run:`` (how the
  test suite runs it: tests/doc_examples.py) or ``:not-run:`` (why not, shown
  above the block).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)


# --- settings --------------------------------------------------------------------


def _literal(value: Any) -> str:
    if value is None:
        return "``None``"
    if isinstance(value, bool):
        return f"``{value}``"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"``{value:,}``" if isinstance(value, int) else f"``{value:g}``"
    if isinstance(value, dict) and len(repr(value)) > 40:
        return f"a dict of {len(value)} entries"
    return f"``{value!r}``"


def _type_name(declared: Any) -> str:
    if typing.get_origin(declared) is typing.Literal:
        return "one of " + ", ".join(f"``{choice!r}``" for choice in typing.get_args(declared))
    if typing.get_origin(declared) is dict:
        return f"dict of name to {_type_name(typing.get_args(declared)[1])}"
    arms = [arm for arm in typing.get_args(declared) if arm is not type(None)]
    if typing.get_origin(declared) in (typing.Union, types.UnionType) and len(arms) == 1:
        return _type_name(arms[0]) + ", or ``None``"
    return getattr(declared, "__name__", None) or str(declared)


def declaration_rows(
    declaration: type, follows: dict[str, str] | None = None
) -> list[tuple[str, str, str]]:
    """One row per key of a declaration (assistant.settings.keys): its default, and its
    type and range as the app checks them."""
    from assistant.settings.keys import declared_types, default_of

    follows = follows or {}
    kinds = declared_types(declaration)
    known = {spec.name: spec for spec in dataclasses.fields(declaration)}
    rows = []
    for name, spec in known.items():
        default = default_of(spec)
        allowed = _type_name(kinds[name])
        if (valid := spec.metadata.get("range")) is not None:
            kind, _, optional = allowed.partition(", or ")
            allowed = f"{kind}, {valid}" + (f", or {optional} (off)" if optional else "")
        if spec.metadata.get("any_case"):
            allowed += ", any case"
        shown = _literal(default)
        if name in follows:
            larger = follows[name]
            ratio = default / default_of(known[larger])
            shown += f", or {ratio:.3g} of ``{larger}`` when that is set lower"
            allowed += f"; below ``{larger}``"
        rows.append((name, shown, allowed))
    return rows


def compaction_rows() -> list[tuple[str, str, str]]:
    from assistant.settings import conf

    follows = {smaller: larger for smaller, larger, _ in conf._BELOW}
    return declaration_rows(conf.CompactionConfig, follows)


def cleanup_rows() -> list[tuple[str, str, str]]:
    from assistant.settings import cleanup

    return declaration_rows(cleanup.CleanupConfig)


def app_rows() -> list[tuple[str, str, str]]:
    from assistant.settings import app

    return declaration_rows(app.AppSettings)


DECLARATIONS = {
    "compaction": (compaction_rows, "assistant/settings/conf.py"),
    "cleanup": (cleanup_rows, "assistant/settings/cleanup.py"),
    "app": (app_rows, "assistant/settings/app.py"),
}


def descriptions(lines: list[str]) -> dict[str, str]:
    """``NAME: text`` paragraphs (the text may go on over indented lines)."""
    found: dict[str, str] = {}
    for paragraph in "\n".join(lines).split("\n\n"):
        match = re.match(r"\s*([A-Z][A-Z0-9_]+):\s+(.*)", paragraph, re.S)
        if match:
            found[match.group(1)] = " ".join(match.group(2).split())
    return found


class SettingsTable(Directive):
    required_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        which = self.arguments[0]
        if which not in DECLARATIONS:
            raise self.error(f"assistant-settings: one of {', '.join(DECLARATIONS)}")
        rows_of, source = DECLARATIONS[which]
        rows = rows_of()
        described = descriptions(list(self.content))
        declared = {row[0] for row in rows}
        for name in sorted(declared - set(described)):
            logger.warning(
                f"{name} is declared in {source} but not described here",
                location=(self.state.document.current_source, self.lineno),
            )
        for name in sorted(set(described) - declared):
            logger.warning(
                f"{name} is described here but not declared in {source}",
                location=(self.state.document.current_source, self.lineno),
            )
        table = [".. list-table::", "   :header-rows: 1", "   :widths: 25 20 20 35", ""]
        table += ["   * - setting", "     - default", "     - valid", "     - what it does"]
        for name, default, allowed in rows:
            table += [
                f"   * - .. _setting-{name}:",
                "",
                f"       ``{name}``",
                f"     - {default}",
                f"     - {allowed}",
                f"     - {described.get(name, '')}",
            ]
        return self._parse(table)

    def _parse(self, lines: list[str]) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source=str(self.arguments)), 0, container)
        return container.children


# --- Markdown tables ---------------------------------------------------------------


def markdown_to_rst(text: str) -> list[str]:
    """Titles (paragraphs) and pipe tables, as reStructuredText."""
    out: list[str] = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        if lines and lines[0].startswith("|"):
            rows = [
                [cell.strip() for cell in line.strip().strip("|").split("|")]
                for line in lines
                if not re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*", line)
            ]
            out += [".. list-table::", "   :header-rows: 1", "   :class: bench", ""]
            for row in rows:
                for i, cell in enumerate(row):
                    text_ = re.sub(r"(?<!`)`([^`]+)`(?!`)", r"``\1``", cell) or "\\ "
                    out.append(("   * - " if i == 0 else "     - ") + text_)
            out.append("")
        else:
            out += [re.sub(r"(?<!`)`([^`]+)`(?!`)", r"``\1``", line) for line in lines]
            out.append("")
    return out


class MarkdownTables(Directive):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        env = self.state.document.settings.env
        relative, path = env.relfn2path(self.arguments[0])
        env.note_dependency(relative)
        lines = markdown_to_rst(Path(path).read_text())
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source=path), 0, container)
        return container.children


# --- modules ---------------------------------------------------------------------


def _without_design(text: str) -> str:
    """Docstrings may cite the design document, which does not ship: the docs do not."""
    text = re.sub(r" ?\((?:strategy \d+ of )?DESIGN(?: section)? \d+\)", "", text)
    return re.sub(r"\(DESIGN(?: section)? \d+: ", "(", text)


def _summary(tree: ast.Module) -> str:
    """The module's docstring; else a command's help or its first class's docstring."""
    if doc := ast.get_docstring(tree):
        return doc
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and any(isinstance(t, ast.Name) and t.id == "help" for t in node.targets)
        ):
            return str(node.value.value)
        if isinstance(node, ast.ClassDef) and (doc := ast.get_docstring(node)):
            return doc
    return ""


class Modules(Directive):
    """Every module of the app with the first sentence of its docstring."""

    def run(self) -> list[nodes.Node]:
        root = Path(__file__).resolve().parents[2] / "assistant"
        lines = [".. list-table::", "   :header-rows: 1", "   :widths: 30 70", ""]
        lines += ["   * - module", "     - what it holds"]
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            if "migrations" in parts:
                continue
            doc = _summary(ast.parse(path.read_text()))
            if parts[-1] == "__init__" and not doc:
                continue
            first = _without_design(" ".join(doc.split("\n\n")[0].split()))
            name = ".".join(part for part in parts if part != "__init__")
            lines += [f"   * - ``{name}``", f"     - {first}"]
        container = nodes.container()
        self.state.nested_parse(StringList(lines), 0, container)
        return container.children


# --- examples --------------------------------------------------------------------


class Example(Directive):
    """A code block with how the tests run it (``:run:``) or why they cannot (``:not-run:``)."""

    required_arguments = 1  # the language
    has_content = True
    option_spec = {"run": directives.unchanged_required, "not-run": directives.unchanged_required}

    def run(self) -> list[nodes.Node]:
        if ("run" in self.options) == ("not-run" in self.options):
            raise self.error("example: give exactly one of :run: and :not-run:")
        code = "\n".join(self.content)
        block = nodes.literal_block(code, code, language=self.arguments[0])
        if "run" in self.options:
            return [block]
        note = nodes.paragraph(classes=["not-run"])
        note += nodes.strong(text="Not run by the test suite: ")
        note += nodes.Text(self.options["not-run"])
        return [note, block]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("assistant-settings", SettingsTable)
    app.add_directive("markdown-tables", MarkdownTables)
    app.add_directive("example", Example)
    app.add_directive("assistant-modules", Modules)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
