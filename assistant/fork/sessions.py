"""Sessions and the tree (docs/chat-loop.rst, "Sessions and the tree").

A session is a Conversation linked to the one before it (`parent_link = "session"`),
as a fork is: the admin, recall, export and cleanup work on it unchanged, and
session links do not count toward MAX_FORK_DEPTH.

- `new_session` closes a session and opens the next (/new carries its summary,
  /clear nothing); the messages stay where they were. The summary is made by the
  worker (generate_parent_summary); until it lands the new session carries the
  offline summary with the carried facts, replaced when the model's arrives.
- `resume_session` reopens an earlier session when its full context fits under
  the trigger, else opens a new session carrying its summary.
- `list_sessions` lists a chain's sessions; `conversation_tree` returns the whole
  tree a conversation belongs to (two queries whatever its size);
  `set_active_branch` makes one conversation the shown sibling at each
  departure point from the root down to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import BigIntegerField, Case, Value, When

from assistant.fork.branching import summarize_parent
from assistant.history import (
    PARENT_SUMMARY_TASK,
    deleted_error,
    enqueue_on_commit,
    new_conversation,
)
from assistant.models import (
    MAX_WALK,
    Conversation,
    Message,
    MetadataKeys,
    ancestors,
)
from assistant.settings.conf import compaction_config
from assistant.window import context_tokens, refresh_size

SESSION = Conversation.Link.SESSION


@dataclass(frozen=True)
class Resumed:
    """The conversation a chat goes on in after /resume, and whether it is the
    resumed one itself, reopened with its full context."""

    conversation: Conversation
    reopened: bool


@dataclass(frozen=True)
class SessionInfo:
    """One session of a chain, as a /resume list shows it."""

    conversation: Conversation
    title: str
    created: datetime
    last_activity: datetime
    size: int  # the context's tokens, as stored (Conversation.context_tokens)
    summary: str | None  # what stands for it: the summary its next session carries, or its own


@dataclass
class TreeNode:
    """One conversation of a tree: where it leaves its parent (`departs_at`: a
    branch's fork message, a continuation's or a session's last parent message it
    follows on from; None for the root), its children, and whether it is on the
    active path (`active`: what a chat UI shows)."""

    conversation: Conversation
    departs_at: int | None
    link: str
    active: bool
    summary: str | None
    size: int
    last_activity: datetime
    children: list[TreeNode] = field(default_factory=list)

    def walk(self) -> list[TreeNode]:
        """This node and every node below it, parents first."""
        nodes, stack = [], [self]
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(reversed(node.children))
        return nodes

    def find(self, conversation: Conversation | int) -> TreeNode | None:
        """The node of `conversation` in this tree (None: not in it)."""
        pk = conversation if isinstance(conversation, int) else conversation.pk
        return next((node for node in self.walk() if node.conversation.pk == pk), None)

    def siblings_at(self, message_id: int) -> list[TreeNode]:
        """The siblings at one of this conversation's messages: itself (which goes on
        past that message), then each branch that leaves there, oldest first (the
        "< 2/3 >" of a chat UI)."""
        branches = [
            child
            for child in self.children
            if child.link == Conversation.Link.BRANCH and child.departs_at == message_id
        ]
        return [self, *branches]


def _last_message_id(conversation: Conversation) -> int | None:
    return (
        Message.objects.filter(conversation_id=conversation.pk)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )


def new_session(conversation: Conversation, *, carry_summary: bool = True) -> Conversation:
    """Close `conversation`'s session and open the next: a new conversation with the
    same owner, title, system prompt and tool services, linked as a session. With
    `carry_summary` (/new) it carries the closed session's summary: the offline one
    at once, the model's when the worker has made it; without (/clear) nothing."""
    through_id = _last_message_id(conversation)
    state: dict[str, Any] = {MetadataKeys.TOOL_SERVICES: conversation.tool_services}
    if through_id is not None:
        state[MetadataKeys.FORK_THROUGH_MESSAGE_ID] = through_id
    deferred = False
    if carry_summary:
        end_before = through_id + 1 if through_id is not None else None
        offline = summarize_parent(conversation, end_before=end_before, offline=True)
        if offline.text:
            state[MetadataKeys.PARENT_CONVERSATION_SUMMARY] = offline.text
        # The model's summary replaces it, made by the worker, when there is a slice.
        deferred = offline.called_summarizer
        if deferred:
            state[MetadataKeys.SUMMARY_DEFERRED] = True
    with transaction.atomic():
        session = new_conversation(
            state,
            user_id=conversation.user_id,
            title=conversation.title,
            parent_conversation=conversation,
            parent_link=SESSION,
            system_prompt=conversation.system_prompt,
        )
        refresh_size(session.pk)
        set_active_branch(session)
        if deferred:
            enqueue_on_commit(PARENT_SUMMARY_TASK, session.pk)
    session.refresh_from_db()
    return session


