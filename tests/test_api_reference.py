"""The API reference (docs/api.rst) that `make docs` builds: every public name
of the service API, the chat loop, the recall tools and the testing kit has
its entry, generated from its docstring."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from django.conf import settings
from sphinx.cmd.build import build_main
from sphinx.util.inventory import InventoryFile

DOCS = Path(settings.BASE_DIR) / "docs"
# The testing kit is a package: its public names are those of its modules.
MODULES = [
    "assistant.services",
    "assistant.chat",
    "assistant.recall",
    "assistant.signals",
    "assistant.testing.fake_provider",
    "assistant.testing.content",
]


def public_names(module_name: str) -> set[str]:
    """`__all__` where the module declares it, else the names it defines
    (functions, classes, constants) that do not start with an underscore."""
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return set(module.__all__)
    tree = ast.parse(Path(module.__file__).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def test_make_docs_builds_an_entry_for_every_public_name(tmp_path):
    # What `make docs` runs: warnings are errors, so an unresolved link fails too.
    assert (
        build_main(["-E", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(tmp_path)]) == 0
    )

    with (tmp_path / "objects.inv").open("rb") as stream:
        inventory = InventoryFile.load(stream, "", lambda base, uri: uri)
    documented = {name for entries in inventory.values() for name in entries}
    missing = {
        module: sorted(
            name for name in public_names(module) if f"{module}.{name}" not in documented
        )
        for module in MODULES
    }

    assert missing == {module: [] for module in MODULES}
    assert {"assistant.services.chat_step", "assistant.testing.fake_provider.FakeProvider"} <= (
        documented
    )
    assert (
        "api.html#assistant.services.add_message"
        in (inventory["py:function"]["assistant.services.add_message"][2])
    )
