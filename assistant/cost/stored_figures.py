"""The admin list's figures, stored (`Conversation.cost_figures`): what
`cost_of` computed for a conversation and how many messages it held, with what
they covered (its newest message and compaction event, its fixed part's
estimate, the pricing). Read while they cover what the conversation holds;
computed again, and stored, otherwise (its newest embedding request, too): the
cost by `cost_of` continuing the
stored one from where its walk stopped (`cost_figures["walk"]`: only the calls,
events and summaries recorded since are read, one index range each), all the
calls priced again when the walk cannot be continued; the count by adding the
messages stored since the newest one counted (one index range each), counted
again in full when that message is gone. So the list shows the change
page's figures, at one query a page whatever the conversations hold
(docs/operations.rst, "Performance at scale")."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from django.db.models import Count, OuterRef, Q, Subquery

from assistant.cost.pricing import (
    Call,
    Cost,
    Walk,
    calls_after,
    cost_of,
    model_prices,
    recorded_embedding_calls,
    recorded_summarizer_calls,
    walked_calls,
)
from assistant.models import CompactionEvent, Conversation, EmbeddingUsage, Message, MetadataKeys
from assistant.settings.conf import compaction_config
from assistant.text import estimate_tokens
from assistant.window import current_limits

#: The way figures are computed (`cost_of` and what it reads): a release that
#: changes it bumps this, and every stored figure is computed again when next read.
FIGURES_VERSION = 3
#: The key of the stored message count in `Conversation.cost_figures` (the admin
#: list sorts on it).
MESSAGES_KEY = "messages"
#: Where the figure's walk of the calls stands (`Walk`), which the next one resumes.
WALK_KEY = "walk"

_Covers = dict[int, tuple[list[Any], dict[str, Any] | None]]


@dataclass(frozen=True)
class ListFigures:
    """A conversation's figures on the admin list: its cost, and how many messages
    it holds (as of the newest message its cover names)."""

    cost: Cost
    messages: int


def conversation_costs(conversation_ids: Iterable[int]) -> dict[int, Cost]:
    """The cost of each of these conversations (`list_figures`' costs)."""
    return {pk: figures.cost for pk, figures in list_figures(conversation_ids).items()}


def list_figures(conversation_ids: Iterable[int]) -> dict[int, ListFigures]:
    """The cost and the message count of each of these conversations (the admin
    list's page): the stored figures where they cover what the conversation holds
    now, in one query whatever the conversations hold; the others computed
    (`cost_of`, five queries, the embedding requests one; the messages stored
    since the last count, one) and stored for the next read (one)."""
    ids = list(conversation_ids)
    basis = _pricing_basis()
    covers = _covers(ids, basis)
    figures = {
        pk: ListFigures(cost_from_json(stored["cost"]), int(stored[MESSAGES_KEY]))
        for pk, (cover, stored) in covers.items()
        if stored and stored.get("cover") == cover and MESSAGES_KEY in stored
    }
    stale = [pk for pk in ids if pk not in figures]
    if stale:
        figures.update(_computed(stale, {pk: covers[pk] for pk in stale if pk in covers}))
    return figures


def store_costs(conversation_ids: Iterable[int]) -> None:
    """Compute and store these conversations' figures (the post-exchange task,
    after each exchange: the admin list then reads them)."""
    ids = list(conversation_ids)
    _computed(ids, _covers(ids, _pricing_basis()))


def _computed(ids: list[int], covers: _Covers) -> dict[int, ListFigures]:
    prices = model_prices()
    walks: dict[int, Walk] = {}
    before: dict[int, tuple[Cost, Call | None]] = {}
    for pk in ids:
        resumed = _resumable(*covers[pk]) if pk in covers else None
        if resumed is not None:
            walks[pk], before[pk] = resumed
    found = calls_after(walks)
    if found is None:  # a walk cannot be resumed: every figure computed in full
        walks, before, found = {}, {}, ({}, {})
    calls, summaries = found
    # The embeddings' part is read again in full (one index range each), so the
    # resumed cost starts without it.
    before = {
        pk: (replace(cost, embedding=0.0, embedding_tokens=0), previous)
        for pk, (cost, previous) in before.items()
    }
    embeddings = recorded_embedding_calls(ids)
    full = [pk for pk in ids if pk not in walks]
    if full:
        full_calls, full_walks = walked_calls(
            Conversation.objects.filter(pk__in=full),
            Message.objects.filter(conversation_id__in=full),
            CompactionEvent.objects.compactions().filter(conversation_id__in=full),
        )
        calls.update(full_calls)
        walks.update(full_walks)
        summaries.update(recorded_summarizer_calls(full))
    costs = {
        pk: cost_of(
            calls.get(pk, []),
            summaries.get(pk, ()),
            prices=prices,
            before=before.get(pk),
            embedding_calls=embeddings.get(pk, ()),
        )
        for pk in ids
    }
    counts = _message_counts(covers)
    rows = []
    for pk, (cover, _) in covers.items():
        new_calls = calls.get(pk)
        previous = new_calls[-1] if new_calls else before.get(pk, (None, None))[1]
        walk = walks.get(pk, Walk())
        rows.append(
            Conversation(
                pk=pk,
                cost_figures={
                    "cover": cover,
                    "cost": cost_to_json(costs[pk]),
                    MESSAGES_KEY: counts[pk],
                    WALK_KEY: _walk_to_json(walk, previous),
                },
            )
        )
    Conversation.objects.bulk_update(rows, ["cost_figures"])
    return {pk: ListFigures(costs[pk], counts.get(pk, 0)) for pk in ids}


def _resumable(
    cover: list[Any], stored: dict[str, Any] | None
) -> tuple[Walk, tuple[Cost, Call | None]] | None:
    """The walk a stored figure reached and its cost, when a figure of the
    conversation now can continue them: the same fixed part and pricing, and
    nothing it walked removed since (its newest message is checked by
    `calls_after`)."""
    if not stored or WALK_KEY not in stored or "cost" not in stored:
        return None
    stored_cover = stored.get("cover") or []
    if stored_cover[2:4] != cover[2:4]:
        return None
    walk, previous = _walk_from_json(stored[WALK_KEY])
    newest_message, newest_event = cover[0] or 0, cover[1]
    if walk.through > newest_message or (walk.event and newest_event is None):
        return None
    return walk, (cost_from_json(stored["cost"]), previous)


def _walk_to_json(walk: Walk, previous: Call | None) -> dict[str, Any]:
    return {
        **asdict(walk),
        "latest": walk.latest.isoformat() if walk.latest else None,
        "previous": {**asdict(previous), "at": previous.at.isoformat()} if previous else None,
    }


def _walk_from_json(stored: dict[str, Any]) -> tuple[Walk, Call | None]:
    latest = datetime.fromisoformat(stored["latest"]) if stored["latest"] else None
    walk = Walk(
        through=stored["through"],
        latest=latest,
        event=stored["event"],
        history=stored["history"],
        sent=stored["sent"],
    )
    previous = stored["previous"]
    call = Call(**{**previous, "at": datetime.fromisoformat(previous["at"])}) if previous else None
    return walk, call


def _message_counts(covers: _Covers) -> dict[int, int]:
    """How many messages each conversation holds up to the newest its cover names
    (messages are appended, and removed only with their conversation or as the
    newest one, whose insert is undone): the stored count plus the messages stored
    since the newest it counted, or all of them when there is no stored count or
    the conversation's newest message is older than the one counted (one query in
    all; an index range of (conversation, id) each)."""
    counts: dict[int, int] = {}
    ranges = Q()
    for pk, (cover, stored) in covers.items():
        newest = cover[0]
        counts[pk] = 0
        if newest is None:
            continue  # no message
        counted = _counted_through(stored)
        if counted is not None and counted[0] <= newest:
            through, counts[pk] = counted
            if through < newest:
                # From the newest counted message, included: if its insert was undone
                # since (add_message into a conversation deleted meanwhile), it is not
                # counted twice.
                counts[pk] -= 1
                ranges |= Q(conversation_id=pk, id__gte=through, id__lte=newest)
        else:
            ranges |= Q(conversation_id=pk, id__lte=newest)
    if ranges:
        rows = (
            Message.objects.filter(ranges)
            .order_by()
            .values("conversation_id")
            .annotate(n=Count("id"))
            .values_list("conversation_id", "n")
        )
        for pk, added in rows:
            counts[pk] += added
    return counts


def _counted_through(stored: dict[str, Any] | None) -> tuple[int, int] | None:
    """The newest message a stored count counted, and the count; None if none is stored."""
    if not stored or MESSAGES_KEY not in stored:
        return None
    cover = stored.get("cover") or [None]
    if cover[0] is None:
        return None
    return int(cover[0]), int(stored[MESSAGES_KEY])


def _covers(ids: list[int], basis: str) -> _Covers:
    """Each conversation's stored figures, and what a figure of it must cover now:
    its newest message and compaction event, its fixed part's estimate, the prices,
    its newest embedding request (one query; each newest id one entry of an index)."""
    newest_message = Message.objects.filter(conversation=OuterRef("pk")).order_by("-id")
    newest_event = (
        CompactionEvent.objects.compactions()
        .filter(conversation=OuterRef("pk"))
        .order_by("-created_at", "-id")
    )  # the index assistant_event_conv
    newest_usage = EmbeddingUsage.objects.filter(conversation=OuterRef("pk")).order_by("-id")
    rows = (
        Conversation.objects.filter(pk__in=ids)
        .annotate(
            newest_message=Subquery(newest_message.values("id")[:1]),
            newest_event=Subquery(newest_event.values("id")[:1]),
            newest_usage=Subquery(newest_usage.values("id")[:1]),
        )
        .values_list(
            "pk",
            "cost_figures",
            "newest_message",
            "newest_event",
            "system_prompt",
            MetadataKeys.PARENT_CONVERSATION_SUMMARY,
            "newest_usage",
        )
    )
    return {
        pk: (
            [
                message,
                event,
                estimate_tokens(system) + estimate_tokens(parent or ""),
                basis,
                usage,
            ],
            stored,
        )
        for pk, stored, message, event, system, parent, usage in rows
    }


def _pricing_basis() -> str:
    """What a stored figure was priced with: the prices, the chat model a call
    naming none is priced by, the cache's lifetime. A change of any reprices."""
    basis = {
        "version": FIGURES_VERSION,
        "prices": {name: vars(price) for name, price in sorted(model_prices().items())},
        "chat_model": current_limits().model,
        "ttl": compaction_config().CACHE_TTL_SECONDS,
    }
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:32]


def cost_to_json(cost: Cost) -> dict[str, Any]:
    return {**asdict(cost), "unpriced": sorted(cost.unpriced)}


def cost_from_json(stored: dict[str, Any]) -> Cost:
    return Cost(**{**stored, "unpriced": set(stored["unpriced"])})
