"""What one provider request costs and whether a provider would accept it.

Every strategy's request is measured on the Anthropic payload
(`{"system": [blocks], "messages": [...]}`, as `assistant.providers.convert` builds
it) with the bench's one token rule (`bench.record.message_tokens`).

Cost under prompt caching (docs/benchmarks.rst): the leading units of a request
(system blocks, then messages, compared one by one, `cache_control` markers
ignored) that are byte-identical to the same conversation's previous request
are a cache read at 0.1x the input price; everything from the first changed
unit on is a cache write at 1.25x (Anthropic's prices). `cost_under(rates)` prices
the same requests at another provider's cache prices (OpenAI's: a cache read at its
model's discount, no write premium).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from bench.fake_summarizer import count_tokens
from bench.record import MESSAGE_OVERHEAD_TOKENS

if TYPE_CHECKING:
    from assistant.providers import CacheLifetime

CACHE_READ = 0.1
CACHE_WRITE = 1.25


class Rates(NamedTuple):
    """A cached input token's prices over an uncached one's (as
    assistant.window.ledger.CachePrices, which has the same two fields), and the
    cache's lifetime in seconds (None: it never expires, the rule before the sessions
    had a clock): a request made more than `ttl` after the previous one reads nothing
    from the cache and writes its whole prompt."""

    read: float
    write: float
    ttl: float | None = None


ANTHROPIC_RATES = Rates(CACHE_READ, CACHE_WRITE)


def _plain(block: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in block.items() if key != "cache_control"}


def _message_unit(message: dict[str, Any]) -> tuple[str, Any]:
    content = message["content"]
    if isinstance(content, list):
        content = [_plain(block) for block in content]
    return message["role"], content


def _units(payload: dict[str, Any]) -> list[Any]:
    """The payload's comparable units: each system block, then each message."""
    units: list[Any] = [("system", _plain(block)) for block in payload.get("system") or []]
    return units + [_message_unit(m) for m in payload.get("messages") or []]


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content or [] if isinstance(block, dict))


_TEXT_TOKENS: dict[str, int] = {}


def _text_tokens(text: str) -> int:
    """count_tokens, remembered: the same tool result is in hundreds of requests."""
    tokens = _TEXT_TOKENS.get(text)
    if tokens is None:
        if len(_TEXT_TOKENS) > 100_000:
            _TEXT_TOKENS.clear()
        tokens = _TEXT_TOKENS[text] = count_tokens(text)
    return tokens


def unit_tokens(unit: Any) -> int:
    """A system block costs its text; a message costs what message_tokens says
    of its text and tool calls (framing overhead included)."""
    role, content = unit
    if role == "system":
        return _text_tokens(content.get("text", ""))
    if isinstance(content, str):
        return MESSAGE_OVERHEAD_TOKENS + _text_tokens(content)
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "tool_result":
            texts.append(_result_text(block.get("content")))
        elif kind == "tool_use":
            calls.append({"id": block["id"], "name": block["name"], "arguments": block["input"]})
        elif kind == "compaction":  # a provider's summary (docs/provider-compaction.rst)
            texts.append(block.get("content") or "")
    # As message_tokens counts a message: framing, its text (no token spans the line
    # break that would join the blocks), its calls as JSON.
    tokens = MESSAGE_OVERHEAD_TOKENS + sum(_text_tokens(t) for t in texts)
    if calls:
        tokens += _text_tokens(json.dumps(calls, ensure_ascii=False))
    return tokens


def neutral_tokens(neutral: dict[str, Any]) -> int:
    """A message's tokens as the bench counts them in the Anthropic payload."""
    calls = neutral.get("tool_calls")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": neutral["content"]}]
    for call in calls or []:
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["arguments"]}
        )
    if neutral["role"] == "tool":
        blocks = [{"type": "tool_result", "content": neutral["content"]}]
    return unit_tokens((neutral["role"], blocks))


def payload_tokens(payload: dict[str, Any]) -> int:
    return sum(unit_tokens(unit) for unit in _units(payload))


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item)


def index_texts(texts: Iterable[str], heading: str) -> Iterator[str]:
    """The artifact index in each of `texts` that holds one: from `heading` to the next
    blank line or the end (the index is rendered without blank lines)."""
    if not heading:
        return
    for text in texts:
        at = text.find(heading)
        if at >= 0:
            yield text[at:].split("\n\n", 1)[0]


def _pair_step(state: tuple[int, frozenset], message: dict[str, Any]) -> tuple[int, frozenset]:
    """(broken so far, tool_use ids awaiting results) after one Anthropic message."""
    broken, pending = state
    blocks = message["content"] if isinstance(message["content"], list) else []
    if message["role"] == "user":
        answered = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        return broken + len(answered - pending) + len(pending - answered), frozenset()
    return broken + len(pending), frozenset(b["id"] for b in blocks if b.get("type") == "tool_use")


