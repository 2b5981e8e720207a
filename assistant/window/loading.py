"""The verbatim window: the messages after the cached split, how large the
context is, when it must shift, and where a new split may fall.

Everything here works on one conversation row and the messages after its
cutoff, so it costs the same two queries however long the conversation is.

A split normally falls at the start of a user turn. When the current turn
alone is over the budget (an agent answering one request with a hundred tool
calls), it falls at a step boundary inside the turn (an assistant message,
before its tool results), and the turn's user message, the *anchor*, is
still sent verbatim ahead of the newest steps.

System messages are never summarized: wherever they stand, they belong to
the system part of every request.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.core.exceptions import ValidationError
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from assistant.metadata_keys import STATE_FIELDS, ConversationMetadata, Segment
from assistant.models import Conversation, Message, MessageQuerySet
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.text import MAX_TOKEN_RATIO, MIN_JUDGED_ESTIMATE, MIN_TOKEN_RATIO, estimate_tokens
from assistant.window.ledger import CachePrices, cache_prices
from assistant.window.lifetime import lifetime_in_use
from assistant.window.limits import chat_model

# What labelling one pinned message in the pinned section adds ("[user m12, pinned]").
PIN_FRAME_TOKENS = 8
# The stored ratio is renewed only when the measured one moves by more than this share
# of it (assistant.precall.hook): until then the provider may count up to this much more.
TOKEN_RATIO_DRIFT = 0.1


def require_saved(conversation: Conversation) -> None:
    """A stored Conversation, not None or an unsaved instance."""
    if not isinstance(conversation, Conversation) or conversation.pk is None:
        raise ValidationError(
            f"Expected a saved Conversation, got {conversation!r}.", code="invalid_conversation"
        )


@dataclass
class WindowState:
    conversation_id: int
    system_prompt: str
    # The conversation's state columns as loaded (assistant.metadata_keys).
    columns: dict[str, Any]
    # The settings of the call that loaded it: every size below uses them.
    config: CompactionConfig
    # The messages after the cutoff, oldest first, as the model sees them
    # (system messages excluded: see `system_rows`).
    rows: list[Message] = field(default_factory=list)
    # Every system message of the conversation, oldest first.
    system_rows: list[Message] = field(default_factory=list)
    # The user message of a turn the split falls inside, sent verbatim.
    anchor: Message | None = None
    # Pinned messages at or before the split (not the anchor), oldest first: the
    # pinned section of every request (assistant.window.context, docs/compaction.rst).
    pinned_rows: list[Message] = field(default_factory=list)
    # Conversation.context_tokens (and its basis, `SizeBasis`) as loaded:
    # `store_size` writes only a change.
    stored_size: int | None = None
    stored_basis: tuple[int | None, bool] = (None, False)

    @property
    def meta(self) -> ConversationMetadata:
        return ConversationMetadata(self.columns)

    @property
    def summary(self) -> str | None:
        return self.meta.summary

    @property
    def through_id(self) -> int | None:
        return self.meta.through_id

    @property
    def parent_summary(self) -> str | None:
        return self.meta.parent_summary

    @property
    def segment(self) -> Segment | None:
        """The summarized segment after the split (`summarize_after`; None: none)."""
        return self.meta.segment

    def outside_segment(self, rows: list[Message]) -> list[Message]:
        """`rows` without those of the summarized segment (its summary stands for them)."""
        segment = self.segment
        return rows if segment is None else [row for row in rows if not segment.covers(row.pk)]

    @property
    def segment_pinned(self) -> list[Message]:
        """The pinned messages of the summarized segment: the pinned section carries them."""
        segment = self.segment
        if segment is None:
            return []
        return [row for row in self.rows if row.pinned and segment.covers(row.pk)]

    def tokens(self, text: str | None) -> int:
        """estimate_tokens with this state's settings."""
        return estimate_tokens(text or "", self.config.CHARS_PER_TOKEN)

    @property
    def system(self) -> str:
        """The system part: the configured prompt, then every system message."""
        parts = [self.system_prompt, *(row.model_content for row in self.system_rows)]
        return "\n\n".join(part for part in parts if part)

    @property
    def fixed_tokens(self) -> int:
        """System part and summaries: the leading part of every request."""
        summaries = self.tokens(self.parent_summary) + self.tokens(self.summary)
        summaries += self.segment_tokens
        return self.tokens(self.system) + summaries + self.pinned_tokens

    @property
    def segment_tokens(self) -> int:
        """The segment summary, with its label (`assistant.window.context.SEGMENT_LABEL`)."""
        segment = self.segment
        return self.tokens(segment.summary) + PIN_FRAME_TOKENS if segment is not None else 0

    @property
    def pinned_tokens(self) -> int:
        """The pinned section: each pinned message below the split (or in the
        summarized segment) and its label."""
        pinned = [*self.pinned_rows, *self.segment_pinned]
        return sum(row.token_estimate + PIN_FRAME_TOKENS for row in pinned)

    @property
    def verbatim(self) -> list[Message]:
        """The chat messages the next request carries, in order (the summarized
        segment's stand for its summary)."""
        rows = self.outside_segment(list(self.rows))
        return [self.anchor, *rows] if self.anchor is not None else rows

    @property
    def context_epoch_id(self) -> int:
        """Provider counts reported at or before this message id describe a
        context that compaction has changed since: they are stale."""
        return self.meta.context_epoch_id

    @property
    def answered_by(self) -> tuple[str, str]:
        """(provider, model) of the window's newest answer: who will read the next
        request; ("", "") before any."""
        answers = (row for row in reversed(self.rows) if row.role == Message.Role.ASSISTANT)
        newest = next(answers, None)
        if newest is None:
            return "", ""
        return newest.provider, chat_model(newest.metadata, newest.model)

    @property
    def cache_prices(self) -> CachePrices:
        """The cache prices of the model that will read the next request
        (assistant.window.ledger), else the configured chat model's."""
        prices = cache_prices(self.answered_by[1] or chat_model(None))
        in_use = lifetime_in_use(self.rows)
        if in_use is not None and in_use.write is not None:  # a dearer lifetime's writes
            return CachePrices(read=prices.read, write=in_use.write)
        return prices

    def context_tokens(self) -> int:
        """The one size of the context: what the pre-call hook decides on,
        what the conversation stores for the admin list (`store_size`), and
        what the inspector, the status, the previews and the dry run show.
        The provider's latest count of the prompt plus estimates of what was
        added after it; when compaction has made every count stale, or the
        count is implausible (`implausible_count`), our estimates scaled by
        the provider's last known ratio to them (dense text, ids and hashes,
        holds more tokens than CHARS_PER_TOKEN says)."""
        index = self._fresh_count_index()
        if index is None or self.implausible_count() is not None:
            return math.ceil(self.estimated_tokens() * self.token_ratio)
        # That prompt produced this message: count it and what follows.
        return self._count_at(index) + sum(r.token_estimate for r in self.rows[index:])

    def size_basis(self) -> SizeBasis:
        """The size, with what a message appended to the window adds to it
        (Conversation.context_estimate and context_counted)."""
        counted = self._fresh_count_index() is not None and self.implausible_count() is None
        return SizeBasis(self.context_tokens(), self.estimated_tokens(), counted)

    @property
    def token_ratio(self) -> float:
        stored = self.meta.stored_token_ratio
        return min(max(stored, MIN_TOKEN_RATIO), MAX_TOKEN_RATIO) if stored else 1.0

    def measured_token_ratio(self) -> float | None:
        """The newest fresh provider count over our estimate of the same
        request (None without one, or when the count is below MIN_TOKEN_RATIO
        of the estimate: never learnt from, whatever the request's size)."""
        index = self._fresh_count_index()
        if index is None:
            return None
        estimate = self._request_estimate(index)
        if estimate <= 0:
            return None
        ratio = self._count_at(index) / estimate
        return ratio if ratio >= MIN_TOKEN_RATIO else None

    def implausible_count(self) -> tuple[int, int] | None:
        """(count, estimate) when the newest fresh provider count is below
        MIN_TOKEN_RATIO of our estimate of the request it describes: no
        tokenizer counts that few, so it is a wiring mistake (typically
        `usage.input_tokens` alone under prompt caching, which leaves out the
        cached prefix) and must not decide the context size. None otherwise."""
        index = self._fresh_count_index()
        if index is None:
            return None
        count, estimate = self._count_at(index), self._request_estimate(index)
        if estimate < MIN_JUDGED_ESTIMATE or count >= MIN_TOKEN_RATIO * estimate:
            return None
        return count, estimate

    def _count_at(self, index: int) -> int:
        count = self.rows[index].prompt_tokens
        assert count is not None  # `_fresh_count_index` finds only rows with a count
        return count

    def _request_estimate(self, index: int) -> int:
        """Our estimate of the request that produced rows[index]."""
        return self.fixed_tokens + sum(r.token_estimate for r in self._verbatim_before(index))

    def _verbatim_before(self, index: int) -> list[Message]:
        """What the request that produced rows[index] carried after the summaries."""
        rows = self.outside_segment(self.rows[:index])
        return [self.anchor, *rows] if self.anchor is not None else rows

    def _fresh_count_index(self) -> int | None:
        for index in range(len(self.rows) - 1, -1, -1):
            row = self.rows[index]
            if row.prompt_tokens is not None and row.pk > self.context_epoch_id:
                return index
        return None

    def estimated_tokens(self) -> int:
        """The context by our estimates alone (to compare two versions of it
        like with like; `context_tokens` prefers the provider's count)."""
        return self.fixed_tokens + sum(row.token_estimate for row in self.verbatim)

    def last_request_at(self) -> datetime | None:
        """When the previous model call was made: the arrival of the newest
        assistant message (None when the window holds none)."""
        for row in reversed(self.rows):
            if row.role == Message.Role.ASSISTANT:
                return row.created_at
        return None

    def growth_within(self, seconds: float) -> int:
        """The tokens the window gains in `seconds`, at the rate messages arrived
        from its first message to its newest, each at its size on arrival (its
        original's, compacted since or not; 0: no such span)."""
        if seconds <= 0 or len(self.rows) < 2:
            return 0
        span = (self.rows[-1].created_at - self.rows[0].created_at).total_seconds()
        if span <= 0:
            return 0
        grown = sum(max(row.token_estimate, row.original_token_estimate) for row in self.rows[1:])
        return math.ceil(grown * seconds / span)

    def cache_is_cold(
        self, config: CompactionConfig | None = None, now: datetime | None = None
    ) -> bool:
        """The provider's prompt cache has expired since the previous request
        (at `now`, the current time unless given), so changing the context
        now costs no cache that still holds."""
        last = self.last_request_at()
        if last is None:
            return False
        in_use = lifetime_in_use(self.rows)
        ttl = in_use.seconds if in_use else (config or self.config).CACHE_TTL_SECONDS
        return (now or timezone.now()) - last > timedelta(seconds=ttl)


