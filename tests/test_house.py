"""The house's size limits (docs/architecture.rst): few modules at the top of
assistant/, short modules, short functions. Read from the source with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "assistant"
# Generated migrations and the testing kit (a fake provider speaking three wire
# formats) are exempt.
EXEMPT = ("migrations", "testing")
MAX_TOP_LEVEL_MODULES = 10
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def app_modules() -> list[Path]:
    return sorted(
        path
        for path in APP.rglob("*.py")
        if not any(part in EXEMPT for part in path.relative_to(APP).parts)
    )


def test_at_most_ten_modules_at_the_top_of_the_app() -> None:
    top = sorted(p.name for p in APP.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_no_module_over_500_lines() -> None:
    long = {
        str(path.relative_to(APP)): lines
        for path in app_modules()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_over_60_lines() -> None:
    long = {}
    for path in app_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - first + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(APP)}:{node.name}"] = lines
    assert long == {}


def test_the_limits_catch_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    tree = ast.parse(f"def long():\n{body}\n")
    (function,) = tree.body
    assert function.end_lineno - function.lineno + 1 == MAX_FUNCTION_LINES + 1
