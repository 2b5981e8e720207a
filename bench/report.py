"""The table, the JSON file and the chart."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
# The documentation includes these (docs/benchmarks.rst): committed, rewritten by each run.
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks"


@dataclass
class Line:
    measure: str
    ours: float | int | None
    baseline: float | int | None
    baseline_name: str
    target: str
    passed: bool | None  # None: no target, reported for information
    unit: str = ""  # "%" shows shares as percentages

    @property
    def ratio(self) -> float | None:
        if self.ours is None or not self.baseline:
            return None
        return self.ours / self.baseline


def _fmt(value: float | int | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "%":
        return f"{value * 100:.1f}%"
    if unit == "ms":
        return f"{value:.2f} ms"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def _ratio(line: Line) -> str:
    ratio = line.ratio
    if ratio is None:
        return "—"
    if ratio < 0.1:
        return f"{ratio * 100:.2f}%"
    return f"{ratio:.2f}x"


def line_rows(lines: list[Line]) -> tuple[list[str], list[list[str]]]:
    header = ["measure", "ours", "baseline", "ratio", "target", ""]
    rows = [
        [
            line.measure,
            _fmt(line.ours, line.unit),
            f"{_fmt(line.baseline, line.unit)} ({line.baseline_name})",
            _ratio(line),
            line.target,
            {True: "pass", False: "MISS", None: "info"}[line.passed],
        ]
        for line in lines
    ]
    return header, rows


def table(lines: list[Line]) -> str:
    header, rows = line_rows(lines)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for n, row in enumerate([header, *rows]):
        out.append(" | ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            out.append("-+-".join("-" * w for w in widths))
    return "\n".join(out)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table (docs/benchmarks.rst includes the file of them)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def write_markdown(sections: list[tuple[str, str]], path: Path | None = None) -> Path:
    """The run's tables as Markdown (title, table): the page the docs include."""
    path = path or DOCS / "results.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(f"{title}\n\n{body}" for title, body in sections) + "\n")
    return path


def write_json(lines: list[Line], details: dict[str, Any], path: Path | None = None) -> Path:
    path = path or RESULTS / "latest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "lines": [{**asdict(line), "ratio": line.ratio} for line in lines],
        **details,
    }
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
    return path


def write_chart(
    series: dict[str, list[int]],
    trigger: int,
    lines: list[Line],
    real: dict[str, tuple[float | None, float | None]] | None = None,
    per_conversation: dict[str, list[float | None]] | None = None,
    path: Path | None = None,
) -> Path:
    """Top left: context tokens at each model call of the 300-turn replay. Top
    right: ours as a share of the baseline for the ratio measures. Bottom
    (real sessions): each strategy's input tokens and cost under caching as a
    share of sending everything, and each conversation's cost share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = path or DOCS / "performance.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 2 if real else 1
    fig, axes = plt.subplots(
        rows, 2, figsize=(15, 6 * rows), width_ratios=(3, 2), layout="constrained", squeeze=False
    )
    left, right = axes[0]
    for name, values in series.items():
        left.plot(range(1, len(values) + 1), values, label=name, linewidth=1.2)
    left.axhline(trigger, color="grey", linestyle="--", linewidth=1, label=f"trigger ({trigger:,})")
    left.set_yscale("log")
    left.set_xlabel("model call")
    left.set_ylabel("input tokens of the request")
    left.set_title("Context sent at each model call (synthetic, 300 turns)")
    left.legend(loc="upper left", fontsize=8)
    left.grid(True, which="both", alpha=0.3)

    shown = [line for line in lines if line.ratio and line.unit != "%"]
    labels = [line.measure for line in shown]
    ratios = [line.ratio for line in shown]
    colours = [
        {True: "tab:green", False: "tab:red", None: "tab:blue"}[line.passed] for line in shown
    ]
    bars = right.barh(range(len(shown)), ratios, color=colours)
    right.set_yticks(range(len(shown)), labels, fontsize=7)
    right.invert_yaxis()
    right.set_xscale("log")
    right.axvline(1.0, color="grey", linewidth=1)
    right.set_xlabel("ours / baseline (log; green pass, red miss, blue info)")
    right.set_title("Ratios against the baselines")
    for bar, ratio in zip(bars, ratios, strict=True):
        right.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {ratio:.3g}",
            va="center",
            fontsize=7,
        )
    if real:
        _real_panels(axes[1], real, per_conversation or {})
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _real_panels(
    axes: Any,
    real: dict[str, tuple[float | None, float | None]],
    per_conversation: dict[str, list[float | None]],
) -> None:
    strategies, conversations = axes
    names = list(real)
    width = 0.4
    for offset, (label, index) in enumerate((("input tokens", 0), ("cost under caching", 1))):
        values = [real[name][index] or 0 for name in names]
        bars = strategies.bar(
            [i + (offset - 0.5) * width for i in range(len(names))], values, width, label=label
        )
        for bar, value in zip(bars, values, strict=True):
            strategies.text(
                bar.get_x() + bar.get_width() / 2,
                value,
                f"{value:.2f}",
                ha="center",
                va="bottom",
                fontsize=7,
            )
    strategies.axhline(1.0, color="grey", linewidth=1)
    strategies.set_xticks(range(len(names)), names, fontsize=7, rotation=15)
    strategies.set_ylabel("share of sending everything (summed over conversations)")
    strategies.set_title("Real agent sessions: every strategy, one run")
    strategies.legend(fontsize=8)
    strategies.grid(True, axis="y", alpha=0.3)

    for name, values in per_conversation.items():
        points = [(i, v) for i, v in enumerate(values) if v is not None]
        conversations.plot(
            [p[0] for p in points], [p[1] for p in points], "o", label=name, markersize=4
        )
    conversations.axhline(1.0, color="grey", linewidth=1)
    conversations.set_xlabel("conversation (order of the per-conversation table)")
    conversations.set_ylabel("cost under caching / sending everything")
    conversations.set_title(
        "Cost per conversation (above 1: more than sending everything)", fontsize=9
    )
    conversations.legend(fontsize=7)
    conversations.grid(True, alpha=0.3)