def load_window(
    conversation_id: int,
    config: CompactionConfig | None = None,
    *,
    through_id: int | None = None,
    live: bool = False,
) -> WindowState:
    """Read the conversation's state and its window fresh from the
    database (never from a possibly stale in-memory object): two queries.
    `config`: the caller's settings (read here only when it has none).
    `live`: a deleted conversation is not found (Conversation.DoesNotExist)."""
    return _load(conversation_id, config, through_id, _model_rows, live)


def saved_window(conversation: Conversation) -> WindowState:
    """load_window of a saved Conversation (`require_saved`); one whose row is gone
    (purged) is ValidationError `conversation_deleted`, not DoesNotExist."""
    require_saved(conversation)
    try:
        return load_window(conversation.pk)
    except Conversation.DoesNotExist:
        raise ValidationError(
            f"Conversation {conversation.pk} no longer exists (purged).",
            code="conversation_deleted",
        ) from None


def context_size(conversation_id: int, config: CompactionConfig | None = None) -> int:
    """The size of a conversation's next request (`WindowState.context_tokens`)."""
    return measure_size(conversation_id, config).tokens


def measure_size(conversation_id: int, config: CompactionConfig | None = None) -> SizeBasis:
    """The size and its basis, read as `SizeRow`s, without the messages' text:
    a stored message measures it when it cannot add to the stored one."""
    return _load(conversation_id, config, None, _size_rows).size_basis()


