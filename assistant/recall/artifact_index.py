"""The cumulative artifact index the window summary carries: files read and modified, URLs
fetched, records looked up (ids), and every summarized tool result by its handle ("ref
m4182") with what its call did and the names found in it (definitions, paths, keys,
quoted and qualified names: assistant.text.names). Each entry has the handle of its
latest stored original, so whatever the summary left out stays one recall away.

Built from the tool calls' arguments and the results' text, never from the summarizer's
prose, so a summarizer that drops everything cannot drop these. Kept structured in the
conversation's state (ARTIFACT_INDEX), updated with each newly summarized slice, and
rendered into the summary deterministically within ARTIFACT_INDEX_MAX_TOKENS: the files
read and modified first, within half of it, then the most recently used entries (used:
found, or named again by the user or the model, and so every entry of the result it
came from), each result's names in names_in's order, so the text changes only when the
index does. Paths are shown whole, as the model passes them to its tools: a relative
path a result names is the one absolute path the index knows ending with it. A file is
one entry whether its tools named it by its absolute or its relative path; a file read
then modified keeps both handles; a file read whole keeps that handle when a later
original of it is only a slice (a grep, a line range).

The rules are general, not tuned to one agent: a path is the value of an argument whose
name says path or file, or a path-shaped token (a slash and an extension) in a command;
a tool modifies when its name says so (edit, write, create, replace, ...) unless its own
`command` argument says it only views; a record is an argument named like an id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models.functions import Left, Length

from assistant.models import SEARCH_INDEX_CHARS, Message, handle
from assistant.recall.paths import absolute_form, listed, same_file
from assistant.settings.conf import compaction_config
from assistant.text import PATH, estimate_tokens, names_within

# Opens the index: the handles of every summarized original (the recall tools' description
# says what a ref is), then one line per category.
HEADING = "## Originals:"
CATEGORIES = ("modified", "read", "urls", "records", "calls", "names")
# The files read and modified, kept first in the render within this share of its budget
# (the rest by recency with everything else): a file's original holds all the names in it.
FILE_CATEGORIES = ("modified", "read")
FILES_SHARE = 0.5
# A read under this share of the file's read before is a slice of it (a grep, a range).
SLICE_SHARE = 0.5
# A run of letters and digits this long, with both, is a generated value (a key, a hash).
RANDOM_RUN_CHARS = 16
# Paths and URLs are looked for in the head of a command or a script only.
SCANNED_CHARS = 4000
# Longer is no path or URL worth indexing (a data: URL, a pasted blob).
MAX_PATH_CHARS = 300
# A record id or key value longer than this is text, not an id.
MAX_RECORD_CHARS = 80
# Entries kept in the stored index per category (the render keeps fewer, within its budget).
MAX_ENTRIES = 400
# What a call did, when it names no file, URL or record: at most this many characters.
LABEL_CHARS = 48

_PATH_KEY = re.compile(r"(?:^|_)(?:path|file|filename|filepath|dir|directory)$|path", re.I)
_URL_KEY = re.compile(r"(?:^|_)(?:url|uri|href|link)s?$", re.I)
# An argument naming a record: user_id, reservation_id, orderId, ids, uuid, flight_number.
_RECORD_KEY = re.compile(r"(?:^|_|(?<=[a-z]))(?:id|ids|uuid|number)$", re.I)
# An argument holding what a search looks for: pattern, query, regex, search_term, q.
_SEARCH_KEY = re.compile(
    r"^(?:q|pattern|query|regex|regexp|search|search_term|search_query)$", re.I
)
_SECRET_KEY = re.compile(r"secret|token|password|passwd|key|auth|credential", re.I)
_MODIFYING_TOOL = re.compile(
    r"edit|write|create|replace|insert|patch|apply|delete|remove|rename|move|save", re.I
)
_VIEW_COMMANDS = frozenset({"view", "read", "cat", "show", "open", "list", "ls"})
_URL = re.compile(r"https?://[^\s\"'<>`)\]}]+")
_LEADING_CD = re.compile(r"^cd\s+\S+\s*(?:&&|;)\s*")
# A word, path or value of a message, as an entry's key would name it.
_TOKEN = re.compile(r"[\w$@./:+-]+")


def empty_index() -> dict[str, Any]:
    return {"first": None, "through": None, **{name: {} for name in CATEGORIES}}


def updated_index(previous: dict[str, Any] | None, messages: Sequence[Message]) -> dict[str, Any]:
    """`previous` (None: nothing indexed yet) with the artifacts of `messages`, a newly
    summarized slice in id order. One query: the leading text of the slice's messages.
    An entry named again in the slice (a path, a name, a record value in any message's
    text or call) counts as used there: the render keeps the most recently used."""
    index = _loaded(previous)
    if not messages:
        return index
    ids = [m.pk for m in messages]
    index["first"] = min(ids) if index["first"] is None else min(index["first"], *ids)
    index["through"] = max(ids) if index["through"] is None else max(index["through"], *ids)
    rows = (
        Message.objects.filter(pk__in=ids)
        .annotate(head=Left("content", SEARCH_INDEX_CHARS), size=Length("content"))
        .values_list("pk", "head", "size")
    )
    texts = {pk: head for pk, head, _ in rows}
    sizes = {pk: size for pk, _, size in rows}
    for message in messages:
        if message.role == Message.Role.TOOL:
            _add_result(index, message, texts.get(message.pk) or "", sizes.get(message.pk) or 0)
    _mark_used(index, messages, texts)
    for name in CATEGORIES:
        entries = index[name]
        if len(entries) > MAX_ENTRIES:  # the least recently used go first
            kept = sorted(entries.items(), key=lambda item: (-item[1][1], item[0]))[:MAX_ENTRIES]
            index[name] = dict(kept)
    return index


def _loaded(previous: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of a stored index, each entry as [handle, last used, size of the original
    (a file read's, else 0), rank (a name's place among its result's names, else 0)];
    an index stored before entries had a last use (a bare handle), a size, a rank, or
    before names ("definitions") still loads."""
    index = empty_index()
    for name, value in (previous or {}).items():
        if not isinstance(value, dict):
            index[name] = value
            continue
        target = "names" if name == "definitions" else name
        if target not in CATEGORIES:
            continue
        for key, entry in value.items():
            stored = [entry, entry] if isinstance(entry, int) else list(entry)
            index[target][key] = [*stored, 0, 0][:4]
    return index


