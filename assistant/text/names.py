"""The names a tool result's text holds, for the artifact index (assistant.recall.artifact_index):
definitions in source code of any language, paths, the keys of maps and configuration,
and code-shaped names in prose, quotes and code. Pure functions over text.

The rules go by the shape of a name, never by agent, tool or file: a definition is a
keyword of one of the common languages followed by a name, a C-like signature, or a
method's name and parameters opening its body (`private show(): void {`); a path
has a slash and an extension; a URL starts with its scheme, wherever it stands (a markdown
link's target too); a key is followed by ":", "?:", "=" or "=>"; a colour is a hex
literal (#rgb, #rrggbb, #rrggbbaa); an object's own member is named by its whole chain
(`this.ui.start`, `self.graph.invoke`: what a model calls it); every other name is taken
only when it is code-shaped (snake_case, camelCase, a qualified Module.name), so prose
words are never names. Every kind is in the order of the text, at most `most`. A name
another one found holds as its tail (`start` of `this.ui.start`) is not listed again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# Line prefixes of tool output before code: "  12→", "12\t", "path/x.py:12:", a grep
# context line "path/x.go-574-", "12:".
_LINE_PREFIX = re.compile(r"^(?:\S+?[:-]\d+[:-]|\s*\d+(?:→|\t|:\s|\s\|))")
_DEFINITION = re.compile(
    r"^\s*(?:(?:export|pub(?:\([\w ]+\))?|async|static|public|private|protected|abstract|"
    r"final|default|extern|inline|override|open|sealed|data|partial)\s+)*"
    r"(?:def|defp|defmacro|defmacrop|defmodule|defprotocol|defimpl|defstruct|defn|function|"
    r"func|fn|fun|class|module|interface|struct|enum|trait|impl|actor|primitive|object|"
    r"type|typedef\s+struct|union|sub|procedure|be)\s+"
    r"(?:\([^)]*\)\s*)?"  # a Go receiver
    r"(?:(?:ref|box|val|iso|trn|tag)\s+)?"  # a Pony capability
    r"([A-Za-z_][\w]*(?:(?:\.|::)[A-Za-z_]\w*)*[!?]?)"
)
# A C-like function definition at the start of a line: `static int name(args) {`.
_C_FUNCTION = re.compile(r"^(?:[A-Za-z_][\w]*[\s*]+){1,4}\**([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{?\s*$")
# A name given a value at the start of a line: `@attribute 10`, `const NAME =`, `name = `.
_ASSIGNMENT = re.compile(
    r"^\s*(?:@|(?:export\s+)?(?:const|let|var|val|readonly|static|final)\s+)?"
    r"([A-Za-z_$][\w$]*)\s*(?::\s*[\w.<>\[\], |]+)?\s*(?:=(?![=>~])|\s(?=[\w\"'\[{%:-]))"
)
# A method defined in a class body by its name alone (TypeScript, JavaScript): its
# modifiers, its name, its parameters, a return type, and its body opening on the line:
# `private showSelector(): void {`, `async load(path: string) {`, `get size(): number {`.
# A call is never followed by `{` on its line; a callback's arrow is not a return type.
_METHOD = re.compile(
    r"^\s*(?:(?:public|private|protected|internal|static|async|override|abstract|readonly|"
    r"get|set)\s+)*"
    r"([A-Za-z_$][\w$]*)\s*(?:<[^<>()]*>)?\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)"
    r"\s*(?::\s*[^;{}=]+?)?\s*\{\s*$"
)
_NOT_NAMES = frozenset(
    {"if", "for", "while", "switch", "return", "else", "do", "sizeof", "main"}
    | {"catch", "with", "function", "constructor", "foreach", "using", "lock", "when"}
)
# A path: optional root, one or more directories, a file with an extension.
PATH = re.compile(
    r"(?<![\w/.~-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w@+-][\w.@+-]*\.[A-Za-z][A-Za-z0-9]{0,7}(?![\w/])"
)
# A key of a map, a keyword list, JSON, YAML or TOML: `"name":`, `name:`, `name =>`; an
# optional field or parameter: `name?: Type`.
_KEY = re.compile(r"""(?:^|[\s{(,\[%|])["':]?([A-Za-z_][\w-]*)["']?\??\s*(?::(?=\s)|=>)""")
# A URL, up to what closes it in prose or markup (a quote, a bracket, a parenthesis).
URL = re.compile(r"https?://[^\s\"'<>`)\]}]+")
# A colour literal: #rgb, #rrggbb or #rrggbbaa.
_COLOUR = re.compile(r"(?<![\w&#])#(?:[0-9A-Fa-f]{8}|[0-9A-Fa-f]{6}|[0-9A-Fa-f]{3})(?![\w-])")
# An object's own member chain: `this.ui.start`, `self.graph.invoke`.
_OWN_CHAIN = re.compile(r"(?<![\w$.])(?:this|self)((?:\.[A-Za-z_$][\w$]*)+)")
# A name in backquotes or quotes.
_QUOTED = re.compile(r"""[`"']([A-Za-z_$@][\w$.:/@-]*[\w!?])[`"']""")
# A qualified name: Module.Sub.name, Module::name (two or more parts, the first capitalized).
_QUALIFIED = re.compile(r"(?<![\w.])([A-Z]\w*(?:(?:\.|::)[A-Za-z_]\w*)+[!?]?)")
# A name that is called or read as a member: `name(`, `.name`; a shell or template
# variable (`$NAME`, `${NAME}`).
_USED = re.compile(
    r"(?<![\w$])([A-Za-z_$][\w$]*[!?]?)\s*\(|\.([A-Za-z_$][\w$]*)|\$\{?([A-Za-z_]\w*)"
)
# Names declared by destructuring: `const [value, setValue] =`, `let { a, b } =`.
_DESTRUCTURED = re.compile(r"^\s*(?:export\s+)?(?:const|let|var|val)\s*[\[{]([^\]}=]*)[\]}]\s*=")
# A module's function called by its dotted name (`asyncio.run(`, `os.path.join(`): the
# chain is a name whatever its case; an object's own members (`self.`, `this.`) are not.
_CALLED_CHAIN = re.compile(r"(?<![\w$.])([a-z_]\w*(?:\.[A-Za-z_]\w*)+)\s*\(")
_OWN = frozenset({"self", "this", "cls", "super"})
_CAMEL = re.compile(r"[a-z0-9][A-Z]")


def code_shaped(name: str) -> bool:
    """A name no prose word looks like: snake_case, camelCase or PascalCase with an inner
    capital, or qualified (Module.name, Module::name); four characters at least."""
    core = name.strip("_$@!?:")
    if len(core) < 4 or len(core) > 120 or not re.fullmatch(r"[\w$.:/@-]+", core):
        return False
    if "/" in core:
        return False  # a path: PATH's
    if "_" in core.strip("_") or _CAMEL.search(core):
        return True
    return bool(re.search(r"[A-Za-z]\w*(?:\.|::)[A-Za-z_]\w*", core)) and core[0].isupper()


def definitions(text: str, most: int = 24) -> list[str]:
    """Names defined in source code within `text` (a file read, a grep, a diff), in order:
    `def`, `class`, `defmodule`, `function`, `func`, `fn`, `struct`, ... at the start of a
    line, C-like function definitions and methods defined in a class body; at most
    `most`."""
    names: list[str] = []
    for line in _code_lines(text):
        match = _DEFINITION.match(line) or _C_FUNCTION.match(line) or _METHOD.match(line)
        if match is None:
            continue
        name = match.group(1)
        if len(name) >= 3 and name not in _NOT_NAMES and name not in names:
            names.append(name)
            if len(names) >= most:
                break
    return names


def names_in(text: str, most: int) -> list[str]:
    """The names of `text` worth finding again, at most `most`, the surest kinds first:
    definitions, paths and URLs, assigned names and keys, quoted names and colours,
    qualified names, then the names code uses (an object's own members by their chain)."""
    found: dict[str, None] = {}
    tails: set[str] = set()  # of qualified names: Module.name says more than name
    kinds = (_definitions, _paths, _assigned, _keys, _quoted, _colours, _qualified, _urls)
    for kind in (*kinds, _own_chains, _used):
        for name in kind(text):
            if len(found) >= most:
                return list(found)
            if name not in tails:
                found.setdefault(name, None)
                tails.update(re.split(r"\.|::", name)[1:])
    return list(found)


def names_within(text: str, max_chars: int, shown: str = "") -> list[str]:
    """`names_in`'s names of `text` not already in `shown`, in its order, as many as
    fit in `max_chars` joined by ", ": what a compacted result lists of its original
    (assistant.text.truncation), and what the artifact index keeps of it once summarized."""
    kept: list[str] = []
    used = -2
    for name in names_in(text, most=max_chars // 3 + 1):
        if name in shown:
            continue
        used += len(name) + 2
        if used > max_chars:
            break
        kept.append(name)
    return kept


def _code_lines(text: str) -> Iterator[str]:
    for raw in text.splitlines():
        line = _LINE_PREFIX.sub("", raw, count=1).lstrip("+- ") if raw else raw
        if len(line) <= 400:
            yield line


def _definitions(text: str) -> list[str]:
    return definitions(text, most=10_000)


def _paths(text: str) -> Iterator[str]:
    for match in PATH.finditer(text):
        path = match.group()
        if len(path) <= 300 and not path.startswith("//"):
            yield path


def _assigned(text: str) -> Iterator[str]:
    for line in _code_lines(text):
        match = _ASSIGNMENT.match(line)
        if match and code_shaped(match.group(1)):
            yield match.group(1)
        elif (match := _DESTRUCTURED.match(line)) is not None:
            yield from (
                n for n in re.findall(r"[A-Za-z_$][\w$]*", match.group(1)) if code_shaped(n)
            )


def _keys(text: str) -> Iterator[str]:
    for match in _KEY.finditer(text):
        if code_shaped(match.group(1)):
            yield match.group(1)


def _quoted(text: str) -> Iterator[str]:
    for match in _QUOTED.finditer(text):
        if code_shaped(match.group(1)):
            yield match.group(1)


def _urls(text: str) -> Iterator[str]:
    for match in URL.finditer(text):
        url = match.group().rstrip(".,;:!?*")
        if len(url) <= 300 and url.count("/") >= 2 and "." in url.split("/")[2]:
            yield url


def _colours(text: str) -> Iterator[str]:
    for match in _COLOUR.finditer(text):
        yield match.group()


def _own_chains(text: str) -> Iterator[str]:
    for match in _OWN_CHAIN.finditer(text):
        if len(match.group(1)) > 4:  # `.` and four characters at least, as code_shaped
            yield match.group()


def _qualified(text: str) -> Iterator[str]:
    for match in _QUALIFIED.finditer(text):
        if code_shaped(match.group(1)):
            yield match.group(1)


def _used(text: str) -> Iterator[str]:
    for match in _USED.finditer(text):
        name = next(group for group in match.groups() if group)
        if name not in _NOT_NAMES and code_shaped(name):
            yield name
    for match in _CALLED_CHAIN.finditer(text):
        chain = match.group(1)
        if chain.split(".", 1)[0] not in _OWN and len(chain) >= 6:
            yield chain
