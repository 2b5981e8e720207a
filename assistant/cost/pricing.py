"""What conversations cost at the providers' cache prices, and what sending
everything would have cost, from what the app recorded.

What it cost (`chat`, `summarizer`): each recorded chat call (an assistant
message with the usage its provider reported) priced as reported: uncached
input, cache reads, cache writes and output at its model's prices; and each
summarizer call (a CompactionEvent's summarizer tokens) at its model's
input and output prices, the cache reads and writes of a "cached_suffix"
summary (the event's details) at its cache prices. Exact, as far as the
recorded usage is.

What the embeddings of its texts cost (`embedding`, semantic recall: docs/operations.rst,
"Semantic recall"): each embedding request's tokens for the conversation
(`EmbeddingUsage`) at its model's input price. A cost of the app, like the
summarizer's: in the total, never in sending everything.

What sending everything would have cost (`everything`): the same calls,
priced the same way, each also carrying what compaction had taken out of
its prompt:

- `sent_k`, the app's estimate of the prompt of call k: the context size
  after the latest compaction event before it (`tokens_after`) plus the
  estimates of the messages added since, or, before any compaction, `fixed`
  (the system prompt and a fork's parent summary) plus every earlier
  message's `original_token_estimate`;
- `removed_k = history_k - sent_k`, where `history_k` is that whole
  uncompacted history (never below zero). An uncompacted call has none, so
  its conversation saves exactly 0%, whatever the provider's cache did;
- call k reads `removed_{k-1}` from the cache when the previous call was
  made within CACHE_TTL_SECONDS and writes the rest; no summarizer calls.

Implausible usage: a call whose reported prompt is below MIN_TOKEN_RATIO of
`sent_k` (the same judgement the window makes, typically
`usage.input_tokens` recorded alone under prompt caching) is priced at
`sent_k` instead, the previous prompt read from the cache when warm; its
conversation's cost is then `estimated`, with the reason.

Prices: ASSISTANT_MODEL_PRICES (assistant/settings/app.py), USD per million
tokens, over the providers' own tables (assistant.providers.catalog). A chat call is
priced by the model that answered it (`Message.model`), else the one its
message's metadata names (`metadata["model"]`, messages recorded before the
field), else the configured chat model: a conversation that changed model is
priced message by message. A model with no price counts as zero and is listed
in `unpriced`. Every figure takes its price from `price_of`, the one function
that answers what a model costs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.db.models import F, Q, QuerySet, TextField, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, NullIf

from assistant.models import CompactionEvent, Conversation, EmbeddingUsage, Message, MetadataKeys
from assistant.providers import Price, model_prices, price_of
from assistant.settings.conf import compaction_config
from assistant.text import MIN_JUDGED_ESTIMATE, MIN_TOKEN_RATIO, estimate_tokens
from assistant.window import MODEL_KEY, current_limits

PER_TOKENS = 1_000_000


@dataclass(frozen=True)
class Call:
    """One recorded chat call: its reported usage, and the app's estimates of
    the prompt it sent and of what compaction had taken out of it."""

    message_id: int
    at: datetime
    model: str
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    sent_tokens: int  # sent_k of the module docstring
    removed_tokens: int  # removed_k

    @property
    def prompt_tokens(self) -> int:
        """The prompt as the provider reported it."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def implausible(self) -> bool:
        """The reported prompt is too small to be the one sent (see the module docstring)."""
        return (
            self.sent_tokens >= MIN_JUDGED_ESTIMATE
            and self.prompt_tokens < MIN_TOKEN_RATIO * self.sent_tokens
        )

    @property
    def priced_prompt_tokens(self) -> int:
        """The prompt the cost counts: the reported one, the estimate when implausible."""
        return self.sent_tokens if self.implausible else self.prompt_tokens

    @property
    def everything_tokens(self) -> int:
        """The prompt of sending everything: this one with what compaction removed."""
        return self.priced_prompt_tokens + self.removed_tokens


