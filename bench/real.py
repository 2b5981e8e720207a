"""The real agent sessions (bench/data/real) replayed by every strategy in one run.

Ours goes through the public services on PostgreSQL, as a chat backend
drives them, on the session's own clock (`SessionClock`, `on_clock`): before each
model call the pre-call hook
(`ensure_context_summary`) and `build_context`; the request is
`context.to_anthropic()`; the assistant message is stored with the bench's
token count of that request as the provider's `input_tokens`, then its tool
results; after the last message of a user turn the exchange is stamped and
the post-exchange pipeline (`process_exchange`) runs in-process.

The peers run in memory (bench/baselines.py, bench/peers.py, and those written
from their sources: bench/openhands.py, bench/server_compaction.py,
bench/complexity_trap.py), in a
second process while ours replays (`Beside`), as is ours with cached-suffix
summaries, and ours again with every answer recorded as an OpenAI model's, so
that the decision judges its voluntary steps at OpenAI's cache prices (a cache
read at the model's discount, no write premium; `PRICE_MODELS`). One
FakeSummarizer per strategy and conversation writes every summary. An
exception in one strategy on one conversation is recorded, not fatal.
Import after django.setup().
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connections
from django.test import override_settings

from assistant import services
from assistant.models import Conversation
from assistant.recall.artifact_index import HEADING as INDEX_HEADING
from assistant.settings.conf import compaction_config
from assistant.window import decision
from assistant.window.ledger import cache_prices
from bench import peers as lib
from bench import provider_replay
from bench.baselines import Everything, Reference
from bench.chat import SessionClock, ask_lifetime, finish_turn, store
from bench.complexity_trap import Hybrid, ObservationMasking
from bench.fake_summarizer import SUFFIX, FakeSummarizer
from bench.measures import price_recalls, use_fake
from bench.openhands import OpenHandsCondenser
from bench.outcome import Outcome, failure_text
from bench.payload import CostMeter, Rates, neutral_tokens
from bench.provider_replay import replay_under_provider
from bench.server_compaction import ServerCompaction
from bench.sessions import (
    CLOCK_REPLAYS,
    COMPACT,
    EVERYTHING,
    HYBRID,
    MASKING,
    OPENHANDS,
    OURS,
    OURS_CLOCK,
    OURS_OPENAI,
    OURS_SUFFIX,
    SYSTEM_PROMPT,
    Session,
)
from bench.strategies import PayloadBuilder, Strategy


def newest(session: Session, index: int) -> int:
    """The tokens of the newest step before model call `index` (`Session.newest_step`),
    which a request may add to the trigger."""
    return sum(neutral_tokens(m) for m in session.newest_step(index))


def replay_in_memory(session: Session, strategy: Strategy, summarizer: FakeSummarizer) -> Outcome:
    outcome = Outcome(strategy.name, session.name, CostMeter())
    started = time.perf_counter()
    ends = session.turn_ends()
    builder = PayloadBuilder()
    try:
        for index, message in enumerate(session.messages):
            if message["role"] == "assistant":
                request = strategy.request(session.messages[:index])
                outcome.meter.record(
                    builder.build(request),
                    session.probes.get(index, []),
                    newest(session, index),
                    session.call_time(index),
                )
            if index in ends:
                strategy.end_turn(session.messages[: index + 1])
    except Exception as exc:  # reported per conversation, the run goes on
        outcome.error = failure_text(exc)
    outcome.summarizer = summarizer.totals()
    outcome.summarizer_cost = getattr(strategy, "summarizer_cost", None)
    outcome.counters = {
        key: getattr(strategy, key)
        for key in COUNTERS
        if isinstance(getattr(strategy, key, None), int)
    }
    outcome.seconds = time.perf_counter() - started
    return outcome


# What a strategy may count of its own steps (reported beside the tables).
COUNTERS = ("summaries", "placeholders", "condensations", "compactions")


# The models whose cache prices the real sessions are priced under, by provider: each
# one's prices are the app's own table's (assistant.providers), relative to its input price.
PRICE_MODELS = {"Anthropic": "claude-sonnet-4-6", "OpenAI": "gpt-5"}


def price_rates(provider: str) -> Rates:
    prices = cache_prices(PRICE_MODELS[provider])
    return Rates(prices.read, prices.write)


@dataclass
class VoluntarySteps:
    """The model calls at whose pre-call hook the decision judged a voluntary step (a
    batch of consumed results or a window shift before the trigger) by its price:
    taken when one paid for itself, declined when none did."""

    taken: int = 0
    declined: int = 0
    verdicts: list[bool] | None = None  # the current call's, while one is judged

    @contextmanager
    def call(self) -> Iterator[None]:
        self.verdicts = []
        try:
            yield
        finally:
            if self.verdicts:
                if any(self.verdicts):
                    self.taken += 1
                else:
                    self.declined += 1
            self.verdicts = None


@contextmanager
def judged(tally: VoluntarySteps) -> Iterator[None]:
    """Every verdict of `decision.step_pays` counted in `tally` (within its calls)."""
    original = decision.step_pays

    def step_pays(*args: Any, **kwargs: Any) -> bool:
        verdict = original(*args, **kwargs)
        if tally.verdicts is not None:
            tally.verdicts.append(verdict)
        return verdict

    decision.step_pays = step_pays
    try:
        yield
    finally:
        decision.step_pays = original


def replay_ours(
    session: Session,
    summarizer: FakeSummarizer,
    name: str = OURS,
    model: str = "",
    *,
    clock: bool = False,
) -> Outcome:
    """Our strategy under the settings in force; a "cached_suffix" summary request is
    priced against the chat request before it (`CostMeter.suffix_cost`), every other
    summarizer input at 1.0x. Each answer is recorded as `model`'s (else the configured
    chat model's): the decision judges its steps at that model's cache prices. The
    voluntary steps it took and declined are counted. `clock`: on the session's clock
    (`SessionClock`), each request asks for the cache lifetime the app chooses for it
    (`request_lifetime`, as `chat_step` does; CACHE_LIFETIME may fix it), recorded on its
    figures and on the answer, where the next decision reads it."""
    trigger = compaction_config().CONTEXT_TOKEN_THRESHOLD
    wire = "openai" if model == PRICE_MODELS["OpenAI"] else "anthropic"
    outcome = Outcome(name, session.name, CostMeter(trigger, index_heading=INDEX_HEADING))
    started = time.perf_counter()
    ends = session.turn_ends()
    suffix_cost = 0.0
    steps = VoluntarySteps()

    def price_suffix_requests() -> None:
        nonlocal suffix_cost
        while len(summarizer.cached_payloads) > priced[0]:
            suffix_cost += outcome.meter.suffix_cost(summarizer.cached_payloads[priced[0]])
            priced[0] += 1

    priced = [0]
    with use_fake(summarizer), judged(steps), SessionClock(clock) as now:
        conversation = Conversation.objects.create(
            title=f"real {session.name}", system_prompt=SYSTEM_PROMPT
        )
        try:
            for index, message in enumerate(session.messages):
                fields: dict[str, Any] = {}
                if message["role"] == "assistant":
                    now.at(session.call_time(index))
                    with steps.call():
                        services.ensure_context_summary(conversation)
                    if model:
                        fields["model"] = model
                    price_suffix_requests()
                    context = services.build_context(conversation)
                    payload = context.to_anthropic()
                    figures = outcome.meter.record(
                        payload,
                        session.probes.get(index, []),
                        newest(session, index),
                        session.call_time(index),
                    )
                    price_recalls(outcome.meter, conversation.pk, payload)
                    fields["input_tokens"] = figures.tokens
                    if clock:
                        fields.update(ask_lifetime(conversation, wire, figures))
                now.at(session.times[index] if index < len(session.times) else None)
                store(conversation, message, **fields)
                if index in ends:
                    finish_turn(conversation)
                    price_suffix_requests()
        except Exception as exc:  # reported per conversation, the run goes on
            outcome.error = failure_text(exc)
    outcome.summarizer = summarizer.totals()
    if summarizer.cached_payloads:
        transcript = outcome.summarizer_input - outcome.summarizer.get(SUFFIX, {}).get(
            "input_tokens", 0
        )
        outcome.summarizer_cost = transcript + suffix_cost
    outcome.counters = {"voluntary steps taken": steps.taken, "declined": steps.declined}
    outcome.seconds = time.perf_counter() - started
    return outcome


def on_clock(
    session: Session,
    name: str,
    summarizer: FakeSummarizer,
    label: str = "",
    **settings_keys: Any,
) -> Outcome:
    """Ours `name` of CLOCK_REPLAYS on the session's own clock: its CACHE_LIFETIME (and
    `settings_keys`) over the settings in force, its answers the price model's of its
    wire (`PRICE_MODELS`); the outcome named `label` (else `name`)."""
    wire, lifetime = CLOCK_REPLAYS[name]
    model = PRICE_MODELS["OpenAI"] if wire == "openai" else ""
    keys = {**(getattr(settings, "ASSISTANT_COMPACTION", None) or {})}
    with override_settings(
        ASSISTANT_COMPACTION={**keys, "CACHE_LIFETIME": lifetime, **settings_keys}
    ):
        return replay_ours(session, summarizer, label or name, model, clock=True)


def replay_openai_all(sessions: list[Session]) -> list[Outcome]:
    """Ours on every session, its answers an OpenAI model's (`PRICE_MODELS`)."""
    return [on_clock(s, OURS_OPENAI, FakeSummarizer()) for s in sessions]


