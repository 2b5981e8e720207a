"""The cost lines and the synthetic per-conversation table of `make bench`
(DESIGN section 7: cost under prompt caching; issues 10 and 17)."""

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
    """The targets of DESIGN section 7 on real sessions and on cost (issues 10 and 17)."""
    ours, everything = real_sums[OURS], real_sums[EVERYTHING]
    s300 = synthetic["300 turns"]
    costlier = len(ours.costlier) + sum(
        figures["ours"]["cost"] > figures["everything"]["cost"] for figures in synthetic.values()
    )
    return [
        Line(
            "real sessions: input tokens",
            ours.tokens,
            ours.everything_tokens,
            "everything",
            "<= 25%",
            ours.token_ratio is not None and ours.token_ratio <= 0.25,
        ),
        Line(
            "real sessions: cost under caching",
            round(ours.cost),
            round(ours.everything_cost),
            "everything",
            "<= 35%",
            ours.cost_ratio is not None and ours.cost_ratio <= 0.35,
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
            "<= 55,000",
            ours.largest <= 55_000,
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
            ">= 97%",
            ours.probe_share >= 0.97,
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
            "<= 4.5%",
            s300["ours"]["cost"] <= 0.045 * s300["everything"]["cost"],
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


def offpath_lines(result: dict[str, Any]) -> list[Line]:
    """Summaries off the chat path (DESIGN 7, issue 22): with a worker
    process, against the same loop with every summary made inline."""
    worker, inline = result["worker"], result["inline"]
    loop = f"{result['turns']} turns x {result['calls_per_turn']} calls"
    on_path = worker["chat_path_summaries"] / worker["shifts"] if worker["shifts"] else 0.0
    lines = [
        Line(
            f"window summaries made on the chat path, worker ({loop})",
            on_path,
            inline["chat_path_summaries"] / inline["shifts"] if inline["shifts"] else 0.0,
            "inline",
            f"<= 10% ({worker['chat_path_summaries']} of {worker['shifts']}; "
            f"summarizer calls {worker['summarizer_calls']})",
            on_path <= 0.1,
            "%",
        )
    ]
    for quantile in ("p50", "p95", "max"):
        lines.append(
            Line(
                f"hook's added time per call, {quantile}, 2 s summarizer",
                worker[f"hook_ms_{quantile}"],
                inline[f"hook_ms_{quantile}"],
                "inline",
                "info",
                None,
                "ms",
            )
        )
    lines.append(
        Line(
            "requests over the trigger plus the newest step, worker loop",
            worker["requests_over_trigger_plus_newest_step"],
            inline["requests_over_trigger_plus_newest_step"],
            "inline",
            "0",
            worker["requests_over_trigger_plus_newest_step"] == 0,
        )
    )
    lines.append(
        Line(
            "chat input tokens, worker loop",
            worker["chat_input_tokens"],
            inline["chat_input_tokens"],
            "inline",
            "info (a shift waits for the worker's summary)",
            None,
        )
    )
    lines.append(
        Line(
            "chat cost under caching, worker loop",
            worker["chat_cost_under_caching"],
            inline["chat_cost_under_caching"],
            "inline",
            "info (summarizer input not included)",
            None,
        )
    )
    return lines
