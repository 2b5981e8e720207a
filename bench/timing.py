"""The real sessions on their own clock (docs/benchmarks.rst, "Cache lifetimes"): every
strategy's recorded requests priced under each cache rule, from the one replay (a
pricing pass, no replay per rule).

Each request was sent at the time of the last message it carries (`Session.call_time`).
A rule is a provider's cache prices with a lifetime (assistant.providers.LIFETIMES, the
one table of them): a request more than the lifetime after the previous one reads
nothing and writes its whole prompt. "no expiry" is the rule before the sessions had a
clock. "ours, lifetime chosen": ours priced at the lifetime the app's break-even rule
(assistant.window.choose_lifetime) picks for each request from the gaps before it and
what the request writes, each request warm when the gap since the one before is within
the lifetime that one asked for, its writes at its own lifetime's price.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from assistant.providers import LIFETIMES, CacheLifetime
from assistant.window import choose_lifetime
from assistant.window.ledger import CachePrices
from bench.frontier import TOLERANCE, Session, aggregate, frontier
from bench.payload import CostMeter, Rates, RequestFigures
from bench.real import PRICE_MODELS, price_rates
from bench.report import Line
from bench.sessions import OURS

# Ours' aggregate cost share over the long shared sessions under each rule before this
# change (the replay as it decided then, priced by the rule): measured with `make bench`
# at 6bf9d5f plus the timestamped files (docs/benchmarks.rst).
TODAY: dict[str, float] = {}


def rule_rates(provider: str, lifetime: CacheLifetime | None) -> Rates:
    """`provider`'s price model's cache prices with `lifetime` (None: no expiry)."""
    base = price_rates(provider)
    if lifetime is None:
        return base
    write = base.write if lifetime.write is None else lifetime.write
    return Rates(base.read, write, lifetime.seconds)


def rules() -> dict[str, tuple[str, Rates]]:
    """Rule name -> (provider, rates): no expiry, then each lifetime each sells."""
    found: dict[str, tuple[str, Rates]] = {}
    for provider, wire in (("Anthropic", "anthropic"), ("OpenAI", "openai")):
        found[f"{provider}, no expiry"] = (provider, rule_rates(provider, None))
        for lifetime in LIFETIMES[wire]:
            found[f"{provider}, {lifetime.name}"] = (provider, rule_rates(provider, lifetime))
    return found


def chosen_lifetimes(requests: list[RequestFigures], provider: str) -> list[CacheLifetime]:
    """The lifetime the app's rule picks for each request, from the gaps before it and
    what it writes (all of it where the lifetime the previous one asked for has run out)."""
    wire = "anthropic" if provider == "Anthropic" else "openai"
    model = PRICE_MODELS[provider]
    base = price_rates(provider)
    prices = CachePrices(base.read, base.write)
    gaps: list[float] = []
    chosen: list[CacheLifetime] = []
    for before, request in pairwise([None, *requests]):
        gap = None
        if before is not None and before.at is not None and request.at is not None:
            gap = request.at - before.at
            gaps.append(gap)
        cold = gap is not None and bool(chosen) and gap > chosen[-1].seconds
        written = request.tokens if cold else request.tokens - request.cached_tokens
        picked = choose_lifetime(wire, model, prices, gaps, request.tokens, written)
        chosen.append(picked or LIFETIMES[wire][0])
    return chosen


def chosen_cost(meter: CostMeter, provider: str) -> float:
    """The meter's requests, each at the lifetime chosen for it (module docstring)."""
    base = price_rates(provider)
    total = 0.0
    before: RequestFigures | None = None
    kept: CacheLifetime | None = None
    for request, lifetime in zip(
        meter.requests, chosen_lifetimes(meter.requests, provider), strict=True
    ):
        cold = (
            before is not None
            and kept is not None
            and before.at is not None
            and request.at is not None
            and request.at - before.at > kept.seconds
        )
        write = base.write if lifetime.write is None else lifetime.write
        total += request.cost_under(Rates(base.read, write), cold)
        before, kept = request, lifetime
    return total + sum(r.cost_under(base) for r in meter.recalls)


def priced_frontiers(
    results: dict[str, list[Any]], trigger: int, ours_openai: list[Any]
) -> dict[str, list[Session]]:
    """Rule name -> the frontier of the long sessions under it (ours at OpenAI's prices:
    its replay decided at them)."""
    found = {}
    for name, (provider, rates) in rules().items():
        at = results if provider == "Anthropic" else {**results, OURS: ours_openai}
        found[name] = frontier(at, trigger, rates)
    return found


def rule_lines(edges: dict[str, list[Session]], today: dict[str, float]) -> list[Line]:
    """Ours in aggregate over the long sessions under each rule, against today's figure
    (ours as sent before this change, priced by the same rule): 10% below it."""
    lines = []
    for name, sessions in edges.items():
        share = aggregate(sessions, OURS).share if sessions else None
        before = today.get(name)
        lines.append(
            Line(
                f"long sessions, {name}: ours' cost share",
                share if share is not None else 0.0,
                before if before is not None else 0.0,
                "today's figure",
                "10% below today's",
                None if share is None or before is None else share <= 0.9 * before,
                "%",
            )
        )
    return lines


def choice_rows(
    results: dict[str, list[Any]], edges: dict[str, list[Session]], provider: str = "Anthropic"
) -> tuple[tuple[list[str], list[list[str]]], int, int]:
    """Per long session: ours at 5m, at 1h, with the lifetime chosen per request (as
    shares of sending everything at 5m), and whether the choice is at most the cheaper
    of the two (1%); and (sessions that are, sessions)."""
    first, second = (f"{provider}, {x.name}" for x in LIFETIMES["anthropic"])
    names = {o.conversation: o for o in results[OURS]}
    head = ["session", "ours 5m", "ours 1h", "ours, chosen", "at most the cheaper"]
    rows, held = [], 0
    for session in edges[first]:
        outcome = names[session.name]
        five = session.points[OURS]
        hour = next(s for s in edges[second] if s.name == session.name).points[OURS]
        summarizer = outcome.cost_under(price_rates(provider)) - outcome.meter.cost_under(
            price_rates(provider)
        )
        picked = chosen_cost(outcome.meter, provider) + summarizer
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