def _mark_used(index: dict[str, Any], messages: Sequence[Message], texts: dict[int, str]) -> None:  # noqa: C901
    """An entry the user or the model names again (in a message or a call's arguments)
    is used there, and with it every entry of the same result; a tool result naming it
    again does not count (outputs repeat names nobody asked for), it takes the entry's
    handle instead when it is indexed again."""
    last_seen: dict[str, int] = {}
    for message in messages:
        if message.role == Message.Role.TOOL:
            continue
        parts = [texts.get(message.pk) or ""]
        for call in message.tool_calls or ():
            if isinstance(call, dict):
                parts.append(json.dumps(call.get("arguments") or {}, ensure_ascii=False))
        for token in _TOKEN.findall("\n".join(parts)):
            token = token.rstrip(".:,;-")
            last_seen[token] = message.pk
            for cut in range(1, token.count("/") + 1):  # a path's tails: lib/x.ex, x.ex
                last_seen[token.split("/", cut)[-1]] = message.pk
    results: dict[int, int] = {}  # handle -> when a name found in it was used
    for category in ("modified", "read", "urls", "records", "names"):
        for key, entry in index[category].items():
            # A record is named by its value ("reservation_id JG7FMM": JG7FMM).
            seen = last_seen.get(key.rsplit(" ", 1)[-1] if category == "records" else key)
            if seen is not None and seen > entry[1]:
                entry[1] = seen
                results[entry[0]] = max(seen, results.get(entry[0], 0))
    # A result whose name is used again is in use: what it did, its file and its other
    # names go with that name (the work goes on with the code it showed).
    for category in CATEGORIES:
        for entry in index[category].values():
            entry[1] = max(entry[1], results.get(entry[0], 0))


