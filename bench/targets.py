"""The cost lines, the synthetic per-conversation table and the per-session table of
the real sessions of `make bench` (docs/benchmarks.rst: cost under prompt caching;
the frontier targets on the long sessions are bench/frontier.py's)."""

from __future__ import annotations

from typing import Any

from bench.payload import CACHE_READ, CACHE_WRITE
from bench.report import Line
from bench.sessions import CLEAR_DOCS, CLEAR_LIBRARY, EVERYTHING, OURS


def synthetic_costs(replays: dict[str, Any], workload: str) -> dict[str, dict[str, float]]:
    """Tokens and cost under caching (summarizer input at 1.0x) of ours, the
    reference and sending everything on one synthetic workload."""
    out = {}
    for strategy in ("ours", "reference", "everything"):
        replay = replays[f"{strategy} {workload}"]
        cost = replay.extra["cost"]
        summarizer_in = replay.summarizer_total("input_tokens")
        out[strategy] = {
            "tokens": cost["tokens"],
            "cost": cost["cost"] + summarizer_in,
            "largest": cost["largest"],
            "summarizer_input": summarizer_in,
        }
    return out


def synthetic_rows(synthetic: dict[str, dict[str, dict[str, float]]]) -> tuple[list, list]:
    header = ["workload", "everything: tokens / cost", "ours", "reference"]
    rows = []
    for name, figures in synthetic.items():
        base = figures["everything"]
        row = [name, f"{base['tokens']:,} / {base['cost']:,.0f}"]
        for strategy in ("ours", "reference"):
            mine = figures[strategy]
            flag = " (more)" if mine["cost"] > base["cost"] else ""
            row.append(
                f"{mine['tokens'] / base['tokens']:.4f} / {mine['cost'] / base['cost']:.4f}{flag}"
            )
        rows.append(row)
    return header, rows


def written_once(tokens: float, cost: float) -> float:
    """What sending everything pays for writing each message once (1.25x):
    a floor under the cost of any strategy that sends every message whole at
    least once, as ours must (the newest step always goes verbatim). Sending
    everything's requests cost 0.1x their cached part and 1.25x the rest, so
    the rest is (cost - 0.1 * tokens) / 1.15."""
    return CACHE_WRITE * (cost - CACHE_READ * tokens) / (CACHE_WRITE - CACHE_READ)