@dataclass(frozen=True)
class SummarizerCall:
    at: datetime
    model: str
    input_tokens: int  # the whole prompt, the cached parts below included
    output_tokens: int
    # A "cached_suffix" summary reads the conversation's cached request.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class EmbeddingCall:
    """The tokens one embedding request took for one conversation's texts."""

    at: datetime
    model: str
    input_tokens: int


@dataclass
class Cost:
    """Money of one conversation, or of many (`add`)."""

    chat: float = 0.0
    summarizer: float = 0.0
    everything: float = 0.0
    calls: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    embedding: float = 0.0
    embedding_tokens: int = 0
    unpriced: set[str] = field(default_factory=set)
    # Why the chat cost is the app's estimate rather than the reported usage (None: it is not).
    estimated: str | None = None

    @property
    def total(self) -> float:
        return self.chat + self.summarizer + self.embedding

    @property
    def saved_share(self) -> float | None:
        """1 - total / everything (None before any priced call)."""
        return 1 - self.total / self.everything if self.everything > 0 else None

    def add(self, other: Cost) -> None:
        self.chat += other.chat
        self.summarizer += other.summarizer
        self.everything += other.everything
        self.calls += other.calls
        self.summarizer_input_tokens += other.summarizer_input_tokens
        self.summarizer_output_tokens += other.summarizer_output_tokens
        self.embedding += other.embedding
        self.embedding_tokens += other.embedding_tokens
        self.unpriced |= other.unpriced
        self.estimated = self.estimated or other.estimated


def call_cost(call: Call, price: Price) -> float:
    """What the call cost as the provider reported it."""
    return (
        call.input_tokens * price.input
        + call.cache_read_tokens * price.cache_read
        + call.cache_write_tokens * price.cache_write
        + call.output_tokens * price.output
    ) / PER_TOKENS


def cached_prompt_cost(tokens: int, cached: int, price: Price) -> float:
    """`tokens` of prompt, `cached` of them read from the cache and the rest written."""
    cached = min(cached, tokens)
    return (cached * price.cache_read + (tokens - cached) * price.cache_write) / PER_TOKENS


def estimated_call_cost(call: Call, previous: Call | None, price: Price) -> float:
    """An implausible call at the app's estimate of its prompt (the previous
    prompt read from the cache when warm: `previous` is None when cold)."""
    cached = previous.priced_prompt_tokens if previous is not None else 0
    return (
        cached_prompt_cost(call.sent_tokens, cached, price)
        + call.output_tokens * price.output / PER_TOKENS
    )


def implausible_reason(call: Call) -> str:
    return (
        f"estimated from the app's count: message #{call.message_id} records a prompt of "
        f"{call.prompt_tokens:,} tokens where the app counts {call.sent_tokens:,} (its usage "
        "leaves out part of the prompt, typically the cache reads and writes)"
    )


def summarizer_cost(call: SummarizerCall, price: Price) -> float:
    cached = call.cache_read_tokens + call.cache_write_tokens
    uncached = max(0, call.input_tokens - cached)
    return (
        uncached * price.input
        + call.cache_read_tokens * price.cache_read
        + call.cache_write_tokens * price.cache_write
        + call.output_tokens * price.output
    ) / PER_TOKENS