def long_sessions(sessions: list[Session]) -> list[Session]:
    """The sessions whose largest request, sending everything, passes the trigger: those
    the frontier judges (bench/frontier.py)."""
    trigger = compaction_config().CONTEXT_TOKEN_THRESHOLD
    everything = (
        replay_in_memory(s, Everything(SYSTEM_PROMPT), FakeSummarizer()) for s in sessions
    )
    return [s for s, base in zip(sessions, everything, strict=True) if base.meter.largest > trigger]


# The clock replays of the long sessions beyond ours and OURS_OPENAI (CLOCK_REPLAYS): in
# this process after the PROVIDER_COMPACTION replays, or in the second one (`Beside`).
HERE = (OURS_CLOCK.format(lifetime="auto"),)
BESIDE = tuple(name for name in CLOCK_REPLAYS if name not in (OURS, OURS_OPENAI, *HERE))


def replay_clock_all(sessions: list[Session], names: Sequence[str]) -> dict[str, list[Outcome]]:
    """Ours `names` of CLOCK_REPLAYS on the long sessions (`long_sessions`) alone: the
    timed rules' frontiers and the lifetime choice judge no other (bench/timing.py)."""
    judged = long_sessions(sessions)
    return {name: [on_clock(s, name, FakeSummarizer()) for s in judged] for name in names}


