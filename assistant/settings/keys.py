"""How every setting the app reads is declared and checked, one way for all three
declarations: ASSISTANT_COMPACTION (conf), ASSISTANT_CLEANUP (cleanup) and the
plain settings (app).

A declaration is a frozen dataclass, one field a key: its type and default, and
for a number its valid range (`key(default, at_least=1)`). `checked()` takes a
written value to the declared type or refuses it with ImproperlyConfigured naming
the setting (`NAME must be int, got '50k'`, `NAME must be >= 1, got 0`);
`validated()` does it for every key of a dict setting, refusing unknown and
renamed keys too. Cross-key rules stay with the declaration they belong to.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Literal, get_args, get_origin

from django.core.exceptions import ImproperlyConfigured

# The longest text a str setting may hold (SUMMARY_INSTRUCTIONS and SUMMARY_LANGUAGE
# go into every summarizer call).
MAX_TEXT_SETTING = 4000


@dataclass(frozen=True)
class Range:
    """Valid values of a numeric key: bounds inclusive unless `above`/`below`."""

    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None

    def admits(self, value: float) -> bool:
        return not (
            (self.at_least is not None and value < self.at_least)
            or (self.above is not None and value <= self.above)
            or (self.at_most is not None and value > self.at_most)
            or (self.below is not None and value >= self.below)
        )

    def __str__(self) -> str:
        parts = [
            f"{word} {bound:g}"
            for word, bound in (
                (">=", self.at_least),
                (">", self.above),
                ("<=", self.at_most),
                ("<", self.below),
            )
            if bound is not None
        ]
        return " and ".join(parts)


def key(
    default: Any,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
    any_case: bool = False,
    blank_is_default: bool = False,
    secret: bool = False,
) -> Any:
    """A setting with its default: a number with its valid range; a text that may be
    written in any case (`any_case`: checked in lower case), left blank ("" or None)
    for its default (`blank_is_default`), or a `secret` no refusal shows."""
    metadata: dict[str, Any] = {
        "any_case": any_case,
        "blank_is_default": blank_is_default,
        "secret": secret,
    }
    if (at_least, above, at_most, below) != (None, None, None, None):
        metadata["range"] = Range(at_least, above, at_most, below)
    return field(default=default, metadata=metadata)


@functools.cache
def declared_types(declaration: type) -> dict[str, Any]:
    """Each key's declared type, resolved (the declarations may postpone annotations)."""
    return typing.get_type_hints(declaration)


@functools.cache
def declared_keys(declaration: type) -> dict[str, Field[Any]]:
    return {spec.name: spec for spec in fields(declaration)}


def default_of(spec: Field[Any]) -> Any:
    if spec.default is MISSING and spec.default_factory is not MISSING:
        return spec.default_factory()
    return spec.default


def _optional(declared: Any) -> Any | None:
    """The type of a `T | None` declaration, else None."""
    if get_origin(declared) in (typing.Union, types.UnionType):
        arms = [arm for arm in get_args(declared) if arm is not type(None)]
        if len(arms) == 1 and len(get_args(declared)) == 2:
            return arms[0]
    return None


def _described(declared: Any) -> str:
    if get_origin(declared) is Literal:
        return "|".join(str(choice) for choice in get_args(declared))
    if get_origin(declared) is dict:
        return f"{{name: {_described(get_args(declared)[1])}}}"
    return getattr(declared, "__name__", str(declared))


def _typed(label: str, declared: Any, value: Any) -> Any:
    """`value` as `declared`, or ImproperlyConfigured naming `label`."""
    if get_origin(declared) is Literal:
        if value not in get_args(declared):
            raise ImproperlyConfigured(f"{label} must be {_described(declared)}, got {value!r}")
        return value
    if get_origin(declared) is dict:
        return _mapping(label, get_args(declared)[1], value)
    scalar = _SCALARS.get(declared)
    if scalar is None:
        return value
    accepts, wording = scalar
    if not accepts(value):
        raise ImproperlyConfigured(f"{label} must be {wording}, got {value!r}")
    return float(value) if declared is float else value


def _mapping(label: str, inner: Any, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(name, str) for name in value):
        raise ImproperlyConfigured(f"{label} must map names to {_described(inner)}")
    try:
        return {name: _typed(label, inner, item) for name, item in value.items()}
    except ImproperlyConfigured:
        raise ImproperlyConfigured(f"{label} must map names to {_described(inner)}") from None


def _a_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and not math.isnan(value)


# Each scalar type: what it accepts, and how a refusal names it.
_SCALARS: dict[Any, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda value: isinstance(value, bool), "true or false"),
    int: (lambda value: isinstance(value, int) and not isinstance(value, bool), "int"),
    float: (_a_number, "float"),
    str: (
        lambda value: isinstance(value, str) and len(value) <= MAX_TEXT_SETTING,
        f"a string of at most {MAX_TEXT_SETTING} characters",
    ),
}


def checked(label: str, declared: Any, spec: Field[Any], value: Any) -> Any:
    """The written `value` of one key, of its declared type and in its range; else
    ImproperlyConfigured naming `label` (the setting, or the dict and its key)."""
    if spec.metadata.get("blank_is_default") and value in ("", None):
        return default_of(spec)
    optional = _optional(declared)
    if optional is not None:
        if value is None:
            return None
        declared = optional
    if spec.metadata.get("any_case") and isinstance(value, str):
        value = value.lower()
    if spec.metadata.get("secret"):
        try:
            return _typed(label, declared, value)
        except ImproperlyConfigured:
            raise ImproperlyConfigured(
                f"{label} must be a string of at most {MAX_TEXT_SETTING} characters, "
                f"got a {type(value).__name__} (not shown: a secret)"
            ) from None
    typed = _typed(label, declared, value)
    valid: Range | None = spec.metadata.get("range")
    if valid is not None and not valid.admits(typed):
        either = " or null" if optional is not None else ""
        raise ImproperlyConfigured(f"{label} must be {valid}{either}, got {typed!r}")
    return typed


def validated(
    setting: str, declaration: type, overrides: Any, renamed: dict[str, str] | None = None
) -> dict[str, Any]:
    """The keys written in the dict setting `setting`, each checked against
    `declaration`; a value that is no dict, a renamed key (naming its new name) and
    an unknown key are refused too."""
    if not isinstance(overrides, dict):
        raise ImproperlyConfigured(f"{setting} must be a dict (a JSON object)")
    renamed = renamed or {}
    for old in sorted(set(overrides) & set(renamed)):
        raise ImproperlyConfigured(f"{setting}[{old!r}] was renamed: use {renamed[old]!r} instead")
    known = declared_keys(declaration)
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ImproperlyConfigured(f"Unknown {setting} keys: {', '.join(map(str, unknown))}")
    kinds = declared_types(declaration)
    return {
        name: checked(f"{setting}[{name!r}]", kinds[name], known[name], value)
        for name, value in overrides.items()
    }
