"""How conversations are linked (sessions, continuations, branches), walked with one
recursive query each: a chain of any number of sessions costs one round trip."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

# One row per ancestor, nearest first: its id, its own parent and link, and how far
# up it is. UNION (not UNION ALL) ends the walk on a cycle the admin let through.
_ANCESTORS = """
WITH RECURSIVE up(id, parent_id, link, fork_message_id, fork_through_message_id, depth) AS (
    SELECT id, parent_conversation_id, parent_link, fork_message_id,
           fork_through_message_id, 0
    FROM assistant_conversation WHERE id = %s
  UNION
    SELECT c.id, c.parent_conversation_id, c.parent_link, c.fork_message_id,
           c.fork_through_message_id, up.depth + 1
    FROM assistant_conversation c JOIN up ON c.id = up.parent_id
    WHERE up.depth < %s
)
SELECT id, parent_id, link, fork_message_id, fork_through_message_id FROM up ORDER BY depth
"""

# Deeper than any real chain: the bound that ends a walk over a cycle.
MAX_WALK = 100_000


@dataclass(frozen=True)
class Link:
    """One conversation of a chain: its parent, how it is linked to it, and the
    parent's message it leaves at (a branch) or follows on from (the others)."""

    id: int
    parent_id: int | None
    link: str
    fork_message_id: int | None
    fork_through_message_id: int | None

    @property
    def bound(self) -> int | None:
        """The parent's last message this one sees: before a branch's fork message
        (that message included, as recall always read it), a continuation's or a
        session's last one."""
        if self.fork_message_id is not None:
            return self.fork_message_id
        return self.fork_through_message_id


def ancestors(conversation_id: int, *, most: int = MAX_WALK) -> list[Link]:
    """The conversation and its ancestors, nearest first, at most `most` links up:
    one query."""
    with connection.cursor() as cursor:
        cursor.execute(_ANCESTORS, [conversation_id, most])
        chain, seen = [], set()
        for row in cursor.fetchall():
            if row[0] in seen:  # a cycle the admin let through ends the chain
                break
            seen.add(row[0])
            chain.append(Link(*row))
        return chain