def replay_ours_suffix(session: Session, summarizer: FakeSummarizer) -> Outcome:
    """Ours with SUMMARY_REQUEST "cached_suffix", the other settings as ours' (on the
    clock, the default lifetime)."""
    return on_clock(session, OURS, summarizer, OURS_SUFFIX, SUMMARY_REQUEST="cached_suffix")


def peers() -> dict[str, Callable[[FakeSummarizer], Strategy]]:
    """Every in-memory strategy, by name, built for one conversation."""
    return {
        EVERYTHING: lambda s: Everything(SYSTEM_PROMPT),
        "reference": lambda s: Reference(SYSTEM_PROMPT, s),
        lib.LangChainSummarization.name: lambda s: lib.LangChainSummarization(SYSTEM_PROMPT, s),
        lib.LangMem.name: lambda s: lib.LangMem(SYSTEM_PROMPT, s),
        lib.ClearToolUses.name: lambda s: lib.ClearToolUses(
            SYSTEM_PROMPT, lib.FakeChatModel(summarizer=s)
        ),
        lib.ClearToolUsesFromDocs.name: lambda s: lib.ClearToolUsesFromDocs(SYSTEM_PROMPT),
        OPENHANDS: lambda s: OpenHandsCondenser(SYSTEM_PROMPT, s),
        COMPACT.format(trigger="150,000"): lambda s: ServerCompaction(SYSTEM_PROMPT, s, 150_000),
        COMPACT.format(trigger="50,000"): lambda s: ServerCompaction(SYSTEM_PROMPT, s, 50_000),
        MASKING: lambda s: ObservationMasking(SYSTEM_PROMPT),
        HYBRID: lambda s: Hybrid(SYSTEM_PROMPT, s),
    }