class SizeBasis(NamedTuple):
    """Conversation.context_tokens, context_estimate and context_counted.

    Appending a message (not a system one) to the window adds its estimate to
    `estimate`; when the size is `counted` (the newest fresh provider count
    plus the estimates after it) it adds the same to the size. A message
    carrying a count makes the size that count plus its own estimate, if the
    count is plausible against `estimate` (`WindowState.implausible_count`)."""

    tokens: int
    estimate: int
    counted: bool


class SizeRow(NamedTuple):
    """A message as the context's size reads it (SIZE_FIELDS), standing in for
    it in the WindowState that `context_size` loads and measures."""

    pk: int
    role: str
    token_estimate: int
    input_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    model_content: str  # a system message's text; "" for the others
    provider_live: bool  # Message.provider_live
    pinned: bool

    # The same rule, on these fields.
    prompt_tokens = Message.prompt_tokens  # type: ignore[misc]  # mypy: NamedTuple fields only


def _model_rows(parts: list[MessageQuerySet]) -> Iterable[Message]:
    return _in_order([part.model_view() for part in parts])


def _size_rows(parts: list[MessageQuerySet]) -> Iterator[SizeRow]:
    return (SizeRow(*values) for values in _in_order([part.size_values() for part in parts]))


def _in_order(parts: list[QuerySet]) -> QuerySet:
    """The parts of a window, disjoint, as one statement in id order: UNION ALL, so
    that each part is read by an index range of its own."""
    if len(parts) == 1:
        return parts[0]
    first, *rest = [part.order_by() for part in parts]
    return first.union(*rest, all=True).order_by("id")