def _add_result(index: dict[str, Any], message: Message, text: str, size: int) -> None:  # noqa: C901
    arguments = message.tool_arguments if isinstance(message.tool_arguments, dict) else {}
    found = message.pk
    named = False
    modifies = _modifies(message.tool_name, arguments)
    paths = [_one_form(index, path) for path in _paths(arguments)]
    searched = bool(_searched_for(arguments))
    for path in paths:
        if searched:
            # A search within a file or a folder: what it found depends on its pattern, so
            # it never takes the place of the path's read (nor one search another's); it
            # is listed as a call. A file read whole before counts as used.
            held = index["read"].get(path)
            if held is not None:
                held[1] = max(held[1], found)
            continue
        named = True
        # A file read then modified keeps both handles: its text, and the change.
        if modifies:
            index["modified"][path] = [found, found, 0, 0]
            continue
        held = index["read"].get(path)
        if held is not None and size < SLICE_SHARE * held[2]:
            # A slice of a file read whole before (a grep, a range): the handle stays on
            # the fuller original, which holds the slice too; the slice's names keep its own.
            held[1] = found
        else:
            index["read"][path] = [found, found, size, 0]
    for url in _urls(arguments):
        named = True
        index["urls"][url] = [found, found, 0, 0]
    for record in _records(arguments):
        named = True
        index["records"][record] = [found, found, 0, 0]
    if not named:
        label = _label(message.tool_name, arguments)
        if label:
            index["calls"][label] = [found, found, 0, 0]
    # The names its truncated form lists (TRUNCATION_NAMES_MAX_CHARS), in names_in's
    # order, the surest kinds first: the render keeps a result's first ones.
    names = names_within(text, compaction_config().TRUNCATION_NAMES_MAX_CHARS)
    # A relative path it lists (a grep's `lib/x.py`) is the absolute one known ending with
    # it: the known paths are mapped only for a result that lists a path.
    whole = None
    if any(_is_path(name) for name in names):
        whole = absolute_form(key for c in ("names", *FILE_CATEGORIES) for key in index[c])
    for rank, name in enumerate(names):
        # A result naming its own file (an edit's "updated x.py") says nothing new.
        if not _random_looking(name) and not any(p.endswith(name) for p in paths):
            key = whole(name) if whole is not None and _is_path(name) else name
            index["names"][key] = [found, found, 0, rank]


def _is_path(name: str) -> bool:
    return "/" in name and "://" not in name


def _one_form(index: dict[str, Any], path: str) -> str:
    """The key of `path` among the files: a relative path is the absolute one indexed
    that ends with it, when there is exactly one; an absolute path takes over the
    relative entries it ends with (the newer original of each category kept), so one
    file is one entry whichever form its tools named it by."""
    if not path.startswith("/"):
        return absolute_form(key for c in FILE_CATEGORIES for key in index[c])(path)
    for category in FILE_CATEGORIES:
        entries = index[category]
        for key in [k for k in entries if not k.startswith("/") and same_file(path, k)]:
            entry = entries.pop(key)
            held = entries.setdefault(path, entry)
            if entry[0] > held[0] and entry[2] >= SLICE_SHARE * held[2]:  # newer, not a slice
                held[0], held[2] = entry[0], entry[2]
            held[1] = max(held[1], entry[1])
    return path


