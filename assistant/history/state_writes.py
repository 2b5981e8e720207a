"""Every write of a conversation's own state (the summary, the split, the
pending summary, the ledger, the flags: `assistant.metadata_keys`), and its
fresh reads.

Each write is one UPDATE of the named columns, so a concurrent write of other
columns is kept; a write of what the context's size is made of (SIZE_STATE)
makes the next stored message measure the window again. `Conversation.metadata`
is the host's: nothing here reads or writes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet

from assistant.metadata_keys import SIZE_STATE, STATE_EMPTY, STATE_FIELDS, ConversationMetadata
from assistant.models import Conversation


def write_state(
    rows: QuerySet[Conversation],
    values: dict[str, Any] | None = None,
    clear: Iterable[str] = (),
    **other_updates: Any,
) -> int:
    """Set the state columns `values` and clear the columns `clear` (to their
    empty value) of every row of `rows` in one UPDATE, with `other_updates`.
    Returns the rows updated."""
    updates = {name: STATE_EMPTY[name] for name in clear}
    for name, value in (values or {}).items():
        if name not in STATE_EMPTY:
            raise KeyError(f"{name!r} is not a state column of Conversation")
        json.dumps(value, allow_nan=False)  # fail here, not half-way in SQL
        updates[name] = value
    if SIZE_STATE.intersection(updates):
        updates["context_estimate"] = None
    return rows.update(**updates, **other_updates)


def new_conversation(values: dict[str, Any], **fields: Any) -> Conversation:
    """Create a conversation (a fork) with its initial state `values`."""
    for name, value in values.items():
        if name not in STATE_EMPTY:
            raise KeyError(f"{name!r} is not a state column of Conversation")
        json.dumps(value, allow_nan=False)
    return Conversation.objects.create(**fields, **values)


def remember(row: object, values: dict[str, Any] | None = None, clear: Iterable[str] = ()) -> None:
    """Record on an in-memory copy (a Conversation, a WindowState's values) what
    `write_state` just stored."""
    updates = {**{name: STATE_EMPTY[name] for name in clear}, **(values or {})}
    for name, value in updates.items():
        if isinstance(row, dict):
            row[name] = value
        else:
            setattr(row, name, value)


def read_state(conversation_id: int) -> dict[str, Any]:
    """A conversation's state columns, fresh from the database (empty values for
    a missing row): never trust an in-memory copy another process may have
    outdated."""
    found = Conversation.objects.filter(pk=conversation_id).values(*STATE_FIELDS).first()
    return dict(found or STATE_EMPTY)


def refresh_state(conversation: Conversation) -> None:
    """Bring a caller's Conversation up to date with its stored state."""
    remember(conversation, read_state(conversation.pk))


def fresh_state(conversation_id: int) -> ConversationMetadata:
    """The typed reads of `read_state`: one query."""
    return ConversationMetadata(read_state(conversation_id))