def replay_all(
    sessions: list[Session],
    beside: Beside | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, list[Outcome]]:
    """strategy name -> one outcome per session, in the sessions' order: ours,
    ours with cached-suffix summaries, then the peers. With `beside`, the peers,
    cached suffix and OpenAI's prices run in its second process meanwhile, and
    ours under PROVIDER_COMPACTION and on the sessions' clock at Anthropic's
    prices here after ours, at OpenAI's there (each process about half); without,
    all here, one after another."""
    if beside is not None:
        beside.start_suffix()
    results: dict[str, list[Outcome]] = {OURS: []}
    for session in sessions:
        progress(f"real {session.name}: ours ({session.model_calls} model calls)")
        results[OURS].append(on_clock(session, OURS, FakeSummarizer()))
    if beside is not None:
        progress("real sessions: ours under PROVIDER_COMPACTION, the second process meanwhile")
        provider = replay_provider_all(sessions)
        progress('real sessions: ours with CACHE_LIFETIME "auto" (bench/timing.py)')
        clocked = replay_clock_all(sessions, HERE)
        progress("real sessions: waiting for the second process (cached suffix, the peers)")
        others = beside.outcomes()
        ours_again = {name: others[name] for name in (OURS_SUFFIX, OURS_OPENAI)}
        # the order without `beside`
        return {**results, **ours_again, **provider, **clocked, **others}
    results[OURS_SUFFIX] = replay_suffix_all(sessions)
    results[OURS_OPENAI] = replay_openai_all(sessions)
    results.update(replay_provider_all(sessions))
    results.update(replay_clock_all(sessions, [*HERE, *BESIDE]))
    return {**results, **replay_peers(sessions)}


def replay_suffix_all(sessions: list[Session]) -> list[Outcome]:
    return [replay_ours_suffix(session, FakeSummarizer()) for session in sessions]


def replay_provider_all(sessions: list[Session]) -> dict[str, list[Outcome]]:
    """Ours under "provider" and under "auto" on every session."""
    return {
        name: [replay_under_provider(session, name) for session in sessions]
        for name in provider_replay.MODES
    }


class Beside:
    """The replays that run beside ours in a second process, forked when this is
    made (make it before any worker thread starts): the in-memory peers at once,
    and ours with cached-suffix summaries once `replay_all` starts ours, so that
    it never competes with the timed measures before. They share no conversation
    with ours (the suffix replay's are its own rows, leases and summarizer)."""

    def __init__(self, sessions: list[Session]) -> None:
        connections.close_all()  # the forked process must not share our database connection
        self.sessions = sessions
        fork = multiprocessing.get_context("fork")
        self.pool = ProcessPoolExecutor(max_workers=1, mp_context=fork)
        self.peers = self.pool.submit(replay_peers, sessions)
        self.suffix: Future[list[Outcome]] | None = None
        self.openai: Future[list[Outcome]] | None = None
        self.clocked: Future[dict[str, list[Outcome]]] | None = None

    def start_suffix(self) -> None:
        self.suffix = self.pool.submit(replay_suffix_all, self.sessions)
        self.openai = self.pool.submit(replay_openai_all, self.sessions)
        self.clocked = self.pool.submit(replay_clock_all, self.sessions, BESIDE)

    def outcomes(self) -> dict[str, list[Outcome]]:
        try:
            if self.suffix is None:
                self.start_suffix()
            assert self.suffix and self.openai and self.clocked
            return {
                OURS_SUFFIX: self.suffix.result(),
                OURS_OPENAI: self.openai.result(),
                **self.clocked.result(),
                **self.peers.result(),
            }
        finally:
            self.pool.shutdown()


def replay_peers(sessions: list[Session]) -> dict[str, list[Outcome]]:
    """Every in-memory strategy on every session (`peers`)."""
    results: dict[str, list[Outcome]] = {}
    for name, make in peers().items():
        results[name] = []
        for session in sessions:
            summarizer = FakeSummarizer()
            try:
                strategy = make(summarizer)
            except Exception as exc:  # reported per conversation, the run goes on
                results[name].append(
                    Outcome(name, session.name, CostMeter(), error=failure_text(exc))
                )
                continue
            results[name].append(replay_in_memory(session, strategy, summarizer))
    return results


# --- figures -------------------------------------------------------------------


@dataclass
class Totals:
    """One strategy summed over the conversations it replayed without an
    exception; `everything_*` are sending everything on the same ones."""

    strategy: str
    tokens: int = 0
    cost: float = 0.0
    everything_tokens: int = 0
    everything_cost: float = 0.0
    summarizer_input: int = 0
    summarizer_output: int = 0
    requests: int = 0
    largest: int = 0
    over_trigger: int = 0
    probes: int = 0
    probes_kept: int = 0
    broken: int = 0
    bad_start: int = 0
    exceptions: list[str] = field(default_factory=list)
    costlier: list[str] = field(default_factory=list)  # conversations over sending everything

    @property
    def token_ratio(self) -> float | None:
        return self.tokens / self.everything_tokens if self.everything_tokens else None

    @property
    def cost_ratio(self) -> float | None:
        return self.cost / self.everything_cost if self.everything_cost else None

    @property
    def probe_share(self) -> float:
        return self.probes_kept / self.probes if self.probes else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.__dict__.items()},
            "cost": round(self.cost, 1),
            "everything_cost": round(self.everything_cost, 1),
            "token_ratio": self.token_ratio,
            "cost_ratio": self.cost_ratio,
        }