def _window_parts(
    rows: MessageQuerySet, cutoff: int | None, anchor_id: int | None
) -> list[MessageQuerySet]:
    """The window's messages: those after the split, and below it the system and
    pinned messages and the anchor. Parts, not one OR: an OR leaves the planner to
    guess how much of the conversation `id > split` holds, and a long conversation's
    early ids in a large table looked like most of it (a scan of all its rows; see
    docs/operations.rst, "Performance at scale"). Each part has an index of its own:
    (conversation, id), and the partial ones of system and pinned messages."""
    if cutoff is None:
        return [rows]
    below = rows.filter(id__lte=cutoff)
    parts = [
        rows.filter(id__gt=cutoff),
        below.filter(role=Message.Role.SYSTEM),
        below.filter(pinned=True).exclude(role=Message.Role.SYSTEM),
    ]
    if anchor_id is not None:
        parts.append(below.filter(id=anchor_id, pinned=False).exclude(role=Message.Role.SYSTEM))
    return parts


def _load(
    conversation_id: int,
    config: CompactionConfig | None,
    through_id: int | None,
    view: Callable[[list[MessageQuerySet]], Iterable[Any]],  # Messages, or SizeRows
    live: bool = False,
) -> WindowState:
    rows = Conversation.objects.filter(deleted_at__isnull=True) if live else Conversation.objects
    values = rows.values(
        "system_prompt", "context_tokens", "context_estimate", "context_counted", *STATE_FIELDS
    ).get(pk=conversation_id)
    state = WindowState(
        conversation_id,
        values["system_prompt"],
        {name: values[name] for name in STATE_FIELDS},
        config or compaction_config(),
        stored_size=values["context_tokens"],
        stored_basis=(values["context_estimate"], values["context_counted"]),
    )
    cutoff = state.through_id if through_id is None else through_id
    anchor_id = state.meta.anchor_id
    rows = Message.objects.filter(conversation_id=conversation_id)
    anchored = anchor_id if through_id is None else None
    for row in view(_window_parts(rows, cutoff, anchored)):
        if row.role == Message.Role.SYSTEM:
            state.system_rows.append(row)
        elif cutoff is not None and row.pk <= cutoff:
            if row.pk == anchor_id and through_id is None:
                state.anchor = row
            else:
                state.pinned_rows.append(row)
        else:
            state.rows.append(row)
    _start_at_provider_compaction(state)
    return state