def cost_of(
    calls: list[Call],
    summarizer_calls: Iterable[SummarizerCall],
    *,
    since: datetime | None = None,
    prices: dict[str, Price] | None = None,
    before: tuple[Cost, Call | None] | None = None,
    embedding_calls: Iterable[EmbeddingCall] = (),
) -> Cost:
    """One conversation's cost (its calls in order, its summaries and its embedding
    requests), counting only the calls made at or after `since` (the cache state
    before them still counts).
    `before`: the cost of its earlier calls and summaries and the last of those
    calls, which this continues (`store_costs`: the same figure as all of them)."""
    prices = model_prices() if prices is None else prices
    ttl = timedelta(seconds=compaction_config().CACHE_TTL_SECONDS)
    cost = Cost()
    previous: Call | None = None
    if before is not None:
        cost, previous = replace(before[0], unpriced=set(before[0].unpriced)), before[1]
    for call in calls:
        warm = previous if previous is not None and call.at - previous.at <= ttl else None
        previous = call
        if since is not None and call.at < since:
            continue
        price = price_of(call.model, prices)
        cost.calls += 1
        if price is None:
            cost.unpriced.add(call.model)
            continue
        if call.implausible:
            paid = estimated_call_cost(call, warm, price)
            cost.estimated = cost.estimated or implausible_reason(call)
        else:
            paid = call_cost(call, price)
        cost.chat += paid
        cached = warm.removed_tokens if warm is not None else 0
        cost.everything += paid + cached_prompt_cost(call.removed_tokens, cached, price)
    for summary in summarizer_calls:
        if since is not None and summary.at < since:
            continue
        cost.summarizer_input_tokens += summary.input_tokens
        cost.summarizer_output_tokens += summary.output_tokens
        price = price_of(summary.model, prices)
        if price is None:
            cost.unpriced.add(summary.model)
            continue
        cost.summarizer += summarizer_cost(summary, price)
    _add_embeddings(cost, embedding_calls, since, prices)
    return cost


def _add_embeddings(
    cost: Cost,
    embedding_calls: Iterable[EmbeddingCall],
    since: datetime | None,
    prices: dict[str, Price],
) -> None:
    """The embedding requests made at or after `since`, at their model's input price."""
    for embedding in embedding_calls:
        if since is not None and embedding.at < since:
            continue
        cost.embedding_tokens += embedding.input_tokens
        price = price_of(embedding.model, prices)
        if price is None:
            cost.unpriced.add(embedding.model)
            continue
        cost.embedding += embedding.input_tokens * price.input / PER_TOKENS


def recorded_calls(conversation_ids: Iterable[int] | None = None) -> dict[int, list[Call]]:
    """The recorded chat calls of these conversations (all when None), by
    conversation, oldest first. One query for the messages (integers only,
    never their text), one for the conversations' fixed parts and one for the
    compaction events' sizes."""
    conversations = Conversation.objects.all()
    messages = Message.objects.all()
    events = CompactionEvent.objects.compactions()
    if conversation_ids is not None:
        ids = list(conversation_ids)
        conversations = conversations.filter(pk__in=ids)
        messages = messages.filter(conversation_id__in=ids)
        events = events.filter(conversation_id__in=ids)
    return walked_calls(conversations, messages, events)[0]


def walked_calls(
    conversations: QuerySet[Conversation],
    messages: QuerySet[Message],
    events: QuerySet[CompactionEvent],
) -> tuple[dict[int, list[Call]], dict[int, Walk]]:
    """`recorded_calls`, with each conversation's walk past them."""
    fixed = _fixed_tokens(conversations)
    walks = {pk: Walk(history=tokens, sent=tokens) for pk, tokens in fixed.items()}
    compactions: dict[int, list[tuple[datetime, int]]] = {}
    for conversation_id, event_id, at, after in events.order_by("created_at", "id").values_list(
        "conversation_id", "id", "created_at", "tokens_after"
    ):
        compactions.setdefault(conversation_id, []).append((at, after))
        walk = walks.setdefault(conversation_id, Walk())
        walk.event = max(walk.event, event_id)
    return _walk(messages, compactions, walks), walks


@dataclass
class Walk:
    """Where `recorded_calls`' walk of one conversation's messages stands: the
    newest message and compaction event read, the latest time a message read was
    made at (the compactions made by then are applied), and the history and sent
    estimates after them. `store_costs` keeps it, and a later walk resumes it."""

    through: int = 0
    latest: datetime | None = None
    event: int = 0
    history: int = 0
    sent: int = 0


