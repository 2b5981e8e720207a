"""`python -m bench.tradeoffs`: our strategy under other settings, against
sending everything in the same run.

Each row replays every conversation of bench/data/real (or, with
`--synthetic`, the 300-turn synthetic conversation) through the services on
PostgreSQL, as `make bench` does, with some ASSISTANT_COMPACTION keys
changed, and splits the cost under caching (docs/benchmarks.rst) into its parts:
cache reads (0.1x), cache writes (1.25x), summarizer input (1.0x), beside the
floor (what sending everything pays to write each message once). It shows
what a deployment trades when it turns a key: tokens against rewrites and
summaries, both against the retention probes (synthetic: the asked facts
answerable). Not part of `make bench` (about 40 s a row).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

# (label, ASSISTANT_COMPACTION keys): the defaults first, then one key at a
# time, then the keys together that send the fewest tokens.
SMALLEST = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "MAX_RECENT_TOKENS": 8000,
    "RECENT_FRACTION": 0.2,
    "KEEP_NEWEST_TOOL_RESULTS": 1,
    "TRUNCATION_KEEP_CHARS": 300,
    "TRUNCATION_DETAILS_MAX_CHARS": 300,
    "COMPACT_WATERMARK": 0.15,
}
SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("defaults", {}),
    ("cached-suffix summaries", {"SUMMARY_REQUEST": "cached_suffix"}),
    ("eager timing", {"COMPACTION_TIMING": "eager"}),
    ("compact from 0.15 of the trigger", {"COMPACT_WATERMARK": 0.15}),
    ("compact from 0.6 of the trigger", {"COMPACT_WATERMARK": 0.6}),
    ("keep the newest result only", {"KEEP_NEWEST_TOOL_RESULTS": 1}),
    ("batches of any size", {"COMPACT_MIN_FREE_TOKENS": 0}),
    ("batches of 10,000 tokens", {"COMPACT_MIN_FREE_TOKENS": 10_000}),
    (
        "truncate to 300 characters",
        {"TRUNCATION_KEEP_CHARS": 300, "TRUNCATION_DETAILS_MAX_CHARS": 300},
    ),
    ("key details up to 3,000 characters", {"TRUNCATION_DETAILS_MAX_CHARS": 3000}),
    ("keep 20% of the window", {"VERBATIM_AFTER_SHIFT": "recent", "RECENT_FRACTION": 0.2}),
    ("all of these smallest", SMALLEST),
    ("all of these smallest, eager", {**SMALLEST, "COMPACTION_TIMING": "eager"}),
]


HEADER = [
    "settings",
    "tokens",
    "cost",
    "cache reads",
    "cache writes",
    "summarizer",
    "largest request",
    "probes kept",
    "costlier than everything",
]


@dataclass
class Row:
    label: str
    tokens: float = 0.0  # shares of sending everything's tokens / cost
    cost: float = 0.0
    reads: float = 0.0
    writes: float = 0.0
    summarizer: float = 0.0
    largest: int = 0
    probes_kept: int = 0
    probes: int = 0
    costlier: int = 0

    def cells(self, total: int) -> list[str]:
        keys = dict(SETTINGS)[self.label]
        return [
            f"{self.label} {keys}" if keys else self.label,
            *(f"{share:.2%}" for share in (self.tokens, self.cost, self.reads, self.writes)),
            f"{self.summarizer:.2%}",
            f"{self.largest:,}",
            f"{self.probes_kept}/{self.probes}",
            f"{self.costlier} of {total}",
        ]


def measure_real(label: str, keys: dict[str, Any], sessions: list, everything: dict) -> Row:
    from django.test import override_settings

    from bench import real
    from bench.fake_summarizer import FakeSummarizer
    from bench.payload import CACHE_READ, CACHE_WRITE

    row = Row(label)
    sums = {"tokens": 0.0, "cost": 0.0, "reads": 0.0, "writes": 0.0, "summarizer": 0.0}
    with override_settings(ASSISTANT_COMPACTION=keys):
        for session in sessions:
            outcome = real.replay_ours(session, FakeSummarizer())
            if outcome.error:
                raise RuntimeError(f"{label}, {session.name}: {outcome.error}")
            requests = outcome.meter.requests
            sums["tokens"] += outcome.meter.tokens
            sums["cost"] += outcome.cost
            sums["reads"] += sum(CACHE_READ * r.cached_tokens for r in requests)
            sums["writes"] += sum(CACHE_WRITE * (r.tokens - r.cached_tokens) for r in requests)
            sums["summarizer"] += outcome.cost - outcome.meter.cost  # as the strategy priced it
            row.largest = max(row.largest, outcome.meter.largest)
            row.probes += outcome.meter.probes
            row.probes_kept += outcome.meter.probes_kept
            row.costlier += outcome.cost > everything[session.name].cost * (1 + 1e-9)
    all_tokens = sum(o.meter.tokens for o in everything.values())
    all_cost = sum(o.cost for o in everything.values())
    row.tokens = sums["tokens"] / all_tokens
    for part in ("cost", "reads", "writes", "summarizer"):
        setattr(row, part, sums[part] / all_cost)
    return row


def measure_synthetic(label: str, keys: dict[str, Any], workload: Any, everything: Any) -> Row:
    """The same parts on the synthetic conversation; probes are its asked facts."""
    from django.test import override_settings

    from bench import measures
    from bench.fake_summarizer import FakeSummarizer
    from bench.payload import CACHE_READ

    with override_settings(ASSISTANT_COMPACTION=keys):
        replay = measures.replay_ours(workload, FakeSummarizer())
    cost, base = replay.extra["cost"], everything.extra["cost"]
    summarizer = replay.summarizer_total("input_tokens")
    reads = CACHE_READ * cost["cached_tokens"]
    total = cost["cost"] + summarizer
    return Row(
        label,
        tokens=cost["tokens"] / base["tokens"],
        cost=total / base["cost"],
        reads=reads / base["cost"],
        writes=(cost["cost"] - reads) / base["cost"],
        summarizer=summarizer / base["cost"],
        largest=cost["largest"],
        probes_kept=sum(f.answerable for f in replay.facts),
        probes=len(replay.facts),
        costlier=int(total > base["cost"]),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tradeoffs", description=__doc__)
    parser.add_argument(
        "--synthetic", action="store_true", help="the 300 turns, not the real sessions"
    )
    parser.add_argument("--only", nargs="*", metavar="LABEL", help="only these rows")
    args = parser.parse_args(argv)
    os.environ["DJANGO_SETTINGS_MODULE"] = os.environ.get("BENCH_SETTINGS", "bench.settings")
    import django

    django.setup()

    from bench import baselines, measures, real
    from bench.baselines import Everything
    from bench.fake_summarizer import FakeSummarizer
    from bench.report import DOCS, markdown, write_markdown
    from bench.sessions import SYSTEM_PROMPT, load_sessions
    from bench.targets import written_once
    from demo.workload import generate

    measures.prepare_database()
    if args.synthetic:
        workload = generate(300)
        baseline = baselines.send_everything(workload)
        all_tokens, all_cost = baseline.extra["cost"]["tokens"], baseline.extra["cost"]["cost"]
        conversations = 1

        def measure(label: str, keys: dict[str, Any]) -> Row:
            return measure_synthetic(label, keys, workload, baseline)
    else:
        sessions = load_sessions()
        everything = {
            s.name: real.replay_in_memory(s, Everything(SYSTEM_PROMPT), FakeSummarizer())
            for s in sessions
        }
        all_tokens = sum(o.meter.tokens for o in everything.values())
        all_cost = sum(o.cost for o in everything.values())
        conversations = len(sessions)

        def measure(label: str, keys: dict[str, Any]) -> Row:
            return measure_real(label, keys, sessions, everything)

    rows = []
    for label, keys in SETTINGS:
        if not args.only or label in args.only:
            rows.append(measure(label, keys).cells(conversations))
            print(" | ".join(rows[-1]), flush=True)
    floor = written_once(all_tokens, all_cost) / all_cost
    title = (
        f"Shares of sending everything ({all_tokens:,} tokens, cost {all_cost:,.0f} under"
        f" caching). Floor, every message written once at 1.25x: {floor:.1%} of the cost."
    )
    header = HEADER if not args.synthetic else [*HEADER[:-2], "facts answerable", HEADER[-1]]
    print(f"\n{title}\n")
    print(markdown(header, rows))
    if not args.only:  # the whole table: the page the docs include
        name = "tradeoffs-synthetic.md" if args.synthetic else "tradeoffs-real.md"
        print(f"wrote {write_markdown([(title, markdown(header, rows))], DOCS / name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
