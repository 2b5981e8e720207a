"""`python -m bench.long_sessions`: ours alone on the long real sessions (sending
everything's largest request past the trigger), as `make bench` replays it (on the
sessions' clock, the default lifetime), per session
and in aggregate: cost under caching as a share of sending everything, the retention
probes present in the request, recoverable by recall, lost, and those the artifact index
holds; with each session's probes not present at their call. About a minute, one core:
a quick check of a change to what the window keeps, before `make bench` judges it
against the peers (bench/frontier.py). `--openai`: ours decided and priced at OpenAI's
cache prices, as the frontier's second table."""

from __future__ import annotations

import argparse
import os
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.long_sessions", description=__doc__)
    parser.add_argument("--openai", action="store_true", help="at OpenAI's cache prices")
    parser.add_argument("--sessions", nargs="*", metavar="NAME", help="only these sessions")
    args = parser.parse_args(argv)
    os.environ["DJANGO_SETTINGS_MODULE"] = os.environ.get("BENCH_SETTINGS", "bench.settings")
    import django

    django.setup()

    from assistant.settings.conf import compaction_config
    from bench import measures, real
    from bench.baselines import Everything
    from bench.fake_summarizer import FakeSummarizer
    from bench.payload import CostMeter
    from bench.report import markdown
    from bench.sessions import OURS, OURS_OPENAI, SYSTEM_PROMPT, load_sessions

    measures.prepare_database()
    trigger = compaction_config().CONTEXT_TOKEN_THRESHOLD
    rates = real.price_rates("OpenAI") if args.openai else None
    missing: list[str] = []
    record = CostMeter.record

    def noting(meter: CostMeter, *given: Any, **named: Any) -> Any:
        figures = record(meter, *given, **named)
        missing.extend(f"{len(meter.requests)}: {probe}" for probe in meter.missing)
        return figures

    rows, sums = [], [0.0, 0.0, 0, 0, 0, 0, 0]
    for session in load_sessions():
        if args.sessions and session.name not in args.sessions:
            continue
        base = real.replay_in_memory(session, Everything(SYSTEM_PROMPT), FakeSummarizer())
        if base.meter.largest <= trigger:
            continue
        missing.clear()
        CostMeter.record = noting  # type: ignore[method-assign]
        try:
            ours = real.on_clock(session, OURS_OPENAI if args.openai else OURS, FakeSummarizer())
        finally:
            CostMeter.record = record  # type: ignore[method-assign]
        meter = ours.meter
        figures = [
            ours.cost_under(rates),
            base.cost_under(rates),
            meter.probes,
            meter.probes_kept,
            meter.probes_recoverable,
            meter.probes - meter.probes_kept - meter.probes_recoverable,
            meter.probes_in_index,
        ]
        sums = [total + value for total, value in zip(sums, figures, strict=True)]
        rows.append(_row(session.name, figures, ours.error or "; ".join(missing)))
        print(" | ".join(rows[-1]), flush=True)
    rows.append(_row(f"all {len(rows)} long sessions", sums, ""))
    header = ["session", "cost share", "asked", "present", "recoverable", "lost", "in index"]
    print()
    print(markdown([*header, "not present (call: probe)"], rows))
    return 0


def _row(name: str, figures: list[Any], note: str) -> list[str]:
    cost, everything, asked, present, recoverable, lost, in_index = figures
    share = f"{cost / everything:.4f}" if everything else "—"
    counts = [str(int(n)) for n in (asked, present, recoverable, lost, in_index)]
    return [name, share, *counts, note]


if __name__ == "__main__":
    raise SystemExit(main())