def calls_after(
    walks: dict[int, Walk],
) -> tuple[dict[int, list[Call]], dict[int, list[SummarizerCall]]] | None:
    """The chat and summarizer calls recorded in these conversations since their
    walks (moved on past them), in two queries bounded by what was recorded since,
    the index range (conversation, id > through) of each, and one for the compaction
    events not applied yet. None when a compaction event was recorded since for a
    time the walk had passed: its calls are then read again in full."""
    if not walks:
        return {}, {}
    pending = Q()
    for pk, walk in walks.items():
        # Before any message, every event is still to apply.
        unapplied = Q()
        if walk.latest is not None:
            unapplied = Q(id__gt=walk.event) | Q(created_at__gt=walk.latest)
        pending |= Q(conversation_id=pk) & unapplied
    events = list(
        CompactionEvent.objects.compactions()
        .filter(pending)
        .order_by("created_at", "id")
        .values_list(
            "conversation_id",
            "id",
            "created_at",
            "tokens_after",
            "summarizer_model",
            "summarizer_input_tokens",
            "summarizer_output_tokens",
            "details__summarizer_cache_read_tokens",
            "details__summarizer_cache_write_tokens",
        )
    )
    compactions: dict[int, list[tuple[datetime, int]]] = {}
    summaries: dict[int, list[tuple[int, SummarizerCall]]] = {}
    for pk, event_id, at, after, model, inp, out, read, written in events:
        walk = walks[pk]
        if event_id > walk.event and walk.latest is not None and at <= walk.latest:
            return None  # it applies before messages already walked
        compactions.setdefault(pk, []).append((at, after))
        if event_id > walk.event and (inp > 0 or out > 0):
            call = SummarizerCall(at, model, inp, out, _count(read), _count(written))
            summaries.setdefault(pk, []).append((event_id, call))
        walk.event = max(walk.event, event_id)
    messages = Q()
    for pk, walk in walks.items():
        # From the newest message walked, included: if its insert was undone since, the
        # walk holds a message that is gone and is done again in full.
        messages |= Q(conversation_id=pk, id__gte=walk.through)
    walked = {pk: walk.through for pk, walk in walks.items() if walk.through}
    calls = _walk(Message.objects.filter(messages), compactions, walks, walked=walked)
    if walked:
        return None
    return calls, {
        pk: [call for _, call in sorted(found, key=lambda pair: pair[0])]
        for pk, found in summaries.items()
    }


def _walk(
    messages: QuerySet[Message],
    compactions: dict[int, list[tuple[datetime, int]]],
    walks: dict[int, Walk],
    *,
    walked: dict[int, int] | None = None,
) -> dict[int, list[Call]]:
    """The calls among these messages, each conversation's walk moved on past them;
    the newest message each walk had read (`walked`) is skipped, and taken out of
    `walked` when found."""
    walked = {} if walked is None else walked
    chat_model = current_limits().model
    calls: dict[int, list[Call]] = {}
    walk, pending = Walk(), list[tuple[datetime, int]]()
    current = None
    for conversation_id, pk, at, estimate, inp, read, write, out, model, role in _call_rows(
        messages
    ).iterator(chunk_size=5000):
        if conversation_id != current:
            current = conversation_id
            walk = walks.setdefault(conversation_id, Walk())
            pending = list(compactions.get(conversation_id, ()))
        if walked.get(conversation_id) == pk:
            del walked[conversation_id]
            continue
        # A compaction made before this message left the context at its size after.
        while pending and pending[0][0] <= at:
            walk.sent = pending.pop(0)[1]
        if role == Message.Role.ASSISTANT and inp is not None:
            calls.setdefault(conversation_id, []).append(
                Call(
                    pk,
                    at,
                    model or chat_model,
                    inp,
                    read or 0,
                    write or 0,
                    out or 0,
                    walk.sent,
                    max(0, walk.history - walk.sent),
                )
            )
        walk.history += estimate
        walk.sent += estimate
        walk.through = pk
        walk.latest = at if walk.latest is None else max(walk.latest, at)
    return calls


