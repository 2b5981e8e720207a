"""The conversation list's figures, as SQL annotations: a fixed number of
queries per page whatever the number of conversations or messages, and the
same figures for the columns and the sort (the message count is the stored one,
`assistant.cost.stored_figures`, which the page brings up to date for its rows).

The context size is not computed here: it is `Conversation.context_tokens`,
which `assistant.window.store_size` writes whenever the window changes (the
one size function, `WindowState.context_tokens`, that the pre-call hook
decides on and the conversation page shows), so the column, its sort and the
"context" filter read the same figure.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import (
    BigIntegerField,
    Case,
    Expression,
    Max,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone
from django.utils.html import format_html

from assistant.cost import MESSAGES_KEY
from assistant.models import CompactionEvent, Conversation, Message, SummaryVersion
from assistant.settings.conf import compaction_config

if TYPE_CHECKING:
    # The stubs make ModelAdmin generic in its model; Django's class takes no subscript.
    ConversationModelAdmin = admin.ModelAdmin[Conversation]
    SummaryVersionModelAdmin = admin.ModelAdmin[SummaryVersion]
else:
    ConversationModelAdmin = SummaryVersionModelAdmin = admin.ModelAdmin


def _fork_depth(levels: int) -> Expression:
    """How many ancestors, counted up to `levels` (MAX_FORK_DEPTH: forks stop there)."""
    depth: Expression = Value(0)
    for level in range(1, levels + 1):
        path = "__".join(["parent_conversation"] * level)
        depth = depth + Case(When(**{f"{path}__isnull": False}, then=1), default=0)
    return depth


def with_list_figures(queryset: QuerySet[Conversation]) -> QuerySet[Conversation]:
    # The stored count, for the column's sort: the page's rows show it brought up to
    # date (CostChangeList, with their cost), so no page counts a conversation's rows.
    stored_count = Cast(KeyTextTransform(MESSAGES_KEY, "cost_figures"), BigIntegerField())
    last_event = (
        CompactionEvent.objects.compactions()
        .filter(conversation=OuterRef("pk"))
        .order_by()
        .values("conversation")
        .annotate(at=Max("created_at"))
        .values("at")
    )
    # Who answered last (`window.limits.answered_by`): the model whose window "% window" is of.
    newest_answer = (
        Message.objects.filter(conversation=OuterRef("pk"), role=Message.Role.ASSISTANT)
        .exclude(model="")
        .order_by("-id")
    )
    return queryset.annotate(
        _answer_provider=Subquery(newest_answer.values("provider")[:1]),
        _answer_model=Subquery(newest_answer.values("model")[:1]),
        _message_count=Coalesce(stored_count, 0),
        _last_compaction=Subquery(last_event),
        _fork_depth=_fork_depth(compaction_config().MAX_FORK_DEPTH),
    )


class FittingMedia:
    """The stylesheet that fits the app's lists within 1280 px (headers and
    long values wrap; the admin's sidebars stay open)."""

    css = {"all": ("assistant/admin_lists.css",)}


def date_and_time(at: datetime) -> str:
    """A list's time: the date over the time to the second (a run's events
    are seconds apart)."""
    local = timezone.localtime(at)
    return format_html(
        '<span class="two-lines">{}</span><span class="two-lines">{}</span>',
        f"{local:%Y-%m-%d}",
        f"{local:%H:%M:%S}",
    )
