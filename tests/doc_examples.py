"""The code blocks of the README and of the docs, each with its mark.

A block a reader would copy is marked with how the test suite runs it, or,
visibly, why it cannot run there:

- README.md: an HTML comment on the line before the fence,
  ``<!-- example: run host-append mysite/settings.py -->`` or
  ``<!-- example: not-run: why -->`` (the block itself then says
  "not run by the test suite");
- docs/*.rst: the ``example`` directive of docs/_ext/assistant_docs.py,
  ``.. example:: python`` with ``:run: django`` or ``:not-run: why`` (the page
  shows the reason above the block).

Kinds of ``run`` and the test that runs each: see RUNNERS.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"

# kind -> the test module that runs every example of that kind
RUNNERS = {
    "host-shell": "tests/test_packaging.py",  # a command run in the fresh host project
    "host-create": "tests/test_packaging.py",  # a file of the host project, created
    "host-append": "tests/test_packaging.py",  # appended to a file of the host project
    "host-usage": "tests/test_packaging.py",  # the chat loop's use, in the host project
    "django": "tests/test_doc_examples.py",  # executed in this project, names given
    "settings": "tests/test_doc_examples.py",  # settings: applied, the app's checks run
    "server": "tests/test_doc_examples.py",  # a server: started, answers, stopped
    "make": "tests/test_doc_examples.py",  # a make target of this repository
    # a file of this repository shown word for word; the file's own tests run it
    "repo-file": "tests/test_doc_examples.py",
}
HOST_KINDS = ("host-shell", "host-create", "host-append", "host-usage")
# Languages of code a reader copies; other blocks (json, text) show output or layout.
CODE_LANGUAGES = ("python", "sh", "bash", "shell", "console")

_README_FENCE = re.compile(
    r"^(?:<!-- example: (?P<mark>.*?) -->\n)?```(?P<lang>[\w-]*)\n(?P<code>.*?)^```", re.M | re.S
)
_RST_EXAMPLE = re.compile(
    r"^\.\. example:: (?P<lang>\w+)\n"
    r"(?P<options>(?:   :[\w-]+:.*\n)+)\n"
    r"(?P<body>(?:(?:   .*)?\n)+)",
    re.M,
)
_RST_CODE = re.compile(r"^\.\. (?:code-block|code|sourcecode):: (\w+)", re.M)


@dataclass(frozen=True)
class Example:
    source: str  # README.md, docs/<page>.rst
    line: int
    language: str
    mark: str  # "run <kind> [args]", "not-run: <why>", or "" (unmarked: an error)
    code: str

    @property
    def runs(self) -> bool:
        return self.mark.startswith("run ")

    @property
    def kind(self) -> str:
        return shlex.split(self.mark)[1] if self.runs else ""

    @property
    def args(self) -> list[str]:
        return shlex.split(self.mark)[2:] if self.runs else []

    @property
    def reason(self) -> str:
        if not self.mark.startswith("not-run:"):
            return ""
        return self.mark.removeprefix("not-run:").strip()

    def __str__(self) -> str:
        return f"{self.source}:{self.line} ({self.mark or 'unmarked'})"


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def readme_examples(path: Path = REPO / "README.md") -> list[Example]:
    text = path.read_text()
    return [
        Example(
            path.relative_to(REPO).as_posix(),
            _line(text, match.start("code")),
            match["lang"],
            (match["mark"] or "").strip(),
            match["code"].rstrip("\n"),
        )
        for match in _README_FENCE.finditer(text)
    ]


def rst_examples(path: Path) -> list[Example]:
    text = path.read_text()
    found = []
    for match in _RST_EXAMPLE.finditer(text):
        options = dict(re.findall(r"^   :([\w-]+):\s*(.*)$", match["options"], re.M))
        mark = f"run {options['run']}" if "run" in options else ""
        if "not-run" in options:
            mark = f"not-run: {options['not-run']}"
        found.append(
            Example(
                path.relative_to(REPO).as_posix(),
                _line(text, match.start("body")),
                match["lang"],
                mark,
                textwrap.dedent(match["body"]).strip("\n"),
            )
        )
    return found


def plain_code_blocks(path: Path) -> list[str]:
    """Code blocks of a docs page written without the example directive (an error)."""
    text = path.read_text()
    return [
        f"{path.relative_to(REPO)}:{_line(text, m.start())}"
        for m in _RST_CODE.finditer(text)
        if m[1] in CODE_LANGUAGES
    ]


def docs_pages() -> list[Path]:
    return sorted(path for path in DOCS.rglob("*.rst") if "_build" not in path.parts)


def all_examples() -> list[Example]:
    found = readme_examples()
    for page in docs_pages():
        found += rst_examples(page)
    return found


#: The one docs page whose host blocks may add to the README's (the README stays short):
#: tests/test_packaging.py applies them after the README's, in the page's order.
HOST_EXTENSIONS_PAGE = "docs/chat-loop.rst"


def host_extensions() -> list[Example]:
    """The host-create and host-append blocks of HOST_EXTENSIONS_PAGE the README lacks."""
    readme = {(e.kind, tuple(e.args), e.code) for e in readme_examples()}
    return [
        example
        for example in rst_examples(REPO / HOST_EXTENSIONS_PAGE)
        if example.kind in ("host-create", "host-append")
        and (example.kind, tuple(example.args), example.code) not in readme
    ]


def examples_of(kind: str, source: str | None = None) -> list[Example]:
    """The examples of one kind, a block repeated word for word (README and docs) once."""
    unique: dict[tuple[str, tuple[str, ...], str], Example] = {}
    for example in all_examples():
        if example.kind == kind and (source is None or example.source == source):
            unique.setdefault((example.kind, tuple(example.args), example.code), example)
    return list(unique.values())
