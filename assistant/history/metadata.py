"""Atomic writes to a JSON `metadata` column: a message's (the restore marks
one KEEP_VERBATIM there). A conversation's own state is in columns
(assistant.history.state_writes); its `metadata` is the host's.

Read-modify-save of a JSON column loses a concurrent write of another key;
these helpers merge and remove keys in one UPDATE, in the database.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Func, JSONField, QuerySet, Value
from django.db.models.expressions import Combinable
from django.db.models.sql.compiler import SQLCompiler


class _JsonbMerge(Func):
    """metadata || '{...}'::jsonb (PostgreSQL), json_patch(metadata, '{...}') (SQLite)."""

    output_field = JSONField()

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        lhs, lhs_params = compiler.compile(self.source_expressions[0])
        rhs, rhs_params = compiler.compile(self.source_expressions[1])
        return f"(COALESCE({lhs}, '{{}}'::jsonb) || {rhs})", (*lhs_params, *rhs_params)

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        lhs, lhs_params = compiler.compile(self.source_expressions[0])
        rhs, rhs_params = compiler.compile(self.source_expressions[1])
        return f"json_patch(COALESCE({lhs}, '{{}}'), {rhs})", (*lhs_params, *rhs_params)


class _JsonbRemove(Func):
    """metadata - 'key' - ... (PostgreSQL), json_remove(metadata, '$."key"', ...) (SQLite)."""

    output_field = JSONField()

    def __init__(self, expression: Combinable, keys: list[str]) -> None:
        super().__init__(expression)
        self.keys = keys

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        sql, compiled = compiler.compile(self.source_expressions[0])
        params = tuple(compiled)
        for key in self.keys:
            sql = f"({sql} - %s)"
            params = (*params, key)
        return sql, params

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        sql, params = compiler.compile(self.source_expressions[0])
        paths = ", ".join(["%s"] * len(self.keys))
        return f"json_remove({sql}, {paths})", (*params, *(f'$."{k}"' for k in self.keys))


def metadata_expression(
    set_values: dict[str, Any] | None = None, remove: list[str] | tuple[str, ...] = ()
) -> Combinable:
    expression: Combinable = F("metadata")
    if remove:
        expression = _JsonbRemove(expression, list(remove))
    if set_values:
        # Value(..., JSONField()) lets the backend adapt the dict as json/jsonb.
        expression = _JsonbMerge(expression, Value(set_values, output_field=JSONField()))
    return expression


def merge_metadata(
    queryset: QuerySet,
    set_values: dict[str, Any] | None = None,
    remove: list[str] | tuple[str, ...] = (),
    **other_updates: Any,
) -> int:
    """Set and remove metadata keys of every row of `queryset` in one UPDATE,
    leaving all other keys as they are in the database. Returns rows updated."""
    json.dumps(set_values or {}, allow_nan=False)  # fail here, not half-way in SQL
    vendor = connections[queryset.db].vendor
    if vendor not in ("postgresql", "sqlite"):
        raise NotImplementedError(f"merge_metadata does not support {vendor}")
    return queryset.update(metadata=metadata_expression(set_values, remove), **other_updates)
