"""The frontier of cost and retention on the long real sessions (docs/benchmarks.rst).

On each session whose sending-everything request passes the trigger, every strategy of
the run is a point (cost under caching, retention probes present in the requests). A
peer (`PEERS`) is judged only where it is clean: no exception, and no request with a
broken tool pair on that session (counted request by request, `CostMeter.record`). A
clean peer P dominates a strategy S when cost(P) <= 1.01 x cost(S), probes(P) >=
probes(S), and cost(P) < 0.99 x cost(S) or probes(P) > probes(S). Ours must be
dominated on no long session, be at most LangChain's cost (1% tolerance) with at
least its probes on every one, and in aggregate cost at most 0.33 of sending
everything with at least 90% of the probes asked present, losing none (present or
recoverable). Every strategy the run replays is a point here; those not among the peers
(ours, its variants, the baselines) are judged against the clean peers too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench.payload import Rates
from bench.report import Line
from bench.sessions import EVERYTHING, LANGCHAIN, OURS, PEERS

TOLERANCE = 0.01  # the 1% within which two costs are the same
MAX_COST_SHARE = 0.33  # ours over the long sessions, of sending everything
MIN_PRESENT_SHARE = 0.90  # ours' probes present over the long sessions, of those asked


def dominates(cost: float, probes: int, their_cost: float, their_probes: int) -> bool:
    """Whether (cost, probes) dominates (their_cost, their_probes): at most as costly
    within the tolerance, at least as many probes, and better on one of the two."""
    return (
        cost <= (1 + TOLERANCE) * their_cost
        and probes >= their_probes
        and (cost < (1 - TOLERANCE) * their_cost or probes > their_probes)
    )


def at_most(cost: float, probes: int, their_cost: float, their_probes: int) -> bool:
    """At most their cost within the tolerance, with at least their probes (the
    LangChain target)."""
    return cost <= (1 + TOLERANCE) * their_cost and probes >= their_probes


@dataclass
class Point:
    """One strategy on one session."""

    strategy: str
    cost: float
    everything_cost: float
    present: int
    asked: int
    recoverable: int = 0
    in_index: int = 0  # present probes the artifact index holds
    broken: int = 0  # requests with a broken tool pair
    over_bound: int = 0  # requests over the trigger plus the newest step
    requests: int = 0
    error: str | None = None

    @property
    def clean(self) -> bool:
        return self.error is None and self.broken == 0

    @property
    def share(self) -> float:
        return self.cost / self.everything_cost if self.everything_cost else 1.0

    @property
    def lost(self) -> int:
        return self.asked - self.present - self.recoverable


@dataclass
class Session:
    """Every strategy's point on one long session."""

    name: str
    asked: int
    everything_present: int  # sending everything's probes present
    points: dict[str, Point] = field(default_factory=dict)

    def judges(self, name: str) -> list[str]:
        """The peers `name` is judged against here: the clean ones, itself left out."""
        return [p for p in PEERS if p in self.points and p != name and self.points[p].clean]

    def dominating(self, name: str = OURS) -> list[str]:
        mine = self.points[name]
        if mine.error:
            return self.judges(name)
        return [
            p
            for p in self.judges(name)
            if dominates(self.points[p].cost, self.points[p].present, mine.cost, mine.present)
        ]

    def beside_langchain(self, name: str = OURS) -> bool | None:
        """At most LangChain's cost (1%) with at least its probes; None where LangChain
        is not clean (or not in the run)."""
        theirs = self.points.get(LANGCHAIN)
        if theirs is None or not theirs.clean or name == LANGCHAIN:
            return None
        mine = self.points[name]
        return not mine.error and at_most(mine.cost, mine.present, theirs.cost, theirs.present)


def point(name: str, outcome: Any, base: Any, rates: Rates | None) -> Point:
    meter = outcome.meter
    return Point(
        strategy=name,
        cost=outcome.cost_under(rates),
        everything_cost=base.cost_under(rates),
        present=meter.probes_kept,
        asked=meter.probes,
        recoverable=meter.probes_recoverable,
        in_index=meter.probes_in_index,
        broken=meter.requests_with_broken_pair,
        over_bound=meter.requests_over_bound,
        requests=len(meter.requests),
        error=outcome.error or base.error,
    )


