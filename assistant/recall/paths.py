"""One file by its paths: an absolute path and the relative ones it ends with
("/srv/app/lib/a.py", "lib/a.py", "./lib/a.py"), as tools and their outputs name it.
Pure functions, for the artifact index (assistant.recall.artifact_index)."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def same_file(one: str, other: str) -> bool:
    """The same file by two of its paths: equal, or an absolute path ending with a
    relative one ("/srv/app/lib/a.py" and "lib/a.py" or "./lib/a.py")."""
    if one == other:
        return True
    absolute, relative = (one, other) if one.startswith("/") else (other, one)
    relative = relative.removeprefix("./")
    return (
        absolute.startswith("/")
        and not relative.startswith(("/", "~", "../"))
        and absolute.endswith("/" + relative)
    )


def absolute_form(known: Iterable[str]) -> Callable[[str], str]:
    """A path as the one absolute path of `known` that is the same file (`same_file`),
    when the path is relative and exactly one is; else as it is. By the tails of the
    known paths, once: the index asks it of every path a result lists."""
    ends: dict[str, set[str]] = {}
    for key in known:
        if key.startswith("/"):
            for tail in tails(key):
                ends.setdefault(tail, set()).add(key)

    def form(path: str) -> str:
        relative = path.removeprefix("./")
        if path.startswith(("/", "~", "../")) or relative.startswith(("/", "~", "../")):
            return path
        found = ends.get(relative, set())
        return next(iter(found)) if len(found) == 1 else path

    return form


def listed(paths: list[str]) -> Callable[[str], bool]:
    """Whether a name is one of `paths` by another of its forms (`same_file`), by sets:
    the render asks it of every name."""
    absolute = {path for path in paths if path.startswith("/")}
    relative = {path.removeprefix("./") for path in paths if not path.startswith("/")}
    ends = relative | {tail for path in absolute for tail in tails(path)}

    def check(name: str) -> bool:
        if name.startswith("/"):
            return name in absolute or any(tail in relative for tail in tails(name))
        return name.removeprefix("./") in ends

    return check


def tails(path: str) -> list[str]:
    """The relative paths an absolute `path` ends with: /a/b.py -> a/b.py, b.py."""
    return [path.split("/", cut)[-1] for cut in range(1, path.count("/") + 1)]