def anthropic_problems(payload: dict[str, Any]) -> tuple[int, bool]:
    """(broken tool pairs, starts with something other than a user message).

    Anthropic rejects a tool_use not answered by a tool_result in the next
    (user) message, and a tool_result whose tool_use is not in the message
    just before it."""
    messages = payload.get("messages") or []
    state: tuple[int, frozenset] = (0, frozenset())
    for message in messages:
        state = _pair_step(state, message)
    broken = state[0] + len(state[1])  # the request ends with calls no result answers
    return broken, bad_start(messages)


def bad_start(messages: list[dict[str, Any]]) -> bool:
    """Not a user message first, nor the provider's compaction block (either role)."""
    if not messages:
        return True
    content = messages[0]["content"]
    opens = isinstance(content, list) and content and content[0].get("type") == "compaction"
    return messages[0]["role"] != "user" and not opens


def gemini_problems(payload: dict[str, Any]) -> tuple[int, bool]:
    """The same two checks on the google-genai `contents` shape: every
    function_call answered by a function_response (same id, or same name when
    a call has no id) in the next user content, and nothing else."""
    contents = payload.get("contents") or []
    broken = 0
    pending: list[tuple[Any, str]] = []
    for content in contents:
        parts = content.get("parts") or []
        if content["role"] == "user":
            answers = [
                (p["function_response"].get("id"), p["function_response"].get("name"))
                for p in parts
                if "function_response" in p
            ]
            open_calls = list(pending)
            for answer_id, answer_name in answers:
                match = next(
                    (
                        c
                        for c in open_calls
                        if (c[0] == answer_id if answer_id else c[1] == answer_name)
                    ),
                    None,
                )
                if match is None:
                    broken += 1
                else:
                    open_calls.remove(match)
            broken += len(open_calls)
            pending = []
        else:
            broken += len(pending)
            pending = [
                (p["function_call"].get("id"), p["function_call"].get("name"))
                for p in parts
                if "function_call" in p
            ]
    broken += len(pending)
    bad_start = not contents or contents[0]["role"] != "user"
    return broken, bad_start


@dataclass
class RequestFigures:
    tokens: int
    cached_tokens: int  # leading tokens identical to the previous request
    # When it was sent, seconds on the session's clock (its last message's ts; None: no clock).
    at: float | None = None
    # The cache lifetime it asked for (a replay on the session's clock; None: not chosen).
    lifetime: CacheLifetime | None = None

    @property
    def cost(self) -> float:
        return self.cost_under(ANTHROPIC_RATES)

    def cost_under(self, rates: Rates, cold: bool = False) -> float:
        """At `rates`; `cold`: the cache expired before it, so all of it is written."""
        cached = 0 if cold else self.cached_tokens
        return rates.read * cached + rates.write * (self.tokens - cached)


def expired(before: RequestFigures | None, now: RequestFigures, ttl: float | None) -> bool:
    """Whether the cache the request `before` left had expired when `now` was sent."""
    if ttl is None or before is None or before.at is None or now.at is None:
        return False
    return now.at - before.at > ttl


def priced(requests: Sequence[RequestFigures], rates: Rates) -> float:
    """The requests of one conversation, in order, at `rates` and its lifetime."""
    total, before = 0.0, None
    for request in requests:
        total += request.cost_under(rates, expired(before, request, rates.ttl))
        before = request
    return total


def asked_cost(meter: CostMeter, base: Rates) -> float:
    """The meter's requests, each at the cache lifetime it asked for
    (`RequestFigures.lifetime`) at `base`'s read price: warm when the gap since the
    one before is within the lifetime that one asked for, its writes at its own
    lifetime's price (None: `base`'s); its recalls at `base`."""
    total = 0.0
    before = None
    for request in meter.requests:
        kept = before.lifetime if before is not None else None
        cold = (
            before is not None
            and kept is not None
            and before.at is not None
            and request.at is not None
            and request.at - before.at > kept.seconds
        )
        lifetime = request.lifetime
        write = base.write if lifetime is None or lifetime.write is None else lifetime.write
        total += request.cost_under(Rates(base.read, write), cold)
        before = request
    return total + sum(r.cost_under(base) for r in meter.recalls)