def _start_at_provider_compaction(state: WindowState) -> None:
    """The window starts at the newest message carrying the provider's compaction with a
    summary (docs/provider-compaction.rst): it stands for everything before it."""
    starts = [index for index, row in enumerate(state.rows) if row.provider_live]
    if starts:
        # A pinned message is never compacted away: the pinned section carries it.
        cut = [state.anchor, *state.rows[: starts[-1]]]
        state.pinned_rows.extend(row for row in cut if row is not None and row.pinned)
        state.pinned_rows.sort(key=lambda row: row.pk)
        state.rows = state.rows[starts[-1] :]
        state.anchor = None


def store_size(state: WindowState) -> int:
    """Store the state's size on its conversation (the admin list's figure),
    one UPDATE when it changed, none otherwise; returns it."""
    size, estimate, counted = state.size_basis()
    if (size, (estimate, counted)) != (state.stored_size, state.stored_basis):
        Conversation.objects.filter(pk=state.conversation_id).update(
            context_tokens=size, context_estimate=estimate, context_counted=counted
        )
        state.stored_size, state.stored_basis = size, (estimate, counted)
    return size


def add_to_size(live: QuerySet[Conversation], message: Message, **updates: Any) -> int:
    """Add a message being stored to its conversation's stored size (`SizeBasis`)
    in one UPDATE of `live`, with `updates`, without measuring the window.
    0 when the basis does not allow it (unknown, not counted, a system message,
    an implausible count): the caller measures the window then."""
    if message.role == Message.Role.SYSTEM:
        return 0
    rows = live.filter(context_estimate__isnull=False)
    added = message.token_estimate
    updates["context_estimate"] = F("context_estimate") + added
    count = message.prompt_tokens
    if count is None:
        rows = rows.filter(context_counted=True)
        return rows.update(context_tokens=F("context_tokens") + added, **updates)
    # It is the newest fresh count (ids grow; an epoch names an older message):
    # plausible unless under MIN_TOKEN_RATIO of the estimate of its request.
    plausible = Q(context_estimate__lt=MIN_JUDGED_ESTIMATE) | Q(
        context_estimate__lte=count / MIN_TOKEN_RATIO
    )
    return rows.filter(plausible).update(
        context_tokens=count + added, context_counted=True, **updates
    )


def refresh_size(conversation_id: int, config: CompactionConfig | None = None) -> int:
    """After a write that changed the window: load it and store its size."""
    return store_size(load_window(conversation_id, config))


def refreshed_window(conversation_id: int, config: CompactionConfig | None = None) -> WindowState:
    """`refresh_size`, returning the window it loaded: a caller that goes on
    with the window a write left does not load it a second time."""
    state = load_window(conversation_id, config)
    store_size(state)
    return state


def measure_unsized(**kwargs: object) -> int:
    """Store the size of every conversation that has none (stored before the
    column existed): the app's post_migrate receiver. How many it measured."""
    unsized = Conversation.objects.filter(context_tokens__isnull=True)
    measured = 0
    for pk in unsized.order_by("pk").values_list("pk", flat=True).iterator():
        refresh_size(pk)
        measured += 1
    return measured