def resume_session(conversation: Conversation) -> Resumed:
    """The conversation a chat goes on in when it resumes `conversation`: itself,
    reopened with its full context, when its context is under the trigger; else a
    new session carrying its summary."""
    if context_tokens(conversation) < compaction_config().CONTEXT_TOKEN_THRESHOLD:
        set_active_branch(conversation)
        return Resumed(conversation, True)
    return Resumed(new_session(conversation, carry_summary=True), False)


# The rows of a set of conversations with what a list or a tree shows of each: the
# newest message's time and the summary a later session carries of it.
_ROWS = f"""
WITH RECURSIVE down(id, depth) AS (
    SELECT id, 0 FROM assistant_conversation WHERE id = %s
  UNION
    SELECT c.id, down.depth + 1 FROM assistant_conversation c
    JOIN down ON c.parent_conversation_id = down.id
    WHERE down.depth < {MAX_WALK} {{links}}
)
SELECT c.*,
    (SELECT m.created_at FROM assistant_message m WHERE m.conversation_id = c.id
     ORDER BY m.id DESC LIMIT 1) AS newest_message_at,
    (SELECT s.parent_conversation_summary FROM assistant_conversation s
     WHERE s.parent_conversation_id = c.id AND s.parent_link = 'session'
       AND s.parent_conversation_summary IS NOT NULL
     ORDER BY s.id DESC LIMIT 1) AS carried_summary
FROM assistant_conversation c
WHERE c.id IN (SELECT id FROM down) AND c.deleted_at IS NULL
ORDER BY c.id
"""


def _rows(root_id: int, *, sessions_only: bool) -> list[Any]:
    links = "AND c.parent_link = 'session'" if sessions_only else ""
    return list(Conversation.objects.raw(_ROWS.format(links=links), [root_id]))


def _last_activity(row: Any) -> datetime:
    newest = row.newest_message_at
    return max(newest, row.created_at) if newest is not None else row.created_at


def list_sessions(conversation: Conversation) -> list[SessionInfo]:
    """The sessions of `conversation`'s chain (every conversation linked to it by
    session links, up and down), oldest first. Two queries whatever its length. A
    deleted conversation is refused (`conversation_deleted`)."""
    root = conversation.pk
    for link in ancestors(conversation.pk):
        root = link.id
        if link.link != SESSION or link.parent_id is None:
            break
    rows = _rows(root, sessions_only=True)
    if all(row.pk != conversation.pk for row in rows):
        raise deleted_error(conversation.pk)  # the rows leave deleted conversations out
    return [
        SessionInfo(
            conversation=row,
            title=row.title,
            created=row.created_at,
            last_activity=_last_activity(row),
            size=row.context_tokens or 0,
            summary=row.carried_summary or row.compaction_summary or None,
        )
        for row in rows
    ]


def conversation_tree(conversation: Conversation) -> TreeNode:
    """The whole tree `conversation` belongs to, from its root: every session,
    continuation and branch below it. Two queries whatever its size. A deleted
    conversation is refused (`conversation_deleted`); a deleted one above it leaves
    the tree from the conversation itself."""
    root_id = ancestors(conversation.pk)[-1].id
    nodes: dict[int, TreeNode] = {}
    rows = _rows(root_id, sessions_only=False)
    for row in rows:
        departs = row.fork_message_id if row.parent_link == "branch" else None
        if departs is None and row.pk != root_id:
            departs = row.fork_message_id or row.fork_through_message_id
        nodes[row.pk] = TreeNode(
            conversation=row,
            departs_at=departs if row.pk != root_id else None,
            link=row.parent_link if row.pk != root_id else "",
            active=row.pk == root_id,
            summary=row.parent_conversation_summary or row.compaction_summary or None,
            size=row.context_tokens or 0,
            last_activity=_last_activity(row),
        )
    for row in rows:  # ordered by id: a parent is made before its children
        parent = nodes.get(row.parent_conversation_id) if row.pk != root_id else None
        if parent is not None:
            parent.children.append(nodes[row.pk])
            nodes[row.pk].active = parent.active and parent.conversation.active_branch_id == row.pk
    if conversation.pk not in nodes:
        raise deleted_error(conversation.pk)  # the rows leave deleted conversations out
    return nodes[root_id] if root_id in nodes else nodes[conversation.pk]


def set_active_branch(conversation: Conversation) -> None:
    """Make `conversation` the shown sibling: at each departure point from the root
    down to it, the conversation on that path is the one shown, and it goes on past
    its own branches. Two queries (the path up, one UPDATE)."""
    chain = ancestors(conversation.pk)
    whens = [
        When(pk=link.parent_id, then=Value(link.id)) for link in chain if link.parent_id is not None
    ]
    ids = [link.id for link in chain]
    Conversation.objects.filter(pk__in=ids).update(
        active_branch_id=Case(*whens, default=Value(None), output_field=BigIntegerField())
    )
    conversation.active_branch_id = None