@dataclass
class CostMeter:
    """One conversation's requests, in order: tokens, cost under caching,
    well-formedness, retention probes."""

    trigger: int = 50_000
    # Opens the artifact index in a request (ours: assistant.recall.artifact_index.HEADING), whose
    # text runs to the next blank line: the present probes it holds are counted.
    index_heading: str = ""
    requests: list[RequestFigures] = field(default_factory=list)
    broken_pairs: int = 0
    requests_with_broken_pair: int = 0
    requests_with_bad_start: int = 0
    probes: int = 0
    probes_kept: int = 0
    probes_in_index: int = 0  # of the probes kept, those the artifact index holds
    # Requests larger than the trigger plus the newest step (`record`'s newest_step).
    requests_over_bound: int = 0
    # Probes not in the request that the model could recall (bench.measures.price_recalls),
    # each priced as one more request: the context re-read, the recalled text written.
    probes_recoverable: int = 0
    recalls: list[RequestFigures] = field(default_factory=list)
    # The probes the last recorded request did not hold.
    missing: list[str] = field(default_factory=list, repr=False)
    _previous: list[Any] = field(default_factory=list, repr=False)
    _previous_tokens: list[int] = field(default_factory=list, repr=False)
    _previous_system: list[Any] = field(default_factory=list, repr=False)
    _previous_messages: list[Any] = field(default_factory=list, repr=False)
    _pair_states: list[tuple[int, frozenset]] = field(default_factory=list, repr=False)

    def record(
        self,
        payload: dict[str, Any],
        probes: Sequence[str] = (),
        newest_step: int | None = None,
        at: float | None = None,
    ) -> RequestFigures:
        """One request, in order; `probes`: the identifiers it should hold; `newest_step`:
        the tokens of what came last (`Session.newest_step`), which the request may add to
        the trigger; `at`: when it was sent on the session's clock (`Session.call_time`)."""
        system = [("system", _plain(block)) for block in payload.get("system") or []]
        messages = payload.get("messages") or []
        # A message that is the very object of the previous request's same
        # position (PayloadBuilder reuses them) is that unit: no copy, no count.
        previous = self._previous_messages
        units = list(system)
        for index, message in enumerate(messages):
            if index < len(previous) and message is previous[index]:
                units.append(self._previous[len(self._previous_system) + index])
            else:
                units.append(_message_unit(message))
        same = 0
        for before, now in zip(self._previous, units, strict=False):
            if before is not now and before != now:
                break
            same += 1
        # The identical leading units were counted for the previous request.
        tokens = self._previous_tokens[:same] + [unit_tokens(unit) for unit in units[same:]]
        figures = RequestFigures(sum(tokens), sum(tokens[:same]), at)
        self.requests.append(figures)
        self._previous, self._previous_tokens = units, tokens
        self._previous_system, self._previous_messages = system, messages
        states = self._pair_states[: self._reused_prefix(messages, previous)]
        state = states[-1] if states else (0, frozenset())
        for message in messages[len(states) :]:
            state = _pair_step(state, message)
            states.append(state)
        self._pair_states = states
        broken = state[0] + len(state[1])
        self.broken_pairs += broken
        self.requests_with_broken_pair += bool(broken)
        self.requests_with_bad_start += bad_start(messages)
        if newest_step is not None:
            self.requests_over_bound += figures.tokens > self.trigger + newest_step
        self.missing = []
        if probes:
            texts = list(strings_in(payload))
            text = "\x00".join(texts)
            in_index = "\x00".join(index_texts(texts, self.index_heading))
            self.probes += len(probes)
            self.probes_kept += sum(probe in text for probe in probes)
            self.probes_in_index += sum(probe in in_index for probe in probes if in_index)
            self.missing = [probe for probe in probes if probe not in text]
        return figures

    def suffix_cost(self, payload: dict[str, Any]) -> float:
        """A "cached_suffix" summary request, priced without recording it: its leading
        units identical to the last recorded request at the cache-read price, the rest
        (what came since, the instruction) at the cache-write price."""
        units = _units(payload)
        same = 0
        for before, now in zip(self._previous, units, strict=False):
            if before != now:
                break
            same += 1
        cached = sum(self._previous_tokens[:same])
        rest = sum(unit_tokens(unit) for unit in units[same:])
        return CACHE_READ * cached + CACHE_WRITE * rest

    def record_recall(self, context_tokens: int, recalled_tokens: int) -> None:
        """One probe recovered by one more request: the context at the cache-read
        price, the recalled text at the cache-write price."""
        at = self.requests[-1].at if self.requests else None  # right after that request
        self.recalls.append(RequestFigures(context_tokens + recalled_tokens, context_tokens, at))
        self.probes_recoverable += 1

    @staticmethod
    def _reused_prefix(messages: list[Any], previous: list[Any]) -> int:
        count = 0
        for before, now in zip(previous, messages, strict=False):
            if before is not now:
                break
            count += 1
        return count

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.requests) + sum(r.tokens for r in self.recalls)

    @property
    def cost(self) -> float:
        return sum(r.cost for r in self.requests) + self.recall_cost

    def cost_under(self, rates: Rates) -> float:
        """The same requests (and recalls) at other cache prices and lifetime (a recall
        is made right after its request, within any lifetime)."""
        return priced(self.requests, rates) + sum(r.cost_under(rates) for r in self.recalls)

    @property
    def recall_cost(self) -> float:
        return sum(r.cost for r in self.recalls)

    @property
    def largest(self) -> int:
        return max((r.tokens for r in self.requests), default=0)

    @property
    def over_trigger(self) -> int:
        return sum(r.tokens > self.trigger for r in self.requests)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": len(self.requests),
            "tokens": self.tokens,
            "cost": round(self.cost, 1),
            "cached_tokens": sum(r.cached_tokens for r in self.requests),
            "largest": self.largest,
            "over_trigger": self.over_trigger,
            "broken_pairs": self.broken_pairs,
            "requests_with_broken_pair": self.requests_with_broken_pair,
            "requests_with_bad_start": self.requests_with_bad_start,
            "probes": self.probes,
            "probes_kept": self.probes_kept,
            "probes_in_index": self.probes_in_index,
            "requests_over_bound": self.requests_over_bound,
            "probes_recoverable": self.probes_recoverable,
            "recall_cost": round(self.recall_cost, 1),
        }