def _fixed_tokens(conversations: QuerySet[Conversation]) -> dict[int, int]:
    """Conversation id -> the estimate of its system prompt and parent summary."""
    return {
        pk: estimate_tokens(system) + estimate_tokens(parent or "")
        for pk, system, parent in conversations.values_list(
            "pk", "system_prompt", MetadataKeys.PARENT_CONVERSATION_SUMMARY
        )
    }


def _call_rows(messages: QuerySet[Message]) -> QuerySet[Message, tuple]:
    """The integers of each message a call's price needs, by conversation, oldest first."""
    return messages.order_by("conversation_id", "id").values_list(
        "conversation_id",
        "id",
        "created_at",
        "original_token_estimate",
        "input_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "output_tokens",
        Coalesce(
            NullIf("model", Value("")),
            KT(f"metadata__{MODEL_KEY}"),
            output_field=TextField(),
        ),
        F("role"),
    )


def _count(value: object) -> int:
    return value if type(value) is int and value > 0 else 0


def recorded_summarizer_calls(
    conversation_ids: Iterable[int] | None = None,
) -> dict[int, list[SummarizerCall]]:
    events = CompactionEvent.objects.filter(
        Q(summarizer_input_tokens__gt=0) | Q(summarizer_output_tokens__gt=0)
    )
    if conversation_ids is not None:
        events = events.filter(conversation_id__in=list(conversation_ids))
    found: dict[int, list[SummarizerCall]] = {}
    for conversation_id, at, model, inp, out, read, written in events.order_by("id").values_list(
        "conversation_id",
        "created_at",
        "summarizer_model",
        "summarizer_input_tokens",
        "summarizer_output_tokens",
        # In the details: CompactionEvent has no cache columns (no migration for them).
        "details__summarizer_cache_read_tokens",
        "details__summarizer_cache_write_tokens",
    ):
        call = SummarizerCall(at, model, inp, out, _count(read), _count(written))
        found.setdefault(conversation_id, []).append(call)
    return found


def recorded_embedding_calls(
    conversation_ids: Iterable[int] | None = None,
) -> dict[int, list[EmbeddingCall]]:
    """The embedding requests' tokens of these conversations (all when None), by
    conversation, oldest first: one query (the index assistant_embusage_conv)."""
    rows = EmbeddingUsage.objects.all()
    if conversation_ids is not None:
        rows = rows.filter(conversation_id__in=list(conversation_ids))
    found: dict[int, list[EmbeddingCall]] = {}
    for conversation_id, at, model, tokens in rows.order_by("conversation_id", "id").values_list(
        "conversation_id", "created_at", "model", "input_tokens"
    ):
        found.setdefault(conversation_id, []).append(EmbeddingCall(at, model, tokens))
    return found


def conversation_cost(conversation: Conversation) -> tuple[Cost, list[Call]]:
    """One conversation's cost and its calls (the conversation page's chart)."""
    calls = recorded_calls([conversation.pk]).get(conversation.pk, [])
    summaries = recorded_summarizer_calls([conversation.pk]).get(conversation.pk, ())
    embeddings = recorded_embedding_calls([conversation.pk]).get(conversation.pk, ())
    return cost_of(calls, summaries, embedding_calls=embeddings), calls


def costs_since(periods: dict[str, datetime | None]) -> dict[str, Cost]:
    """The totals of several periods (label: start, None for all time), in
    one read of one row of integers per message: every conversation's calls made
    at or after the start, deleted ones included (their calls were paid for)."""
    calls = recorded_calls()
    summaries = recorded_summarizer_calls()
    embeddings = recorded_embedding_calls()
    prices = model_prices()
    totals = {label: Cost() for label in periods}
    for pk in calls.keys() | summaries.keys() | embeddings.keys():
        for label, since in periods.items():
            totals[label].add(
                cost_of(
                    calls.get(pk, []),
                    summaries.get(pk, ()),
                    since=since,
                    prices=prices,
                    embedding_calls=embeddings.get(pk, ()),
                )
            )
    return totals