def totals(results: dict[str, list[Outcome]]) -> dict[str, Totals]:
    everything = {o.conversation: o for o in results[EVERYTHING]}
    out: dict[str, Totals] = {}
    for name, outcomes in results.items():
        total = Totals(name)
        for outcome in outcomes:
            base = everything[outcome.conversation]
            total.requests += len(outcome.meter.requests)
            total.largest = max(total.largest, outcome.meter.largest)
            total.over_trigger += outcome.meter.over_trigger
            total.broken += outcome.meter.requests_with_broken_pair
            total.bad_start += outcome.meter.requests_with_bad_start
            if outcome.error or base.error:
                total.exceptions.append(f"{outcome.conversation}: {outcome.error or base.error}")
                continue
            total.tokens += outcome.meter.tokens
            total.cost += outcome.cost
            total.everything_tokens += base.meter.tokens
            total.everything_cost += base.cost
            total.summarizer_input += outcome.summarizer_input
            total.summarizer_output += outcome.summarizer_output
            total.probes += outcome.meter.probes
            total.probes_kept += outcome.meter.probes_kept
            if outcome.cost > base.cost * (1 + 1e-9):
                total.costlier.append(outcome.conversation)
        out[name] = total
    return out


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def strategy_table(sums: dict[str, Totals], sessions: int) -> tuple[list[str], list[list[str]]]:
    header = [
        "strategy",
        "input tokens",
        "vs everything",
        "cost under caching",
        "vs everything",
        "summarizer in / out",
        "largest request",
        "requests > 50,000",
        "probes kept",
        "broken pairs / bad start",
        "exceptions",
        "costlier than everything",
    ]
    rows = []
    for total in sums.values():
        rows.append(
            [
                total.strategy,
                f"{total.tokens:,}",
                _pct(total.token_ratio),
                f"{total.cost:,.0f}",
                _pct(total.cost_ratio),
                f"{total.summarizer_input:,} / {total.summarizer_output:,}",
                f"{total.largest:,}",
                f"{total.over_trigger} of {total.requests}",
                f"{total.probes_kept}/{total.probes}",
                f"{total.broken} / {total.bad_start}",
                str(len(total.exceptions)),
                f"{len(total.costlier)} of {sessions - len(total.exceptions)}",
            ]
        )
    return header, rows


def price_model_rows(
    results: dict[str, list[Outcome]], ours: list[Outcome], provider: str
) -> tuple[list[str], list[list[str]]]:
    """Per session, each strategy's cost at `provider`'s cache prices as a share of
    sending everything at the same prices, `ours` the replay whose decision judged
    its steps at them; and ours' voluntary steps taken / declined. The in-memory
    strategies decide without prices: their same replay is priced again."""
    rates = price_rates(provider)
    strategies = {OURS: ours, **{k: v for k, v in results.items() if k not in (OURS, EVERYTHING)}}
    header = ["session", *strategies, "ours: voluntary steps taken / declined"]
    rows = []
    sums = {name: [0.0, 0.0] for name in strategies}
    for index, base in enumerate(results[EVERYTHING]):
        row = [base.conversation]
        for name, outcomes in strategies.items():
            outcome = outcomes[index]
            if outcome.error or base.error:
                row.append("—")
                continue
            cost, everything = outcome.cost_under(rates), base.cost_under(rates)
            sums[name][0] += cost
            sums[name][1] += everything
            row.append(_pct(cost / everything if everything else None))
        counters = ours[index].counters
        row.append(f"{counters['voluntary steps taken']} / {counters['declined']}")
        rows.append(row)
    taken = sum(o.counters["voluntary steps taken"] for o in ours)
    declined = sum(o.counters["declined"] for o in ours)
    totals_row = [_pct(cost / base if base else None) for cost, base in sums.values()]
    rows.append(["all sessions", *totals_row, f"{taken} / {declined}"])
    return header, rows