def frontier(
    results: dict[str, list[Any]], trigger: int, rates: Rates | None = None
) -> list[Session]:
    """Every long session (sending everything's largest request over `trigger`), every
    strategy of `results` but sending everything, at `rates` (None: Anthropic's)."""
    sessions = []
    for index, base in enumerate(results[EVERYTHING]):
        if base.meter.largest <= trigger:
            continue
        session = Session(base.conversation, base.meter.probes, base.meter.probes_kept)
        for name, outcomes in results.items():
            if name != EVERYTHING:
                session.points[name] = point(name, outcomes[index], base, rates)
        sessions.append(session)
    return sessions


@dataclass
class Aggregate:
    """One strategy summed over the long sessions."""

    strategy: str
    cost: float = 0.0
    everything_cost: float = 0.0
    present: int = 0
    asked: int = 0
    recoverable: int = 0
    in_index: int = 0
    broken: int = 0
    over_bound: int = 0
    requests: int = 0
    costlier: int = 0  # sessions costing more than sending everything
    errors: int = 0
    dominated: int = 0  # sessions where a clean peer dominates it
    beside_langchain: int = 0  # sessions at most LangChain's cost with its probes
    sessions: int = 0

    @property
    def share(self) -> float | None:
        return self.cost / self.everything_cost if self.everything_cost else None

    @property
    def present_share(self) -> float:
        return self.present / self.asked if self.asked else 1.0

    @property
    def lost(self) -> int:
        return self.asked - self.present - self.recoverable


def aggregate(sessions: list[Session], name: str) -> Aggregate:
    total = Aggregate(name)
    for session in sessions:
        mine = session.points[name]
        total.sessions += 1
        total.broken += mine.broken
        total.over_bound += mine.over_bound
        total.requests += mine.requests
        total.dominated += bool(session.dominating(name))
        total.beside_langchain += bool(session.beside_langchain(name))
        if mine.error:
            total.errors += 1
            continue
        total.cost += mine.cost
        total.everything_cost += mine.everything_cost
        total.present += mine.present
        total.asked += mine.asked
        total.recoverable += mine.recoverable
        total.in_index += mine.in_index
        total.costlier += mine.cost > mine.everything_cost * (1 + 1e-9)
    return total


def _cell(session: Session, name: str) -> str:
    mine = session.points[name]
    if mine.error:
        return "exception"
    text = f"{mine.share:.3f} / {mine.present}"
    if mine.recoverable:
        text += f" (+{mine.recoverable} recoverable)"
    if mine.broken:
        text += f", {mine.broken} broken"
    if name == OURS:
        return text
    if name in PEERS:
        return text + (" **dominates ours**" if name in session.dominating(OURS) else "")
    return text + (" (dominated)" if session.dominating(name) else "")


def _mark(verdict: bool | None) -> str:
    return {True: "pass", False: "MISS", None: "LangChain not clean"}[verdict]


def frontier_rows(sessions: list[Session]) -> tuple[list[str], list[list[str]]]:
    """Per long session and in aggregate: every strategy's cost as a share of sending
    everything and its probes present, then ours' verdicts."""
    names = list(sessions[0].points) if sessions else []
    header = ["session", "probes asked", *names]
    header += [
        "ours dominated by",
        "ours vs LangChain",
        "ours: lost",
        "ours: present outside index",
    ]
    rows = []
    for session in sessions:
        ours = session.points[OURS]
        rows.append(
            [
                session.name,
                str(session.asked),
                *(_cell(session, name) for name in names),
                ", ".join(session.dominating(OURS)) or "none",
                _mark(session.beside_langchain(OURS)),
                str(ours.lost),
                f"{ours.present - ours.in_index} of {ours.present}",
            ]
        )
    if sessions:
        rows.append(_aggregate_row(sessions, names))
    return header, rows


