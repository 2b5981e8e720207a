"""The admin list's cost figures, stored (`Conversation.cost_figures`): what
`cost_of` computed for a conversation, with what it covered (its newest message
and compaction event, its fixed part's estimate, the pricing). Read while they
cover what the conversation holds; computed again, and stored, otherwise. So the
list shows the change page's figure, at one query a page whatever the
conversations hold (docs/operations.rst, "Performance at scale")."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from django.db.models import OuterRef, Subquery

from assistant.cost.pricing import (
    Cost,
    cost_of,
    model_prices,
    recorded_calls,
    recorded_summarizer_calls,
)
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.settings.conf import compaction_config
from assistant.text import estimate_tokens
from assistant.window import current_limits

#: The way figures are computed (`cost_of` and what it reads): a release that
#: changes it bumps this, and every stored figure is computed again when next read.
FIGURES_VERSION = 1


def conversation_costs(conversation_ids: Iterable[int]) -> dict[int, Cost]:
    """The cost of each of these conversations (the admin list's page): the stored
    figure where it covers what the conversation holds now, in one query whatever
    the conversations hold; the others computed (`cost_of`, four queries) and
    stored for the next read (one)."""
    ids = list(conversation_ids)
    basis = _pricing_basis()
    covers = _covers(ids, basis)
    costs = {
        pk: cost_from_json(stored["cost"])
        for pk, (cover, stored) in covers.items()
        if stored and stored.get("cover") == cover
    }
    stale = [pk for pk in ids if pk not in costs]
    if stale:
        costs.update(_computed(stale, {pk: covers[pk][0] for pk in stale if pk in covers}))
    return costs


def store_costs(conversation_ids: Iterable[int]) -> None:
    """Compute and store these conversations' cost figures (the post-exchange task,
    after each exchange: the admin list then reads them)."""
    ids = list(conversation_ids)
    covers = _covers(ids, _pricing_basis())
    _computed(ids, {pk: cover for pk, (cover, _) in covers.items()})


def _computed(ids: list[int], covers: dict[int, list[Any]]) -> dict[int, Cost]:
    calls = recorded_calls(ids)
    summaries = recorded_summarizer_calls(ids)
    prices = model_prices()
    costs = {pk: cost_of(calls.get(pk, []), summaries.get(pk, ()), prices=prices) for pk in ids}
    rows = [
        Conversation(pk=pk, cost_figures={"cover": cover, "cost": cost_to_json(costs[pk])})
        for pk, cover in covers.items()
    ]
    Conversation.objects.bulk_update(rows, ["cost_figures"])
    return costs


def _covers(ids: list[int], basis: str) -> dict[int, tuple[list[Any], dict[str, Any] | None]]:
    """Each conversation's stored figures, and what a figure of it must cover now:
    its newest message and compaction event, its fixed part's estimate, the prices
    (one query; each newest id one entry of an index)."""
    newest_message = Message.objects.filter(conversation=OuterRef("pk")).order_by("-id")
    newest_event = CompactionEvent.objects.filter(conversation=OuterRef("pk")).order_by(
        "-created_at", "-id"
    )  # the index assistant_event_conv
    rows = (
        Conversation.objects.filter(pk__in=ids)
        .annotate(
            newest_message=Subquery(newest_message.values("id")[:1]),
            newest_event=Subquery(newest_event.values("id")[:1]),
        )
        .values_list(
            "pk",
            "cost_figures",
            "newest_message",
            "newest_event",
            "system_prompt",
            MetadataKeys.PARENT_CONVERSATION_SUMMARY,
        )
    )
    return {
        pk: (
            [message, event, estimate_tokens(system) + estimate_tokens(parent or ""), basis],
            stored,
        )
        for pk, stored, message, event, system, parent in rows
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
