"""The conversation list's figures, as SQL annotations: a fixed number of
queries per page whatever the number of conversations or messages, and the
same figures for the columns, the sort and the "context" filter.

The context size is computed as `assistant.window` does
(`WindowState.context_tokens`, which the conversation page shows): the
provider's latest count of the prompt (when one was reported after the last
compaction) plus the estimates of what followed, else the estimates (system
part with every system message, summaries, the anchor of a split inside a
turn, the messages after the cutoff) scaled by the stored token ratio. A
count below MIN_TOKEN_RATIO of our estimate of the request it describes is
set aside as `WindowState.implausible_count` does. Every sum is computed in
64 bits: each usage count may be 2**31-1.
"""

from __future__ import annotations

from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    F,
    FloatField,
    Func,
    IntegerField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Greatest, Least, Length

from assistant.conf import compaction_config
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.window import MAX_TOKEN_RATIO, MIN_JUDGED_ESTIMATE, MIN_TOKEN_RATIO


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


def _summary_texts() -> list:
    return [
        Coalesce(KT(f"metadata__{MetadataKeys.COMPACTION_SUMMARY}"), Value("")),
        Coalesce(KT(f"metadata__{MetadataKeys.PARENT_CONVERSATION_SUMMARY}"), Value("")),
    ]


def _ceil_tokens(chars, per_token: int):
    """estimate_tokens: ceil(characters / CHARS_PER_TOKEN), in integers."""
    return (chars + per_token - 1) / per_token


class Ceil(Func):
    function = "CEIL"
    output_field = BigIntegerField()


def with_list_figures(queryset: QuerySet[Conversation]) -> QuerySet[Conversation]:
    config = compaction_config()
    per_token = config.CHARS_PER_TOKEN
    messages = Message.objects.filter(conversation=OuterRef("pk")).order_by()
    chat = messages.exclude(role=Message.Role.SYSTEM)
    window = chat.filter(id__gt=OuterRef("_cutoff"))
    message_count = messages.values("conversation").annotate(n=Count("id")).values("n")
    estimates = window.values("conversation").annotate(n=Sum("token_estimate")).values("n")
    anchor = chat.filter(pk=OuterRef("_anchor"), id__lte=OuterRef("_cutoff")).values(
        "token_estimate"
    )
    # WindowState.system: the prompt and each system message's model-facing
    # text, the non-empty ones joined by a blank line.
    system_texts = (
        messages.filter(role=Message.Role.SYSTEM)
        .annotate(chars=Length(Coalesce("compacted_content", "content")))
        .filter(chars__gt=0)
        .values("conversation")
    )
    system_chars = system_texts.annotate(n=Sum("chars")).values("n")
    system_parts = system_texts.annotate(n=Count("id")).values("n")
    counted_id = (
        window.filter(input_tokens__isnull=False, id__gt=OuterRef("_epoch"))
        .values("conversation")
        .annotate(m=Max("id"))
        .values("m")
    )
    counted_prompt = Message.objects.filter(pk=OuterRef("_counted_id")).values(
        p=_big(F("input_tokens"))
        + Coalesce(_big(F("cache_read_tokens")), _big(Value(0)))
        + Coalesce(_big(F("cache_write_tokens")), _big(Value(0)))
    )
    after_count = (
        chat.filter(id__gte=OuterRef("_counted_id"))
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
    summary_tokens = sum(
        (_ceil_tokens(Length(text), per_token) for text in _summary_texts()), Value(0)
    )
    system_tokens = Case(
        When(_system_parts=0, then=0),
        default=_ceil_tokens(
            Length("system_prompt") + F("_system_chars") + 2 * (F("_system_parts") - 1),
            per_token,
        ),
        output_field=IntegerField(),
    )
    fixed_tokens = summary_tokens + system_tokens
    estimated = (
        _big(Coalesce(Subquery(estimates, output_field=BigIntegerField()), 0))
        + Coalesce(Subquery(anchor, output_field=IntegerField()), 0)
        + fixed_tokens
    )
    request_estimate = (
        _big(Coalesce(Subquery(before_count, output_field=BigIntegerField()), 0)) + fixed_tokens
    )
    # WindowState.token_ratio: the stored ratio within its bounds, 1 when none.
    ratio = Case(
        When(Q(_ratio__isnull=True) | Q(_ratio=0), then=Value(1.0)),
        default=Greatest(Least("_ratio", Value(MAX_TOKEN_RATIO)), Value(MIN_TOKEN_RATIO)),
        output_field=FloatField(),
    )
    return (
        queryset.annotate(
            _cutoff=_metadata_id(MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID),
            _epoch=_metadata_id(MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID),
            _anchor=_metadata_id(MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID),
            _ratio=Cast(KT(f"metadata__{MetadataKeys.TOKEN_RATIO}"), FloatField()),
            _system_chars=Coalesce(Subquery(system_chars, output_field=IntegerField()), 0),
            _system_parts=Case(When(system_prompt="", then=0), default=1)
            + Coalesce(Subquery(system_parts, output_field=IntegerField()), 0),
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
                When(
                    _counted_id__isnull=True, then=Cast(Ceil(estimated * ratio), BigIntegerField())
                ),
                When(
                    _request_estimate__gte=MIN_JUDGED_ESTIMATE,
                    _counted_prompt__lt=MIN_TOKEN_RATIO * F("_request_estimate"),
                    then=Cast(Ceil(estimated * ratio), BigIntegerField()),
                ),
                default=F("_counted_prompt")
                + _big(Coalesce(Subquery(after_count, output_field=BigIntegerField()), 0)),
                output_field=BigIntegerField(),
            ),
            _last_compaction=Subquery(last_event),
            _fork_depth=_fork_depth(config.MAX_FORK_DEPTH),
        )
    )