def cost_lines(
    real_sums: dict[str, Any], synthetic: dict[str, dict[str, dict[str, float]]], trigger: int
) -> list[Any]:
    """The targets of docs/benchmarks.rst on real sessions and on cost."""
    ours, everything = real_sums[OURS], real_sums[EVERYTHING]
    s300 = synthetic["300 turns"]
    costlier = len(ours.costlier) + sum(
        figures["ours"]["cost"] > figures["everything"]["cost"] for figures in synthetic.values()
    )
    return [
        Line(
            "real sessions, all: input tokens",
            ours.tokens,
            ours.everything_tokens,
            "everything",
            "info (targets: past the trigger)",
            None,
        ),
        Line(
            "real sessions, all: cost under caching",
            round(ours.cost),
            round(ours.everything_cost),
            "everything",
            "info (targets: per session, past the trigger)",
            None,
        ),
        Line(
            "real sessions: cost floor (every message written once)",
            round(written_once(everything.tokens, everything.cost)),
            round(everything.cost),
            "everything",
            "info",
            None,
        ),
        Line(
            "real sessions: largest request",
            ours.largest,
            everything.largest,
            "everything",
            "info (target: the trigger plus the newest step)",
            None,
        ),
        Line(
            f"real sessions: requests over {trigger:,}",
            ours.over_trigger,
            everything.over_trigger,
            "everything",
            "info",
            None,
        ),
        Line(
            "real sessions: retention probes kept",
            ours.probe_share,
            everything.probe_share,
            "everything",
            "info (targets: the long sessions)",
            None,
            "%",
        ),
        Line(
            "real sessions: broken tool pair or bad start",
            ours.broken + ours.bad_start,
            everything.broken + everything.bad_start,
            "everything",
            "0",
            ours.broken + ours.bad_start == 0,
        ),
        Line(
            "real sessions: conversations with an exception",
            len(ours.exceptions),
            len(everything.exceptions),
            "everything",
            "0",
            not ours.exceptions,
        ),
        Line(
            "conversations costing more than everything",
            costlier,
            0,
            "everything",
            "0 (real and synthetic)",
            costlier == 0,
        ),
        Line(
            "clear_tool_uses: library vs docs, cost",
            round(real_sums[CLEAR_LIBRARY].cost),
            round(real_sums[CLEAR_DOCS].cost),
            "docs",
            "equal (they agree)",
            real_sums[CLEAR_LIBRARY].cost == real_sums[CLEAR_DOCS].cost
            and real_sums[CLEAR_LIBRARY].tokens == real_sums[CLEAR_DOCS].tokens,
        ),
        Line(
            "cost under caching, 300 turns",
            round(s300["ours"]["cost"]),
            round(s300["everything"]["cost"]),
            "everything",
            "<= 6.0%",
            s300["ours"]["cost"] <= 0.06 * s300["everything"]["cost"],
        ),
        Line(
            "cost floor (every message written once), 300 turns",
            round(written_once(s300["everything"]["tokens"], s300["everything"]["cost"])),
            round(s300["everything"]["cost"]),
            "everything",
            "info",
            None,
        ),
        Line(
            "cost under caching vs reference, 300 turns",
            round(s300["ours"]["cost"]),
            round(s300["reference"]["cost"]),
            "reference",
            "info",
            None,
        ),
    ]


# --- Per session: every strategy's figures (the targets: bench/frontier.py) ---


def session_rows(results: dict[str, list[Any]]) -> tuple[list[str], list[list[str]]]:
    """Per session, every strategy as cost / tokens (shares of sending
    everything) / probes kept / requests with a broken tool pair."""
    names = [n for n in results if n != EVERYTHING]
    header = ["session", "calls", "naive largest", "probes"]
    header += [f"{n}: cost / tokens / probes / broken" for n in names]
    rows = []
    for index, base in enumerate(results[EVERYTHING]):
        row = [
            base.conversation,
            str(len(base.meter.requests)),
            f"{base.meter.largest:,}",
            str(base.meter.probes),
        ]
        for name in names:
            outcome = results[name][index]
            if outcome.error or base.error:
                row.append("exception")
                continue
            row.append(
                f"{outcome.cost / base.cost:.2f} / {outcome.meter.tokens / base.meter.tokens:.2f}"
                f" / {outcome.meter.probes_kept} / {outcome.meter.requests_with_broken_pair}"
            )
        rows.append(row)
    return header, rows


def counter_rows(results: dict[str, list[Any]]) -> tuple[list[str], list[list[str]]]:
    """What the strategies that count their own steps did, summed over sessions."""
    header = ["strategy", "steps (summed over the sessions)"]
    rows = []
    for name, outcomes in results.items():
        summed: dict[str, int] = {}
        for outcome in outcomes:
            for key, value in outcome.counters.items():
                summed[key] = summed.get(key, 0) + value
        if summed:
            rows.append([name, ", ".join(f"{k} {v:,}" for k, v in summed.items())])
    return header, rows


def past_trigger(results: dict[str, list[Any]], trigger: int) -> dict[str, float]:
    """Ours and sending everything summed over the sessions whose naive
    context passes the trigger (sessions with an exception left out)."""
    sums = {"sessions": 0, "tokens": 0, "cost": 0.0, "everything_tokens": 0, "everything_cost": 0.0}
    for ours, base in zip(results[OURS], results[EVERYTHING], strict=True):
        if base.meter.largest <= trigger or ours.error or base.error:
            continue
        sums["sessions"] += 1
        sums["tokens"] += ours.meter.tokens
        sums["cost"] += ours.cost
        sums["everything_tokens"] += base.meter.tokens
        sums["everything_cost"] += base.cost
    return sums