def _label(tool_name: str, arguments: dict[str, Any]) -> str:
    """What a call that names no file, URL or record did, in a few words: its tool and
    what it searched for, else its first string argument (a command without its leading
    `cd DIR &&`). Two searches of one folder are two entries."""
    strings = [
        v
        for k, v in arguments.items()
        if isinstance(v, str) and v.strip() and not _SECRET_KEY.search(str(k))
    ]
    value = (_searched_for(arguments) or strings or [""])[0]
    value = _LEADING_CD.sub("", " ".join(value.split()))
    if len(value) > LABEL_CHARS:
        value = value[: LABEL_CHARS - 1].rstrip() + "…"
    return f"{tool_name or 'tool'} {value}".strip()


def _random_looking(name: str) -> bool:
    """A generated value (a key, a token, a hash) rather than a name: never indexed."""
    return any(
        len(run) >= RANDOM_RUN_CHARS and re.search(r"\d", run) and re.search(r"[A-Za-z]", run)
        for run in re.findall(r"[A-Za-z0-9]+", name)
    )


def _searched_for(arguments: dict[str, Any]) -> list[str]:
    """What the call searches for (the arguments naming its pattern or query), if any."""
    return [
        value
        for key, value in arguments.items()
        if _SEARCH_KEY.search(str(key)) and isinstance(value, str) and value.strip()
    ]


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
            found.extend(match.group() for match in PATH.finditer(value[:SCANNED_CHARS]))
    return list(dict.fromkeys(found))


def _path_like(value: str) -> bool:
    return (
        0 < len(value) <= MAX_PATH_CHARS
        and not any(ch.isspace() for ch in value)
        and ("/" in value or "." in value)
        and not value.startswith(("http://", "https://"))
    )


def _urls(arguments: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for key, value in _strings(arguments):
        if _URL_KEY.search(key) or "http" in value:
            found.extend(url.rstrip(".,;") for url in _URL.findall(value[:SCANNED_CHARS]))
    return [url for url in dict.fromkeys(found) if len(url) <= MAX_PATH_CHARS]


def _records(arguments: dict[str, Any]) -> list[str]:
    found = []
    for key, value in arguments.items():
        if not _RECORD_KEY.search(str(key)) or _SECRET_KEY.search(str(key)):
            continue
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, str | int) and not isinstance(item, bool):
                text = str(item).strip()
                if 0 < len(text) <= MAX_RECORD_CHARS and "\n" not in text:
                    found.append(f"{key} {text}")
    return found


# --- the rendered index ---------------------------------------------------------------


def render(index: dict[str, Any] | None, max_tokens: int) -> str:
    """The index as the summary carries it: its heading with the handles of every
    summarized original, then files modified and read, URLs, records, and the summarized
    results by handle (what the call did, the names found in it). Within `max_tokens`,
    the most recently used entries are kept. "" when there is nothing to show or no room."""
    index = _loaded(index) if index else None
    if not index or index.get("first") is None or max_tokens <= 0:
        return ""
    heading = f"{HEADING} ref {handle(index['first'])}..{handle(index['through'])}"
    if estimate_tokens(heading) > max_tokens:
        return ""
    entries = sorted(
        (
            (entry[1], entry[0], category, key)
            for category in CATEGORIES
            for key, entry in index[category].items()
        ),
        key=lambda item: (
            -item[0],
            -item[1],
            CATEGORIES.index(item[2]),
            index[item[2]][item[3]][3],  # a result's names in names_in's order
            item[3],
        ),
    )
    files = [entry for entry in entries if entry[2] in FILE_CATEGORIES]
    # The files first, within their share: a file's original holds every name in it.
    files = files[: _longest_within(heading, files, round(max_tokens * FILES_SHARE))]
    ordered = files + _rest(entries, files)
    # Every original the entries name keeps its handle: those the budget leaves out are
    # listed by handle alone, so what the index drops stays one recall away.
    originals = sorted({entry[1] for entry in entries})
    if estimate_tokens(_rendered(heading, [], originals)) > max_tokens:
        originals = []
    return _rendered(
        heading,
        ordered[: _longest_within(heading, ordered, max_tokens, originals)],
        originals,
    )


