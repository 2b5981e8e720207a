"""The conversation list's figures, as SQL annotations: a fixed number of
queries per page whatever the number of conversations or messages, and the
same figures for the columns, the sort and the "context" filter.

The context size is computed as `assistant.window` does: the provider's
latest count of the prompt (when one was reported after the last compaction)
plus the estimates of what followed, else the estimates alone; a count
below MIN_TOKEN_RATIO of the estimate of the request it describes is set
aside as `WindowState.implausible_count` does (the anchor of a split inside
a turn is left out of that estimate here: it only makes the rule milder).
"""

from __future__ import annotations

from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    F,
    IntegerField,
    Max,
    OuterRef,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Length

from assistant.conf import compaction_config
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.window import MIN_JUDGED_ESTIMATE, MIN_TOKEN_RATIO


def _metadata_id(key: str) -> Coalesce:
    return Coalesce(Cast(KT(f"metadata__{key}"), BigIntegerField()), Value(0))


def _big(expression) -> Cast:
    return Cast(expression, BigIntegerField())


def _fork_depth(levels: int) -> Value | Case:
    """How many ancestors, counted up to `levels` (MAX_FORK_DEPTH: forks stop there)."""
    depth = Value(0)
    for level in range(1, levels + 1):
        path = "__".join(["parent_conversation"] * level)
        depth = depth + Case(When(**{f"{path}__isnull": False}, then=1), default=0)
    return depth


def _fixed_texts() -> list:
    return [
        Coalesce(KT(f"metadata__{MetadataKeys.COMPACTION_SUMMARY}"), Value("")),
        Coalesce(KT(f"metadata__{MetadataKeys.PARENT_CONVERSATION_SUMMARY}"), Value("")),
        F("system_prompt"),
    ]


def with_list_figures(queryset: QuerySet[Conversation]) -> QuerySet[Conversation]:
    config = compaction_config()
    messages = Message.objects.filter(conversation=OuterRef("pk")).order_by()
    window = messages.filter(id__gt=OuterRef("_cutoff"))
    message_count = messages.values("conversation").annotate(n=Count("id")).values("n")
    estimates = window.values("conversation").annotate(n=Sum("token_estimate")).values("n")
    counted_id = (
        window.filter(input_tokens__isnull=False, id__gt=OuterRef("_epoch"))
        .values("conversation")
        .annotate(m=Max("id"))
        .values("m")
    )
    # Each count may be 2**31-1: their sum is computed in 64 bits, never in int4.
    counted_prompt = Message.objects.filter(pk=OuterRef("_counted_id")).values(
        p=_big(F("input_tokens"))
        + Coalesce(_big(F("cache_read_tokens")), _big(Value(0)))
        + Coalesce(_big(F("cache_write_tokens")), _big(Value(0)))
    )
    after_count = (
        Message.objects.filter(conversation=OuterRef("pk"), id__gte=OuterRef("_counted_id"))
        .order_by()
        .values("conversation")
        .annotate(n=Sum("token_estimate"))
        .values("n")
    )
    # Our estimate of the request that count describes: the fixed part and
    # what the window held before the counted message.
    before_count = (
        window.filter(id__lt=OuterRef("_counted_id"))
        .values("conversation")
        .annotate(n=Sum("token_estimate"))
        .values("n")
    )
    last_event = (
        CompactionEvent.objects.filter(conversation=OuterRef("pk"))
        .order_by()
        .values("conversation")
        .annotate(at=Max("created_at"))
        .values("at")
    )
    per_token = config.CHARS_PER_TOKEN
    # estimate_tokens of each fixed part: ceil(characters / CHARS_PER_TOKEN).
    fixed_tokens = sum(
        ((Length(text) + per_token - 1) / per_token for text in _fixed_texts()), Value(0)
    )
    estimated = (
        _big(Coalesce(Subquery(estimates, output_field=BigIntegerField()), 0)) + fixed_tokens
    )
    request_estimate = (
        _big(Coalesce(Subquery(before_count, output_field=BigIntegerField()), 0)) + fixed_tokens
    )
    return (
        queryset.annotate(
            _cutoff=_metadata_id(MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID),
            _epoch=_metadata_id(MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID),
        )
        .annotate(_counted_id=Subquery(counted_id, output_field=BigIntegerField()))
        .annotate(
            _counted_prompt=_big(
                Coalesce(Subquery(counted_prompt, output_field=BigIntegerField()), 0)
            ),
            _request_estimate=request_estimate,
        )
        .annotate(
            _message_count=Coalesce(Subquery(message_count, output_field=IntegerField()), 0),
            _context_tokens=Case(
                When(_counted_id__isnull=True, then=estimated),
                When(
                    _request_estimate__gte=MIN_JUDGED_ESTIMATE,
                    _counted_prompt__lt=MIN_TOKEN_RATIO * F("_request_estimate"),
                    then=estimated,
                ),
                default=F("_counted_prompt")
                + _big(Coalesce(Subquery(after_count, output_field=BigIntegerField()), 0)),
                output_field=BigIntegerField(),
            ),
            _last_compaction=Subquery(last_event),
            _fork_depth=_fork_depth(config.MAX_FORK_DEPTH),
        )
    )
