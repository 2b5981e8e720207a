"""The house's size limits (docs/architecture.rst): few modules at the top of
assistant/, short modules, short functions, read from the source with `ast`."""

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


def long_functions(source: str) -> dict[str, int]:
    """Function name -> its lines (decorators included), for those over the limit."""
    long = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > MAX_FUNCTION_LINES:
                long[node.name] = lines
    return long


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
    long = {
        f"{path.relative_to(APP)}:{name}": lines
        for path in app_modules()
        for name, lines in long_functions(path.read_text()).items()
    }
    assert long == {}


def test_a_function_of_61_lines_is_caught_and_one_of_60_is_not() -> None:
    def function(name: str, lines: int) -> str:
        body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2))
        return f"@decorated\ndef {name}():\n{body}"

    source = function("sixty", 60) + "\n" + function("sixty_one", 61)
    assert long_functions(source) == {"sixty_one": 61}