def session_lines(results: dict[str, list[Any]], trigger: int) -> list[Line]:
    """Ours past the trigger, for information (the targets: bench/frontier.py)."""
    past = past_trigger(results, trigger)
    return [
        Line(
            f"real sessions past {trigger:,} ({past['sessions']}): input tokens",
            past["tokens"],
            past["everything_tokens"],
            "everything",
            "info",
            None,
        ),
    ]


def offpath_lines(results: list[dict[str, Any]]) -> list[Line]:
    """Summaries off the chat path (docs/benchmarks.rst): with a worker
    process, against the same loop with every summary made inline, once per
    summarizer latency."""
    lines = []
    for result in results:
        lines += _offpath_lines(result)
    return lines


def _offpath_lines(result: dict[str, Any]) -> list[Line]:
    worker, inline = result["worker"], result["inline"]
    latency = f"{result['summarizer_seconds']:g} s summarizer"
    loop = f"{result['turns']} turns x {result['calls_per_turn']} calls, {latency}"
    on_path = worker["chat_path_summaries"] / worker["shifts"] if worker["shifts"] else 0.0
    paid = worker["summarizer_calls"]
    used = worker["summaries_used"] / paid if paid else 1.0
    inline_paid = inline["summarizer_calls"]
    cost_ratio = worker["chat_cost_under_caching"] / max(inline["chat_cost_under_caching"], 1)
    lines = [
        Line(
            f"summaries paid for that were used, worker ({loop})",
            used,
            inline["summaries_used"] / inline_paid if inline_paid else 1.0,
            "inline",
            f">= 90% ({worker['summaries_used']} used of {paid} paid for, "
            f"{worker['summaries_never_used']} never used)",
            used >= 0.9,
            "%",
        ),
        Line(
            f"offline fallbacks, worker ({latency})",
            worker["offline_fallbacks"],
            inline["offline_fallbacks"],
            "inline",
            "0",
            worker["offline_fallbacks"] == 0,
        ),
        Line(
            f"window summaries made on the chat path, worker ({latency})",
            on_path,
            inline["chat_path_summaries"] / inline["shifts"] if inline["shifts"] else 0.0,
            "inline",
            f"<= 10% ({worker['chat_path_summaries']} of {worker['shifts']} shifts)",
            on_path <= 0.1,
            "%",
        ),
    ]
    for quantile in ("p50", "p95", "max"):
        p95 = quantile == "p95"
        lines.append(
            Line(
                f"hook's added time per call, {quantile}, worker ({latency})",
                worker[f"hook_ms_{quantile}"],
                inline[f"hook_ms_{quantile}"],
                "inline",
                "< 200 ms" if p95 else "info",
                worker["hook_ms_p95"] < 200 if p95 else None,
                "ms",
            )
        )
    lines += [
        Line(
            f"requests over the trigger plus the newest step, worker ({latency})",
            worker["requests_over_trigger_plus_newest_step"],
            inline["requests_over_trigger_plus_newest_step"],
            "inline",
            "0",
            worker["requests_over_trigger_plus_newest_step"] == 0,
        ),
        Line(
            f"chat input tokens, worker ({latency})",
            worker["chat_input_tokens"],
            inline["chat_input_tokens"],
            "inline",
            "info (a shift waits for the worker's summary)",
            None,
        ),
        Line(
            f"chat cost under caching, worker ({latency})",
            worker["chat_cost_under_caching"],
            inline["chat_cost_under_caching"],
            "inline",
            f"<= 1.10x inline ({cost_ratio:.2f}x; summarizer input not included)",
            cost_ratio <= 1.10,
        ),
    ]
    return lines