def _rest(
    entries: list[tuple[int, int, str, str]], files: list[tuple[int, int, str, str]]
) -> list[tuple[int, int, str, str]]:
    """The entries after the files, the most recently used first (a result's names in
    names_in's order), without a name a file shown is (`listed`) or that an entry
    before it holds (`start` after `this.ui.start`): the model reads it there. A call
    whose result had no name to list comes after every entry that names something: its
    label says what it ran, never a name the model could use, and its handle stays in
    the originals listed by handle."""
    chosen = set(files)
    shown_file = listed([entry[3] for entry in files])
    shown = "\x00".join(entry[3] for entry in files)
    rest = []
    for entry in entries:
        if entry in chosen:
            continue
        if entry[2] == "names" and (shown_file(entry[3]) or entry[3] in shown):
            continue
        rest.append(entry)
        shown += "\x00" + entry[3]
    named = {entry[1] for entry in entries if entry[2] == "names"}
    unnamed = {entry for entry in rest if entry[2] == "calls" and entry[1] not in named}
    return [e for e in rest if e not in unnamed] + [e for e in rest if e in unnamed]


def _longest_within(
    heading: str,
    entries: list[tuple[int, int, str, str]],
    max_tokens: int,
    originals: Sequence[int] = (),
) -> int:
    """How many of `entries`, from the first, the render holds within `max_tokens`
    (a binary search over the rendered text itself: shared prefixes and handles make
    an entry's own size no measure of what it adds)."""
    low, high = 0, len(entries)
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(_rendered(heading, entries[:middle], originals)) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return low


def _rendered(  # noqa: C901
    heading: str, entries: list[tuple[int, int, str, str]], originals: Sequence[int] = ()
) -> str:
    by_category: dict[str, dict[str, int]] = {name: {} for name in CATEGORIES}
    for _, found, category, key in entries:
        by_category[category][key] = found
    lines = [heading]
    modified, read = by_category["modified"], by_category["read"]
    if modified:
        items = []
        for path, found in sorted(modified.items(), key=lambda item: (item[1], item[0])):
            also = read.get(path)
            shown = f"ref {handle(found)}"
            if also is not None and also != found:
                shown = f"read ref {handle(also)}, changed ref {handle(found)}"
            items.append(f"{path} ({shown})")
        lines.append("Files modified: " + ", ".join(items))
    read_only = sorted((found, path) for path, found in read.items() if path not in modified)
    if read_only:
        lines.append("Files read: " + ", ".join(f"{p} (ref {handle(h)})" for h, p in read_only))
    for category, label in (("urls", "URLs"), ("records", "Records")):
        named = sorted((found, key) for key, found in by_category[category].items())
        if named:
            lines.append(f"{label}: " + ", ".join(f"{k} (ref {handle(h)})" for h, k in named))
    results: dict[int, tuple[list[str], list[str]]] = {}
    for label, found in by_category["calls"].items():
        results.setdefault(found, ([], []))[0].append(label)
    for name, found in by_category["names"].items():
        results.setdefault(found, ([], []))[1].append(name)
    if results:
        items = []
        for found, (labels, names) in sorted(results.items()):
            what = f" {labels[0]}" if labels else ""
            items.append(f"ref {handle(found)}{what}{': ' if names else ''}{', '.join(names)}")
        lines.append("Results: " + "; ".join(items))
    named_here = {entry[1] for entry in entries}
    others = [f"ref {handle(found)}" for found in originals if found not in named_here]
    if others:
        lines.append("Other originals: " + ", ".join(others))
    return "\n".join(lines)


def without_index(summary: str | None) -> str | None:
    """`summary` without its rendered index (what the summarizer and the carried facts
    read: the index is rebuilt from the structured one, never from text)."""
    if not summary or HEADING not in summary:
        return summary
    if summary.startswith(HEADING):
        return ""
    return summary.split(f"\n\n{HEADING}", 1)[0].split(f"\n{HEADING}", 1)[0]
