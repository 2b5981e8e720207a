"""The cumulative artifact index the window summary carries: files read and modified, URLs
fetched, records looked up (ids) and definitions (function, class, module names) found in
tool results, each with the handle of its latest stored original ("ref m4182").

Built from the tool calls' arguments and the results' text, never from the summarizer's
prose, so a summarizer that drops everything cannot drop these. Kept structured in the
conversation's metadata (ARTIFACT_INDEX), updated with each newly summarized slice, and
rendered into the summary deterministically (fixed order, newest entries kept first within
ARTIFACT_INDEX_MAX_TOKENS), so the text changes only when the index does. Files read then
modified are promoted to modified (as the Opal seed's read/modified files are).

The rules are general, not tuned to one agent: a path is the value of an argument whose
name says path or file, or a path-shaped token (a slash and an extension) in a command;
a tool modifies when its name says so (edit, write, create, replace, ...) unless its own
`command` argument says it only views; a record is an argument named like an id.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models.functions import Left

from assistant.models import SEARCH_INDEX_CHARS, Message, handle
from assistant.tokens import estimate_tokens

# Opens the index: the handles of every summarized original (the recall tools' description
# says what a ref is), then one line per category.
HEADING = "## Originals:"
CATEGORIES = ("modified", "read", "urls", "records", "definitions")
# Entries kept in metadata per category (the render keeps fewer, within its budget).
MAX_ENTRIES = 400
# Definitions taken from one result: a whole source file is not an index.
MAX_DEFINITIONS_PER_RESULT = 24

_PATH_KEY = re.compile(r"(?:^|_)(?:path|file|filename|filepath|dir|directory)$|path", re.I)
_URL_KEY = re.compile(r"(?:^|_)(?:url|uri|href|link)s?$", re.I)
# An argument naming a record: user_id, reservation_id, orderId, ids, uuid, flight_number.
_RECORD_KEY = re.compile(r"(?:^|_|(?<=[a-z]))(?:id|ids|uuid|number)$", re.I)
_SECRET_KEY = re.compile(r"secret|token|password|passwd|key|auth|credential", re.I)
_MODIFYING_TOOL = re.compile(
    r"edit|write|create|replace|insert|patch|apply|delete|remove|rename|move|save", re.I
)
_VIEW_COMMANDS = frozenset({"view", "read", "cat", "show", "open", "list", "ls"})
_URL = re.compile(r"https?://[^\s\"'<>`)\]}]+")
_COMMAND_PATH = re.compile(
    r"(?<![\w/.~-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w@+-][\w.@+-]*\.[A-Za-z][A-Za-z0-9]{0,7}(?![\w/])"
)
# Line prefixes of tool output before code: "  12→", "12\t", "path/x.py:12:", "12:".
_LINE_PREFIX = re.compile(r"^(?:\S+?:\d+[:-]|\s*\d+(?:→|\t|:\s|\s\|))")
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
_NOT_NAMES = frozenset({"if", "for", "while", "switch", "return", "else", "do", "sizeof", "main"})


def empty_index() -> dict[str, Any]:
    return {"first": None, "through": None, **{name: {} for name in CATEGORIES}}


def updated_index(previous: dict[str, Any] | None, messages: Sequence[Message]) -> dict[str, Any]:
    """`previous` (None: nothing indexed yet) with the artifacts of `messages`, a newly
    summarized slice in id order. One query: the leading text of its tool results."""
    index = empty_index()
    for name, value in (previous or {}).items():
        index[name] = dict(value) if isinstance(value, dict) else value
    if not messages:
        return index
    ids = [m.pk for m in messages]
    index["first"] = min(ids) if index["first"] is None else min(index["first"], *ids)
    index["through"] = max(ids) if index["through"] is None else max(index["through"], *ids)
    tools = [m for m in messages if m.role == Message.Role.TOOL]
    texts = dict(
        Message.objects.filter(pk__in=[m.pk for m in tools])
        .annotate(head=Left("content", SEARCH_INDEX_CHARS))
        .values_list("pk", "head")
    )
    for message in tools:
        _add_result(index, message, texts.get(message.pk) or "")
    for name in CATEGORIES:
        entries = index[name]
        if len(entries) > MAX_ENTRIES:  # the oldest handles go first
            kept = sorted(entries.items(), key=lambda item: (-item[1], item[0]))[:MAX_ENTRIES]
            index[name] = dict(kept)
    return index


def _add_result(index: dict[str, Any], message: Message, text: str) -> None:
    arguments = message.tool_arguments if isinstance(message.tool_arguments, dict) else {}
    found = message.pk
    modifies = _modifies(message.tool_name, arguments)
    for path in _paths(arguments):
        if modifies:
            index["read"].pop(path, None)
            index["modified"][path] = found
        elif path in index["modified"]:
            index["modified"][path] = found  # promoted once: it stays modified
        else:
            index["read"][path] = found
    for url in _urls(arguments):
        index["urls"][url] = found
    for record in _records(arguments):
        index["records"][record] = found
    for name in definitions(text):
        index["definitions"][name] = found


def _modifies(tool_name: str, arguments: dict[str, Any]) -> bool:
    command = arguments.get("command")
    if isinstance(command, str) and command.strip().split(" ", 1)[0].lower() in _VIEW_COMMANDS:
        return False
    return bool(_MODIFYING_TOOL.search(tool_name or ""))


def _strings(arguments: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """(key, string value) of the top-level arguments and of lists under them."""
    for key, value in arguments.items():
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, str):
                yield str(key), item


def _paths(arguments: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for key, value in _strings(arguments):
        value = value.strip()
        if _PATH_KEY.search(key) and _path_like(value):
            found.append(value)
        elif key.lower() in ("command", "cmd", "script", "input"):
            found.extend(match.group() for match in _COMMAND_PATH.finditer(value[:4000]))
    return list(dict.fromkeys(found))


def _path_like(value: str) -> bool:
    return (
        0 < len(value) <= 300
        and not any(ch.isspace() for ch in value)
        and ("/" in value or "." in value)
        and not value.startswith(("http://", "https://"))
    )


def _urls(arguments: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for key, value in _strings(arguments):
        if _URL_KEY.search(key) or "http" in value:
            found.extend(url.rstrip(".,;") for url in _URL.findall(value[:4000]))
    return [url for url in dict.fromkeys(found) if len(url) <= 300]


def _records(arguments: dict[str, Any]) -> list[str]:
    found = []
    for key, value in arguments.items():
        if not _RECORD_KEY.search(str(key)) or _SECRET_KEY.search(str(key)):
            continue
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, str | int) and not isinstance(item, bool):
                text = str(item).strip()
                if 0 < len(text) <= 80 and "\n" not in text:
                    found.append(f"{key} {text}")
    return found


def definitions(text: str) -> list[str]:
    """Names defined in source code within `text` (a file read, a grep, a diff), in order:
    `def`, `class`, `defmodule`, `function`, `func`, `fn`, `struct`, ... at the start of a
    line, and C-like function definitions; at most MAX_DEFINITIONS_PER_RESULT."""
    names: list[str] = []
    for raw in text.splitlines():
        line = _LINE_PREFIX.sub("", raw, count=1).lstrip("+- ") if raw else raw
        if len(line) > 400:
            continue
        match = _DEFINITION.match(line) or _C_FUNCTION.match(line)
        if match is None:
            continue
        name = match.group(1)
        if len(name) >= 3 and name not in _NOT_NAMES and name not in names:
            names.append(name)
            if len(names) >= MAX_DEFINITIONS_PER_RESULT:
                break
    return names


def render(index: dict[str, Any] | None, max_tokens: int) -> str:
    """The index as the summary carries it: its heading, the handles of every summarized
    original, then each category (modified files, files read, URLs, records,
    definitions), entries in handle order; when over `max_tokens`, the entries with the
    oldest handles are left out. "" when there is nothing to show or no room."""
    if not index or index.get("first") is None or max_tokens <= 0:
        return ""
    lines = [f"{HEADING} ref {handle(index['first'])}..{handle(index['through'])}"]
    if estimate_tokens("\n".join(lines)) > max_tokens:
        return ""
    entries = sorted(
        (
            (found, category, name)
            for category in CATEGORIES
            for name, found in index[category].items()
        ),
        key=lambda entry: (-entry[0], CATEGORIES.index(entry[1]), entry[2]),
    )
    budget = max_tokens - estimate_tokens("\n".join(lines)) - 1
    kept: list[tuple[int, str, str]] = []
    used = 0
    for entry in entries:  # newest first, each at about its own size
        cost = estimate_tokens(f"{entry[2]} (ref {handle(entry[0])}), ")
        if used + cost > budget:
            break
        kept.append(entry)
        used += cost
    body = _body(kept)
    while kept and estimate_tokens(body) > budget:  # labels and prefixes: checked exactly
        kept.pop()
        body = _body(kept)
    return "\n".join([*lines, body]) if body else "\n".join(lines)


def _body(entries: list[tuple[int, str, str]]) -> str:
    by_category: dict[str, list[tuple[int, str]]] = {name: [] for name in CATEGORIES}
    for found, category, name in entries:
        by_category[category].append((found, name))
    lines = []
    files = [name for category in ("modified", "read") for _, name in by_category[category]]
    prefix = _common_directory(files)
    for category, label in (("modified", "Files modified"), ("read", "Files read")):
        items = sorted(by_category[category])
        if items:
            shown = ", ".join(f"{name.removeprefix(prefix)} (ref {handle(h)})" for h, name in items)
            lines.append(f"{label}{f' (under {prefix})' if prefix else ''}: {shown}")
    for category, label in (("urls", "URLs"), ("records", "Records")):
        items = sorted(by_category[category])
        if items:
            lines.append(f"{label}: " + ", ".join(f"{name} (ref {handle(h)})" for h, name in items))
    grouped: dict[int, list[str]] = {}
    for found, name in sorted(by_category["definitions"]):
        grouped.setdefault(found, []).append(name)
    if grouped:
        lines.append(
            "Definitions: "
            + "; ".join(f"ref {handle(h)}: {', '.join(names)}" for h, names in grouped.items())
        )
    return "\n".join(lines)


def _common_directory(paths: list[str]) -> str:
    """The directory every absolute path shares (with its trailing slash), when there are
    two or more and it is long enough to be worth naming once; else ""."""
    absolute = [path for path in paths if path.startswith("/")]
    if len(absolute) < 2 or len(absolute) != len(paths):
        return ""
    common = os.path.commonpath(absolute)
    return f"{common}/" if len(common) >= 12 else ""


def without_index(summary: str | None) -> str | None:
    """`summary` without its rendered index (what the summarizer and the carried facts
    read: the index is rebuilt from the structured one, never from text)."""
    if not summary or HEADING not in summary:
        return summary
    if summary.startswith(HEADING):
        return ""
    return summary.split(f"\n\n{HEADING}", 1)[0].split(f"\n{HEADING}", 1)[0]