def _aggregate_row(sessions: list[Session], names: list[str]) -> list[str]:
    totals = {name: aggregate(sessions, name) for name in names}
    cells = []
    for name, total in totals.items():
        share = "—" if total.share is None else f"{total.share:.3f}"
        cell = f"{share} / {total.present} of {total.asked}"
        if total.recoverable:
            cell += f" (+{total.recoverable} recoverable)"
        if total.broken:
            cell += f", {total.broken} broken"
        if name != OURS and name not in PEERS and total.dominated:
            cell += f" (dominated on {total.dominated})"
        cells.append(cell)
    ours = totals[OURS]
    judged = sum(s.beside_langchain(OURS) is not None for s in sessions)
    return [
        f"all {len(sessions)} long sessions",
        str(sum(s.asked for s in sessions)),
        *cells,
        f"dominated on {ours.dominated} of {len(sessions)}",
        f"{ours.beside_langchain} of {judged} pass",
        str(ours.lost),
        f"{ours.present - ours.in_index} of {ours.present}",
    ]


def frontier_lines(sessions: list[Session], trigger: int) -> list[Line]:
    """The targets of the frontier for ours (docs/benchmarks.rst), under the prices the
    sessions were priced at."""
    ours = aggregate(sessions, OURS) if sessions else Aggregate(OURS)
    asked = sum(s.asked for s in sessions)
    everything_share = sum(s.everything_present for s in sessions) / asked if asked else 1.0
    n = len(sessions)
    judged = sum(s.beside_langchain(OURS) is not None for s in sessions)
    some = n > 0 or None  # no long session: reported, not judged
    label = f"long sessions ({n}, past {trigger:,})"
    return [
        Line(
            f"{label}: ours dominated by a clean peer",
            ours.dominated,
            n,
            "sessions",
            "0 sessions",
            some and ours.dominated == 0,
        ),
        Line(
            f"{label}: ours at most LangChain's cost (1%) with its probes",
            ours.beside_langchain,
            judged,
            "sessions LangChain is clean on",
            "every session",
            some and ours.beside_langchain == judged,
        ),
        Line(
            f"{label}: cost under caching, aggregate",
            round(ours.cost),
            round(ours.everything_cost),
            "everything",
            f"<= {MAX_COST_SHARE:.0%}",
            some and ours.share is not None and ours.share <= MAX_COST_SHARE,
        ),
        Line(
            f"{label}: probes present, aggregate",
            ours.present_share,
            everything_share,
            "everything",
            f">= {MIN_PRESENT_SHARE:.0%} ({ours.present} of {ours.asked})",
            some and ours.present_share >= MIN_PRESENT_SHARE,
            "%",
        ),
        Line(
            f"{label}: probes lost (neither present nor recoverable)",
            ours.lost,
            ours.asked,
            "asked",
            "0",
            some and ours.lost == 0,
        ),
        Line(
            f"{label}: requests with a broken tool pair",
            ours.broken,
            0,
            "everything",
            "0",
            some and ours.broken == 0,
        ),
        Line(
            f"{label}: requests over the trigger plus the newest step",
            ours.over_bound,
            ours.requests,
            "requests",
            "0",
            some and ours.over_bound == 0,
        ),
        Line(
            f"{label}: sessions costing more than sending everything",
            ours.costlier,
            n,
            "sessions",
            "0",
            some and ours.costlier == 0,
        ),
        Line(
            f"{label}: ours' present probes outside the artifact index",
            ours.present - ours.in_index,
            ours.present,
            "present",
            "info",
            None,
        ),
    ]


def as_dict(sessions: list[Session]) -> dict[str, Any]:
    """The frontier for the JSON results: every point, ours' verdicts, the aggregates."""
    names = list(sessions[0].points) if sessions else []
    return {
        "sessions": [
            {
                "session": s.name,
                "asked": s.asked,
                "points": {name: {**asdict(p), "clean": p.clean} for name, p in s.points.items()},
                "ours_dominated_by": s.dominating(OURS),
                "ours_beside_langchain": s.beside_langchain(OURS),
            }
            for s in sessions
        ],
        "aggregate": {name: asdict(aggregate(sessions, name)) for name in names},
    }
