"""The real sessions on their own clock (docs/benchmarks.rst, "Cache lifetimes"): ours
replayed on it, and every strategy's recorded requests priced under each cache rule.

Each request was sent at the time of the last message it carries (`Session.call_time`).
A rule is a provider's cache prices with a lifetime (assistant.providers.LIFETIMES, the
one table of them): a request more than the lifetime after the previous one reads
nothing and writes its whole prompt. "no expiry" is the rule before the sessions had a
clock. Ours is replayed on the sessions' clock (bench.sessions.CLOCK_REPLAYS): its
pre-call hook decides at the time of each call, so it sees the cache go cold and
compacts there at no premium. Under the default lifetimes (and no expiry) ours is the
replay with them, as the app sends without a choice; under a longer lifetime, the replay
with CACHE_LIFETIME fixed to it. Today's figure under each rule (`TODAY`) is ours as it
ran before the sessions had a clock (one request right after another), priced by the
same rule. "ours, lifetime chosen": the replay with CACHE_LIFETIME "auto", each request
at the lifetime it asked for (`RequestFigures.lifetime`): warm when the gap since the
one before is within the lifetime that one asked for, its writes at its own lifetime's
price.
"""

from __future__ import annotations

from typing import Any

from assistant.providers import LIFETIMES, CacheLifetime
from bench.frontier import TOLERANCE, Session, aggregate, frontier
from bench.outcome import Outcome
from bench.payload import Rates, asked_cost
from bench.real import price_rates
from bench.report import Line
from bench.sessions import OURS, OURS_CLOCK, OURS_OPENAI

# The rules' providers: (name in the tables, wire of assistant.providers.LIFETIMES, ours
# at its default lifetime and with no expiry).
PROVIDERS = (("Anthropic", "anthropic", OURS), ("OpenAI", "openai", OURS_OPENAI))
# Ours' aggregate cost share over the long shared sessions under each rule before the
# replay had a clock (the replay deciding as one request right after another, priced by
# the rule): `make bench` at 68f4bd0, 623 s (docs/benchmarks.rst).
TODAY: dict[str, float] = {
    "Anthropic, no expiry": 0.2910,
    "Anthropic, 5m": 0.2840,
    "Anthropic, 1h": 0.3329,
    "OpenAI, no expiry": 0.2771,
    "OpenAI, in_memory": 0.2746,
    "OpenAI, 24h": 0.2771,
}


def rule_rates(provider: str, lifetime: CacheLifetime | None) -> Rates:
    """`provider`'s price model's cache prices with `lifetime` (None: no expiry)."""
    base = price_rates(provider)
    if lifetime is None:
        return base
    write = base.write if lifetime.write is None else lifetime.write
    return Rates(base.read, write, lifetime.seconds)


def rules() -> dict[str, tuple[str, Rates, str]]:
    """Rule name -> (provider, rates, ours under it): no expiry, then each lifetime each
    provider sells (ours the replay with that lifetime; the default's is `ours`)."""
    found: dict[str, tuple[str, Rates, str]] = {}
    for provider, wire, default in PROVIDERS:
        found[f"{provider}, no expiry"] = (provider, rule_rates(provider, None), default)
        for index, lifetime in enumerate(LIFETIMES[wire]):
            ours = default if index == 0 else OURS_CLOCK.format(lifetime=lifetime.name)
            found[f"{provider}, {lifetime.name}"] = (provider, rule_rates(provider, lifetime), ours)
    return found


def chosen_cost(outcome: Outcome, provider: str) -> float:
    """`asked_cost` with the summarizer's input as `Outcome.cost_under` counts it."""
    base = price_rates(provider)
    summarizer = outcome.cost_under(base) - outcome.meter.cost_under(base)
    return asked_cost(outcome.meter, base) + summarizer


def priced_frontiers(
    results: dict[str, list[Any]], trigger: int, clocked: dict[str, list[Outcome]]
) -> dict[str, list[Session]]:
    """Rule name -> the frontier of the long sessions under it, ours the replay for the
    rule (`clocked`: the replays of the long sessions alone, and OURS_OPENAI's)."""
    found = {}
    for name, (_provider, rates, ours) in rules().items():
        mine = results[OURS] if ours == OURS else aligned(results[OURS], clocked[ours])
        found[name] = frontier({**results, OURS: mine}, trigger, rates)
    return found


def aligned(every: list[Outcome], some: list[Outcome]) -> list[Outcome]:
    """`some` (outcomes of some sessions) in the order of `every` (one per session), the
    sessions `some` has not (those no frontier judges) from `every`."""
    by_name = {o.conversation: o for o in some}
    return [by_name.get(o.conversation, o) for o in every]


def rule_lines(edges: dict[str, list[Session]], today: dict[str, float]) -> list[Line]:
    """Ours in aggregate over the long sessions under each rule, against today's figure
    (`TODAY`): 10% below it under each timed rule. With no expiry nothing goes cold, so
    the clock changes nothing there to judge: info."""
    lines = []
    for name, sessions in edges.items():
        if not sessions:
            continue
        share, before = aggregate(sessions, OURS).share, today[name]
        timed = not name.endswith("no expiry")
        lines.append(
            Line(
                f"long sessions, {name}: ours' cost share",
                share,
                before,
                "today's figure",
                "10% below today's" if timed else "info (nothing expires)",
                share <= 0.9 * before if timed else None,
                "%",
            )
        )
    return lines


def choice_rows(
    clocked: dict[str, list[Outcome]], edges: dict[str, list[Session]]
) -> tuple[tuple[list[str], list[list[str]]], int, int]:
    """Per long session: ours on the clock at 5m, at 1h, and with the lifetime chosen per
    request (as shares of sending everything at 5m, each priced at the lifetimes it asked
    for), and whether the choice is at most the cheaper of the two (1%); and (sessions
    that are, sessions)."""
    first, second = (f"Anthropic, {x.name}" for x in LIFETIMES["anthropic"])
    chosen = {o.conversation: o for o in clocked[OURS_CLOCK.format(lifetime="auto")]}
    head = ["session", "ours 5m", "ours 1h", "ours, chosen", "at most the cheaper"]
    rows, held = [], 0
    hours = {s.name: s for s in edges[second]}
    for session in edges[first]:
        five = session.points[OURS]
        hour = hours[session.name].points[OURS]
        picked = chosen_cost(chosen[session.name], "Anthropic")
        base = five.everything_cost
        ok = picked <= (1 + TOLERANCE) * min(five.cost, hour.cost)
        held += ok
        rows.append(
            [
                session.name,
                f"{five.cost / base:.3f}",
                f"{hour.cost / base:.3f}",
                f"{picked / base:.3f}",
                "yes" if ok else "NO",
            ]
        )
    return (head, rows), held, len(rows)
