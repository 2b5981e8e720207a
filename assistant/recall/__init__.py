"""The recall tools a host offers its model beside its own: nothing compacted is out of reach.

Every compacted or stubbed tool result, every media placeholder and every window summary
names the handle of its stored original ("ref m4182"; a summary names the range it
covers, "ref m12..m250"). `recall` reads an original by its handle, a page at a time;
`search_history` searches the originals of the conversation and of its fork ancestors
(up to each fork point, included) with PostgreSQL full-text search over each message's
stored document, then a substring search over a trigram index (a plain one on SQLite,
the demo's store): both GIN indexes lead with the conversation, so a search reads its
matches, never the whole conversation (docs/operations.rst, "Performance at scale").
With an embedding model configured, the nearest stored embeddings of originals,
summaries and sessions (assistant.recall.semantic) are ranked with those matches by
reciprocal rank fusion (docs/operations.rst, "Semantic recall")::

    tools = [*my_tools, *tool_definitions("anthropic")]
    ...
    text = run_tool_call(conversation, call["name"], call["arguments"])

Scoped: a handle of another conversation gets the same error text as one that does not
exist. Capped at RECALL_MAX_CHARS. The result is an ordinary tool result: stored with
add_message, compacted like any other. A bad call gets an error text, never an exception.

May import: history, models, providers, settings, text, window.
See docs/architecture.rst.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank
from django.db import connection
from django.db.models import F, Lookup, Max, Min, Q, Value
from django.db.models.functions import Greatest, Left, Length, StrIndex, Substr, Upper

from assistant.history import entry_point, one_of
from assistant.models import (
    SEARCH_INDEX_CHARS,
    Conversation,
    Embedding,
    Message,
    MessageQuerySet,
    SummaryVersion,
    ancestors,
    handle,
)
from assistant.providers import wire_of
from assistant.recall.artifact_index import render as render
from assistant.recall.artifact_index import updated_index as updated_index
from assistant.recall.artifact_index import without_index as without_index
from assistant.recall.embedding_jobs import EmbeddingRun as EmbeddingRun
from assistant.recall.embedding_jobs import chunks as chunks
from assistant.recall.embedding_jobs import embed_pending as embed_pending
from assistant.recall.embedding_jobs import pending_sources as pending_sources
from assistant.recall.embedding_jobs import pending_texts as pending_texts
from assistant.recall.embedding_jobs import remove_replaced as remove_replaced
from assistant.recall.embedding_jobs import tokens_today as tokens_today
from assistant.recall.semantic import semantic_matches
from assistant.recall.vectors import Neighbour as Neighbour
from assistant.recall.vectors import ensure_index as ensure_index
from assistant.recall.vectors import index_name as index_name
from assistant.recall.vectors import nearest as nearest
from assistant.recall.vectors import store_embedding as store_embedding
from assistant.recall.vectors import vectors_available as vectors_available
from assistant.settings.conf import compaction_config
from assistant.text import MEDIA_TYPES, THINKING_TYPES, describe
from assistant.window import require_saved

#: The name of the tool that reads an original by its handle.
RECALL = "recall"
#: The name of the tool that searches the originals.
SEARCH_HISTORY = "search_history"
#: The name of the tool the model calls to shift the window itself (answered by
#: assistant.summary's `run_compact`, docs/chat-loop.rst, "The compact tool").
COMPACT = "compact"
# A handle as the model may write it: "m4182", "ref m4182", "4182"; a range "m12..m250".
_HANDLE = re.compile(r"^\s*(?:ref\s+)?m?(\d{1,18})\s*(?:\.\.\s*m?(\d{1,18})\s*)?$", re.I)
#: Handles in a text the model sees (one message's, not a range): the bench's recoverable probes.
HANDLE_IN_TEXT = re.compile(r"\bref m(\d{1,18})\b(?!\.\.)")
#: How much of each message a recalled range shows.
RANGE_PREVIEW_CHARS = 160
#: How much of a message a search hit shows around the match.
SNIPPET_CHARS = 300
#: PostgreSQL's substring() takes an integer: the page starts at offset + 1.
MAX_OFFSET = 2**31 - 2
#: A substring search needs a trigram of the query (assistant_msg_trgm): shorter
#: queries are searched as words alone.
TRIGRAM_CHARS = 3
#: How many of a search's matches, the newest, are ranked for the best few: all of a
#: rare word's, the latest of a common one's (docs/chat-loop.rst, "Recall").
RANKED_MATCHES = 200
#: How many nearest embeddings a search fuses with its full-text matches.
SEMANTIC_CANDIDATES = 40
#: Reciprocal rank fusion's constant: a hit's score is the sum of 1 / (RRF_K + rank).
RRF_K = 60
#: What a recall call may read (the host's keyword, never the model's).
RecallScope = Literal["conversation", "user"]
#: Its values, as run_tool_call's and answer_tool_calls' check takes them.
RECALL_SCOPES = ("conversation", "user")
#: A longer query is not words to look for but a pasted text: refused.
MAX_QUERY_CHARS = 500
#: How much of a name the model wrote an error message repeats (it may be anything).
ECHO_CHARS = 80
#: An original's calls, thinking and attachments (its first page only) take at most
#: this share of the limit, beside the page's text.
EXTRAS_SHARE = 4
#: The room of a page's header and footer, beside its text: a page shows `limit`
#: (RECALL_MAX_CHARS) characters of the original, so the next page starts at the
#: offset plus that limit and none is skipped.
PAGE_FRAME_CHARS = 500
#: The arguments shown beside a tool result's handle, like a preview.
ARGUMENTS_PREVIEW_CHARS = 300
#: Messages listed per page of a range; one line each, so a page stays readable.
RANGE_PAGE_MESSAGES = 200
#: The room the highlight marks and a split word may add to a snippet.
SNIPPET_SLACK_CHARS = 40
#: The note a cut text ends with takes about this much.
CUT_NOTE_CHARS = 60

#: The recall tools, in no provider's shape (``tool_definitions`` shapes them).
NEUTRAL_TOOLS = [
    {
        "name": RECALL,
        "description": (
            "Read the stored original of something compacted earlier in this conversation: "
            "a tool result, a message, an image or document placeholder, or a summary. Texts "
            'you see name them by handle, as "ref m4182" (a summary: "ref m12..m250", a '
            "range of messages). Long originals come a page at a time: pass offset (the "
            "character to start at; for a range, the number of messages to skip) and limit."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "handle": {"type": "string", "description": 'e.g. "m4182" or "m12..m250"'},
                "offset": {"type": "integer", "description": "where to start (default 0)"},
                "limit": {"type": "integer", "description": "how many characters at most"},
            },
            "required": ["handle"],
        },
    },
    {
        "name": SEARCH_HISTORY,
        "description": (
            "Search the full originals of this conversation's earlier messages and tool "
            "results (and of the conversation it continues) for words, names, ids, paths or "
            "values no longer in view. Returns the best matches with a snippet and the "
            "handle to recall each one."
        ),
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to look for"}},
            "required": ["query"],
        },
    },
]


#: The compact tool, in no provider's shape: offered with ``compact=True``.
COMPACT_TOOL = {
    "name": COMPACT,
    "description": (
        "Make room in this conversation's context: the older messages are replaced by a "
        "summary (their originals stay recallable by handle), and your next request "
        "carries it. Call it when the context is long and what is old is no longer "
        "needed word for word; at most once per turn. focus: what the summary must keep "
        "(e.g. the open decisions, a file's name)."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "focus": {"type": "string", "description": "what the summary should keep (optional)"}
        },
    },
}


def tool_definitions(provider: str, *, compact: bool = False) -> list[dict[str, Any]]:
    """The `recall` and `search_history` tools in the shape `provider` takes (a provider
    of chat_step: "anthropic", "openai", "openai_responses" a list of tools, "gemini"
    one Tool's function declarations); with `compact`, the `compact` tool after them.
    An unknown provider raises ValidationError (unknown_provider)."""
    return wire_of(provider).tool_definitions(app_tools(recall=True, compact=compact))


def app_tools(*, recall: bool, compact: bool) -> list[dict[str, Any]]:
    """The app's own tools in no provider's shape: the recall tools, the compact tool."""
    return [*(NEUTRAL_TOOLS if recall else ()), *((COMPACT_TOOL,) if compact else ())]


def is_recall_tool(name: str) -> bool:
    return name in (RECALL, SEARCH_HISTORY)


@entry_point(
    conversation=lambda _, conversation: require_saved(conversation),
    recall_scope=one_of(*RECALL_SCOPES),
)
def run_tool_call(
    conversation: Conversation,
    name: str,
    arguments: Any,
    *,
    recall_scope: RecallScope = "conversation",
) -> str:
    """Answer one call of a recall tool with the text of its tool result. A bad
    call (unknown tool, missing or malformed arguments, a handle this conversation
    cannot see) gets an error text the model can act on, never an exception; a
    `conversation` that is not a saved Conversation is `invalid_conversation`.

    `recall_scope` is the host's, never the model's: "conversation" (the default)
    searches and recalls this conversation and its ancestors; "user" also the other
    live conversations of the same user (never another user's; a conversation with no
    user has no others), whose handles `recall` then accepts too."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            return "Error: the arguments must be a JSON object."
    if not isinstance(arguments, dict):
        return "Error: the arguments must be a JSON object."
    config = compaction_config()
    cap = config.RECALL_MAX_CHARS
    if name == RECALL:
        call = _recall_arguments(arguments, config.RECALL_MAX_CHARS)
        if isinstance(call, str):
            return call
        text = _recall(scope_of(conversation, recall_scope).messages, call)
        cap = recall_result_cap(config.RECALL_MAX_CHARS)
    elif name == SEARCH_HISTORY:
        query = arguments.get("query")
        error = _query_error(query)
        if error is not None or not isinstance(query, str):
            return error or ""
        text = _search(
            scope_of(conversation, recall_scope),
            query.strip(),
            config.SEARCH_MAX_RESULTS,
            paid_by=None if conversation.deleted_at else conversation.pk,
        )
    else:
        return (
            f"Error: unknown tool {str(name)[:ECHO_CHARS]!r}; the recall tools are "
            "recall and search_history."
        )
    if not text.startswith("Error:"):
        # A deleted conversation is read, never changed (docs/chat-loop.rst, "Recall").
        Conversation.objects.filter(pk=conversation.pk, deleted_at__isnull=True).update(
            recall_count=F("recall_count") + 1
        )
    return _capped(text, cap)


def recall_result_cap(page_chars: int) -> int:
    """The most characters a `recall` result takes: a page of `page_chars` characters
    of the original, its first page's calls and thinking, its header and footer."""
    return page_chars + page_chars // EXTRAS_SHARE + PAGE_FRAME_CHARS


@dataclass(frozen=True)
class _RecallCall:
    first: int
    last: int | None  # a range
    offset: int
    limit: int


def _recall_arguments(arguments: dict[str, Any], cap: int) -> _RecallCall | str:
    match = _HANDLE.match(str(arguments.get("handle") or ""))
    if match is None:
        return 'Error: recall needs a "handle" as the text names it, e.g. "m4182".'
    numbers = {}
    for key, default in (("offset", 0), ("limit", cap)):
        value = arguments.get(key, default)
        if value is None:
            value = default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            if key == "offset":
                return f"Error: offset must be a whole number from 0 to {MAX_OFFSET}."
            return f"Error: {key} must be a whole number of at least 0."
        numbers[key] = value
    if numbers["offset"] > MAX_OFFSET:
        return f"Error: offset must be a whole number from 0 to {MAX_OFFSET}."
    last = int(match.group(2)) if match.group(2) else None
    first = int(match.group(1))
    if last is not None and last < first:
        first, last = last, first
    return _RecallCall(first, last, numbers["offset"], max(min(numbers["limit"], cap), 1))


def _query_error(query: Any) -> str | None:
    """The error text that says what is wrong with a search query, None if nothing."""
    if not isinstance(query, str) or not query.strip():
        return 'Error: search_history needs a "query": the words or value to look for.'
    if len(query) > MAX_QUERY_CHARS:
        return (
            f"Error: the query is {len(query)} characters long; search_history takes "
            f"at most {MAX_QUERY_CHARS}."
        )
    if "\x00" in query:
        return "Error: the query contains a NUL character (\\x00); search without it."
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        return "Error: the query is not valid Unicode (it contains a lone surrogate)."
    return None


def visible_messages(conversation_id: int) -> Q:
    """The messages this conversation may recall and search: its own, and each
    ancestor's (sessions, continuations, branches) up to where its child left it
    (included). The chain is walked with one recursive query, however long."""
    return _chain_scope(conversation_id).messages


@dataclass(frozen=True)
class Scope:
    """What one recall call may read: messages, summary versions, and the
    conversations whose embeddings it may search."""

    messages: Q
    summaries: Q
    chain: tuple[int, ...]  # the conversation and its ancestors
    others: tuple[int, ...] = ()  # the user's other conversations (recall_scope="user")

    @property
    def conversation_ids(self) -> tuple[int, ...]:
        return (*self.chain, *self.others)


def _chain_scope(conversation_id: int) -> Scope:
    messages, summaries = Q(conversation_id=conversation_id), Q(conversation_id=conversation_id)
    conversation_ids = [conversation_id]
    for child in ancestors(conversation_id):
        if child.parent_id is None:
            break
        if child.bound is None:  # it saw nothing of its parent (an empty session)
            continue
        bound = int(child.bound)
        messages |= Q(conversation_id=child.parent_id, id__lte=bound)
        summaries |= Q(conversation_id=child.parent_id, through_message_id__lte=bound)
        conversation_ids.append(child.parent_id)
    return Scope(messages, summaries, tuple(conversation_ids))


def scope_of(conversation: Conversation, recall_scope: RecallScope = "conversation") -> Scope:
    """The scope of a recall call in `conversation`: its chain, and with
    recall_scope="user" every other live conversation of its user, whole."""
    scope = _chain_scope(conversation.pk)
    if recall_scope == "conversation" or conversation.user_id is None:
        return scope
    others = [
        pk
        for pk in Conversation.objects.filter(
            user_id=conversation.user_id, deleted_at__isnull=True
        ).values_list("id", flat=True)
        if pk not in scope.chain
    ]
    if not others:
        return scope
    return Scope(
        scope.messages | Q(conversation_id__in=others),
        scope.summaries | Q(conversation_id__in=others),
        scope.chain,
        tuple(others),
    )


def _missing(text: str) -> str:
    return f"Error: no stored original named {text} in this conversation."


def _recall(visible: Q, call: _RecallCall) -> str:
    scope = Message.objects.filter(visible)
    if call.last is not None:
        return _recall_range(scope, call, call.last)
    row = (
        scope.filter(pk=call.first)
        .annotate(size=Length("content"), page=Substr("content", call.offset + 1, call.limit))
        .values(
            "role",
            "tool_name",
            "tool_arguments",
            "tool_calls",
            "blocks",
            "size",
            "page",
            "original_dropped_at",
            "compacted_content",
        )
        .first()
    )
    if row is None:
        return _missing(handle(call.first))
    name = handle(call.first)
    if row["original_dropped_at"] is not None:
        return (
            f"[ref {name}: the original was removed by the retention policy; what the "
            f"context showed is all that remains]\n{row['compacted_content'] or ''}"
        )
    size, page = row["size"] or 0, row["page"] or ""
    extras = "\n".join(_extras(row)) if call.offset == 0 else ""
    extras = extras[: call.limit // EXTRAS_SHARE]
    end = call.offset + len(page)
    lines = [
        f"[ref {name} · {_describe(row)} · {size:,} characters · showing {call.offset:,}-{end:,}]",
        extras,
        page,
    ]
    if end < size:
        lines.append(f"[{size - end:,} more characters: recall {name} with offset {end}]")
    return "\n".join(line for line in lines if line)


def _describe(row: dict[str, Any]) -> str:
    if row["role"] == Message.Role.TOOL:
        arguments = json.dumps(row["tool_arguments"] or {}, ensure_ascii=False)
        if len(arguments) > ARGUMENTS_PREVIEW_CHARS:
            arguments = arguments[:ARGUMENTS_PREVIEW_CHARS] + "…"
        return f"tool result of {row['tool_name']} {arguments}"
    return f"{row['role']} message"


def _extras(row: dict[str, Any]) -> list[str]:
    """Beside the text: an assistant message's calls and thinking, the images and
    documents of a message (by name: a tool result is text)."""
    lines = []
    for block in row["blocks"] or ():
        if block["type"] in THINKING_TYPES and block.get("thinking"):
            lines.append(f"[thinking]\n{block['thinking']}\n[/thinking]")
        elif block["type"] in MEDIA_TYPES:
            lines.append(f"[attached: {describe(block)}]")
    for call in row["tool_calls"] or ():
        arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
        lines.append(f"[called {call.get('name')} {arguments}]")
    return lines


def _recall_range(scope: MessageQuerySet, call: _RecallCall, last: int) -> str:
    rows = list(
        scope.filter(pk__gte=call.first, pk__lte=last)
        .order_by("id")
        .annotate(preview=Left("content", RANGE_PREVIEW_CHARS), size=Length("content"))
        .values("id", "role", "tool_name", "preview", "size")[
            call.offset : call.offset + RANGE_PAGE_MESSAGES
        ]
    )
    label = f"{handle(call.first)}..{handle(last)}"
    if not rows:
        return _missing(label) if call.offset == 0 else f"[ref {label}: no more messages]"
    lines = [f"[ref {label}: messages from {call.offset + 1}, each recallable by its handle]"]
    used = len(lines[0])
    for shown, row in enumerate(rows):
        who = f"tool {row['tool_name']}" if row["tool_name"] else row["role"]
        preview = " ".join((row["preview"] or "").split())
        more = "…" if (row["size"] or 0) > RANGE_PREVIEW_CHARS else ""
        line = f"ref {handle(row['id'])} ({who}, {row['size'] or 0:,} chars): {preview}{more}"
        if used + len(line) > call.limit:
            lines.append(f"[more: recall {label} with offset {call.offset + shown}]")
            break
        lines.append(line)
        used += len(line) + 1
    else:
        if len(rows) == RANGE_PAGE_MESSAGES:
            lines.append(f"[more: recall {label} with offset {call.offset + len(rows)}]")
    return "\n".join(lines)


@dataclass(frozen=True)
class _Hit:
    label: str  # the handle recall takes: "m4182", "m12..m250"
    who: str
    snippet: str


def _search(scope: Scope, query: str, most: int, *, paid_by: int | None) -> str:
    """The best `most` matches of `query`: full-text and substring matches of the
    originals, and the nearest embeddings of originals, summaries and sessions,
    ranked together by reciprocal rank fusion (docs/operations.rst, "Semantic recall")."""
    messages = Message.objects.filter(scope.messages)
    by_words: list[_Hit] = []
    if connection.vendor == "postgresql":
        by_words = _full_text(scope, messages, query, most)
    if len(by_words) < most:
        seen = {hit.label for hit in by_words}
        by_words += [
            hit for hit in _substring(scope, messages, query, most) if hit.label not in seen
        ][: most - len(by_words)]
    semantic = semantic_matches(scope.conversation_ids, query, SEMANTIC_CANDIDATES, paid_by=paid_by)
    by_meaning = _meaning_hits(scope, semantic.neighbours)
    found = fused([by_words, by_meaning], most)
    only_words = (
        f"\n(Searched by words only: {semantic.off_because}.)" if semantic.off_because else ""
    )
    if not found:
        return f'No stored original matches "{query}".{only_words}'
    lines = [f'{len(found)} match{"es" if len(found) != 1 else ""} for "{query}" (best first):']
    lines += [f"- ref {hit.label} ({hit.who}): {hit.snippet}" for hit in found]
    lines.append("Recall a ref to read its original.")
    return "\n".join(lines) + only_words


def fused(rankings: list[list[_Hit]], most: int) -> list[_Hit]:
    """The best `most` of several rankings by reciprocal rank fusion: each hit scores
    the sum of 1 / (RRF_K + its rank) over the rankings it is in (Cormack et al.,
    2009); ties keep the first ranking's order."""
    scores: dict[str, float] = {}
    hits: dict[str, _Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.label] = scores.get(hit.label, 0.0) + 1.0 / (RRF_K + rank)
            hits.setdefault(hit.label, hit)
    order = sorted(scores, key=lambda label: -scores[label])
    return [hits[label] for label in order[:most]]


def _meaning_hits(scope: Scope, neighbours: list[Neighbour]) -> list[_Hit]:
    """The neighbours this scope may read, nearest first, each once (a chunked
    original counts at its nearest chunk)."""
    wanted: dict[str, list[int]] = {}
    for neighbour in neighbours:
        wanted.setdefault(neighbour.source, []).append(neighbour.source_id)
    found: dict[tuple[str, int], _Hit] = {}
    for source, read in (
        (Embedding.Source.ORIGINAL, _original_hits),
        (Embedding.Source.SUMMARY, _summary_hits),
        (Embedding.Source.SESSION, _session_hits),
    ):
        if wanted.get(source):
            found.update({(source, pk): hit for pk, hit in read(scope, wanted[source]).items()})
    hits, seen = [], set()
    for neighbour in neighbours:
        hit = found.get((neighbour.source, neighbour.source_id))
        if hit is not None and hit.label not in seen:
            seen.add(hit.label)
            hits.append(hit)
    return hits


def _original_hits(scope: Scope, ids: list[int]) -> dict[int, _Hit]:
    rows = (
        Message.objects.filter(scope.messages, pk__in=ids)
        .annotate(snippet=Left("content", SNIPPET_CHARS))
        .values("id", "conversation_id", "role", "tool_name", "snippet")
    )
    return {
        row["id"]: _Hit(handle(row["id"]), _who(row, scope), _clean(row["snippet"] or ""))
        for row in rows
    }


def _summary_hits(scope: Scope, ids: list[int]) -> dict[int, _Hit]:
    rows = list(
        SummaryVersion.objects.filter(scope.summaries, pk__in=ids)
        .exclude(through_message_id=None)
        .annotate(snippet=Left("text", SNIPPET_CHARS))
        .values("id", "conversation_id", "after_message_id", "through_message_id", "snippet")
    )
    ranges = _message_ranges({row["conversation_id"] for row in rows})
    hits = {}
    for row in rows:
        # A segment summary covers what follows its message; a window summary, the
        # conversation from its start.
        if row["after_message_id"]:
            first = row["after_message_id"] + 1
        else:
            first = ranges.get(row["conversation_id"], (row["through_message_id"], 0))[0]
        hits[row["id"]] = _Hit(
            f"{handle(first)}..{handle(row['through_message_id'])}",
            f"summary{_elsewhere(row['conversation_id'], scope)}",
            _clean(row["snippet"] or ""),
        )
    return hits


def _session_hits(scope: Scope, ids: list[int]) -> dict[int, _Hit]:
    """A session's summary is stored by the session after it (`ids`), and embedded
    under the session it summarizes, the one the scope must reach."""
    rows = list(
        Conversation.objects.filter(pk__in=ids, parent_conversation_id__in=scope.conversation_ids)
        .annotate(
            snippet=Left("parent_conversation_summary", SNIPPET_CHARS),
            summarized_title=F("parent_conversation__title"),
        )
        .values("id", "parent_conversation_id", "summarized_title", "snippet")
    )
    ranges = _message_ranges({row["parent_conversation_id"] for row in rows})
    hits = {}
    for row in rows:
        summarized = row["parent_conversation_id"]
        if summarized not in ranges:
            continue
        first, last = ranges[summarized]
        title = f' "{row["summarized_title"]}"' if row["summarized_title"] else ""
        hits[row["id"]] = _Hit(
            f"{handle(first)}..{handle(last)}",
            f"session{title}, conversation {summarized}",
            _clean(row["snippet"] or ""),
        )
    return hits


def _message_ranges(conversation_ids: set[int]) -> dict[int, tuple[int, int]]:
    """Each conversation's first and last message ids, in one query."""
    if not conversation_ids:
        return {}
    rows = (
        Message.objects.filter(conversation_id__in=conversation_ids)
        .values("conversation_id")
        .annotate(first=Min("id"), last=Max("id"))
        .values_list("conversation_id", "first", "last")
    )
    return {conversation: (first, last) for conversation, first, last in rows}


def _elsewhere(conversation_id: int, scope: Scope) -> str:
    """Where a hit of a widened search is, when not in this conversation's chain."""
    return "" if conversation_id in scope.chain else f", conversation {conversation_id}"


#: Newest first, by an expression of the id rather than the column: ordered by the
#: column, the planner may walk an id index backwards, reading every conversation's
#: newer rows, until enough of this one's matched (its guess when the conversation's
#: rows look spread through the table; an old conversation among newer traffic read
#: the whole rest of the table). By the expression, the matches come from the search
#: index, the conversation's alone, and only the newest are kept.
NEWEST_FIRST = (F("id") + Value(0)).desc()


def _full_text(scope: Scope, messages: MessageQuerySet, query: str, most: int) -> list[_Hit]:
    search = SearchQuery(query, config="simple", search_type="websearch")
    # The stored document, through the GIN index assistant_msg_search (conversation
    # and document in one index: only the conversation's matches are read). Only the
    # newest RANKED_MATCHES are ranked: a common word matches thousands of messages,
    # and ranking them all read each one (a third of a long conversation); a rarer
    # query's matches are all ranked, as before.
    newest_matches = messages.filter(search_vector=search).order_by(NEWEST_FIRST).values("id")
    rows = list(
        Message.objects.filter(pk__in=newest_matches[:RANKED_MATCHES])
        .annotate(rank=SearchRank(F("search_vector"), search))
        .order_by("-rank", "-id")
        .values("id", "conversation_id", "role", "tool_name")[:most]
    )
    snippets = dict(
        Message.objects.filter(pk__in=[row["id"] for row in rows])
        .annotate(
            snippet=SearchHeadline(
                Left("content", SEARCH_INDEX_CHARS),
                search,
                config="simple",
                start_sel="«",
                stop_sel="»",
                # About two sentences around the match, in at most two pieces.
                max_words=35,
                min_words=15,
                max_fragments=2,
            )
        )
        .values_list("id", "snippet")
    )
    return [
        _Hit(handle(row["id"]), _who(row, scope), _clean(snippets.get(row["id"]) or ""))
        for row in rows
    ]


class _ILike(Lookup):
    """PostgreSQL's ILIKE, as the trigram index assistant_msg_trgm serves it (Django's
    icontains is UPPER(...) LIKE UPPER(...), which that index does not)."""

    lookup_name = "ilike"

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} ILIKE {rhs}", [*lhs_params, *rhs_params]


def _substring(scope: Scope, messages: MessageQuerySet, query: str, most: int) -> list[_Hit]:
    if connection.vendor == "postgresql":
        if len(query) < TRIGRAM_CHARS:
            return []  # no trigram to look up: the full-text search alone
        pattern = f"%{connection.ops.prep_for_like_query(query)}%"
        messages = messages.filter(_ILike(F("content"), Value(pattern)))
    else:
        messages = messages.filter(content__icontains=query)
    position = StrIndex(Upper("content"), Upper(Value(query)))
    rows = (
        messages.annotate(at=position)
        .annotate(
            snippet=Substr("content", Greatest(F("at") - SNIPPET_CHARS // 2, 1), SNIPPET_CHARS)
        )
        .order_by(NEWEST_FIRST)
        .values("id", "conversation_id", "role", "tool_name", "snippet")[:most]
    )
    return [_Hit(handle(row["id"]), _who(row, scope), _clean(row["snippet"] or "")) for row in rows]


def _who(row: dict[str, Any], scope: Scope) -> str:
    who = f"tool {row['tool_name']}" if row["tool_name"] else str(row["role"])
    return who + _elsewhere(row["conversation_id"], scope)


def _clean(snippet: str) -> str:
    return " ".join(snippet.split())[: SNIPPET_CHARS + SNIPPET_SLACK_CHARS]


def _capped(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return text[: cap - CUT_NOTE_CHARS].rstrip() + "\n[cut at RECALL_MAX_CHARS: ask for less]"
