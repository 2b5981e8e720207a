"""The one check of a public entry point's arguments (docs/api.rst, "Bad input").

`entry_point(**checks)` wraps a service, a task or a hook: the call is bound to its
signature first (an unknown keyword is ValidationError `unknown_field`, a missing or
surplus argument `invalid_arguments`, never a TypeError), then each named argument
passes its check, all before the body runs: before any model call, host tool, enqueue
or write. The checks are plain functions `(name, value) -> None` raising a coded
ValidationError; the ones shared by several entry points are here.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from django.core.exceptions import ValidationError

F = TypeVar("F", bound=Callable[..., Any])
Check = Callable[[str, Any], None]

# PostgreSQL's bigint, the ids' column (BigAutoField), and its integer column.
MAX_ID = 2**63 - 1
MAX_INT = 2**31 - 1


def entry_point(**checks: Check) -> Callable[[F], F]:
    """Decorate `function` so that its arguments are bound and checked before it runs."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)
        unknown = set(checks) - set(signature.parameters)
        if unknown:
            raise TypeError(f"{function.__name__} has no parameter {sorted(unknown)[0]!r}")

        def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            bound = bind(function, signature, args, kwargs)
            for name, value in bound.arguments.items():
                if name in checks:
                    checks[name](name, value)

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def checked_async(*args: Any, **kwargs: Any) -> Any:
                check(args, kwargs)
                return await function(*args, **kwargs)

            return checked_async  # type: ignore[return-value]  # wraps keeps the signature

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            check(args, kwargs)
            return function(*args, **kwargs)

        return checked  # type: ignore[return-value]  # wraps keeps the signature

    return decorate


def bind(
    function: Callable[..., Any],
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> inspect.BoundArguments:
    """The call bound to the signature, or the coded ValidationError a TypeError would be."""
    try:
        return signature.bind(*args, **kwargs)
    except TypeError as error:
        named = set(signature.parameters)
        extra = sorted(set(kwargs) - named)
        if extra and not _takes_any_keyword(signature):
            raise unknown_field(function.__name__, extra) from None
        raise ValidationError(
            f"{function.__name__}(): {error}.", code="invalid_arguments"
        ) from None


def _takes_any_keyword(signature: inspect.Signature) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())


def unknown_field(where: str, names: Collection[str]) -> ValidationError:
    return ValidationError(
        f"{where}() got unexpected fields: {', '.join(sorted(names))}.", code="unknown_field"
    )


def check_known(fields: dict[str, Any], known: Collection[str], where: str) -> None:
    """`fields` (a **fields catch-all) holds only `known` names, else `unknown_field`."""
    extra = set(fields) - set(known)
    if extra:
        raise unknown_field(where, extra)


# --- Shared checks ---------------------------------------------------------------------


def an_id(name: str, value: Any) -> None:
    """A row id: an integer from 1 to the bigint maximum (no bool, no string)."""
    if type(value) is not int or not 1 <= value <= MAX_ID:
        raise ValidationError(
            f"{name} must be an id (a positive integer), got {value!r}.", code=f"invalid_{name}"
        )


def optional_id(name: str, value: Any) -> None:
    if value is not None:
        an_id(name, value)


def optional_count(name: str, value: Any) -> None:
    """None, or an integer from 1 to the integer column's maximum."""
    if value is not None and (type(value) is not int or not 1 <= value <= MAX_INT):
        raise ValidationError(
            f"{name} must be a positive integer (at most {MAX_INT}) or None, got {value!r}.",
            code=f"invalid_{name}",
        )


def a_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValidationError(
            f"{name} must be True or False, got {value!r}.", code=f"invalid_{name}"
        )


def one_of(*choices: str) -> Check:
    """A check that the value is one of `choices` (a host keyword such as recall_scope)."""

    def check(name: str, value: Any) -> None:
        if value not in choices:
            listed = ", ".join(repr(choice) for choice in choices)
            raise ValidationError(
                f"{name} must be one of {listed}, got {value!r}.", code=f"invalid_{name}"
            )

    return check


def optional_callable(name: str, value: Any) -> None:
    if value is not None and not callable(value):
        raise ValidationError(
            f"{name} must be a function or None, got {type(value).__name__}.",
            code=f"invalid_{name}",
        )


def a_callable(name: str, value: Any) -> None:
    if not callable(value):
        raise ValidationError(
            f"{name} must be a function, got {type(value).__name__}.", code=f"invalid_{name}"
        )


def optional_seconds(name: str, value: Any) -> None:
    """None, or a positive finite number of seconds."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise ValidationError(
            f"{name} must be a positive number of seconds or None, got {value!r}.",
            code=f"invalid_{name}",
        )


def instance_of(kind: type) -> Check:
    """A check that the argument is a `kind`."""

    def check(name: str, value: Any) -> None:
        if not isinstance(value, kind):
            raise ValidationError(
                f"{name} must be a {kind.__name__}, got {type(value).__name__}.",
                code=f"invalid_{name}",
            )

    return check


def sequence_of(kind: type) -> Check:
    """A check that the argument is a sequence (a list, a tuple; not a text) of `kind`s."""

    def check(name: str, value: Any) -> None:
        if (
            isinstance(value, str | bytes)
            or not isinstance(value, Sequence)
            or not all(isinstance(v, kind) for v in value)
        ):
            raise ValidationError(
                f"{name} must be a list of {kind.__name__}s, got {value!r:.80}.",
                code=f"invalid_{name}",
            )

    return check


def optional_text(name: str, value: Any) -> None:
    """None, or a str."""
    if value is not None and not isinstance(value, str):
        raise ValidationError(
            f"{name} must be a text or None, got {type(value).__name__}.", code=f"invalid_{name}"
        )
