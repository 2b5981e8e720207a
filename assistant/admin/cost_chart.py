"""The conversation page's cost section: what it cost against sending
everything, and a per-call chart of the prompt (cache reads, cache writes,
uncached input; sending everything as a line; compactions marked), drawn as
inline SVG on the server: no script, no dependency."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from assistant.cost import Call, Cost, conversation_cost
from assistant.history import cache_hits, measures, token_change
from assistant.models import CompactionEvent, Conversation

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 960, 240, 56, 24, 10
CALLS_DRAWN = 400  # the newest ones: the page stays light however long the conversation
COLOURS = {"read": "#16a34a", "write": "#f59e0b", "input": "#2563eb"}


def money(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 else f"${value:.4f}"


def cost_money(cost: Cost) -> dict[str, str]:
    """The figures of a cost as every admin page shows them (the list, the
    conversation page, the costs page): money, counts with thousands
    separators, and the saving. An estimated cost reads "≈" before its money
    and "(estimated)" after its saving, the reason in `estimated`."""
    approx = "≈" if cost.estimated else ""
    return {
        "chat": approx + money(cost.chat),
        "summarizer": money(cost.summarizer),
        "total": approx + money(cost.total),
        "everything": money(cost.everything),
        "saved": saved_text(cost),
        "calls": f"{cost.calls:,}",
        "summarizer_input_tokens": f"{cost.summarizer_input_tokens:,}",
        "summarizer_output_tokens": f"{cost.summarizer_output_tokens:,}",
        "embedding": money(cost.embedding),
        "embedding_tokens": f"{cost.embedding_tokens:,}",
        "estimated": cost.estimated or "",
    }


def saved_text(cost: Cost) -> str:
    share = cost.saved_share
    if share is None:
        return "—"
    return f"{round(100 * share)}%" + (" (estimated)" if cost.estimated else "")


def cost_section(conversation: Conversation) -> dict[str, Any]:
    cost, calls = conversation_cost(conversation)
    rows = list(
        conversation.compaction_events.order_by("created_at", "id").values_list(
            "created_at", "kind", "tokens_before", "tokens_after", "details"
        )
    )
    # A cache break is no compaction: counted beside the cache figures, never drawn.
    events = [row for row in rows if row[1] != CompactionEvent.Kind.CACHE_BREAK]
    drawn = calls[-CALLS_DRAWN:]
    if drawn:
        events = [event for event in events if event[0] >= drawn[0].at]
    return {
        "cost": cost,
        "money": cost_money(cost),
        "saved": saved_text(cost),
        "calls_total": len(calls),
        "calls_drawn": len(drawn),
        "chart": chart(drawn, events) if drawn else "",
        "calls_total_text": f"{len(calls):,}",
        "calls_drawn_text": f"{len(drawn):,}",
        "cache_read_tokens": f"{sum(call.cache_read_tokens for call in calls):,}",
        "cache_write_tokens": f"{sum(call.cache_write_tokens for call in calls):,}",
        "cache_hits": cache_hits(conversation.pk),
        "cache_breaks": len(rows) - len(events),
    }


def chart(calls: list[Call], events: list[tuple]) -> SafeString:
    """Bars per call (stacked: cache read, cache write, uncached input) on a
    scale of the conversation's own prompts, the prompt of sending
    everything as a dashed line (held at the top where it runs above the
    scale, its largest figure written there), and a red rule before the
    first call after each compaction."""
    peak = max(c.priced_prompt_tokens for c in calls) or 1
    everything_peak = max(c.everything_tokens for c in calls)
    plot_w, plot_h = WIDTH - LEFT - 8, HEIGHT - BOTTOM - TOP
    step = plot_w / len(calls)
    bar = max(step * 0.8, 1)
    rects, points = _bars(calls, peak, step, bar, plot_h)
    marks = _marks(calls, events, step, bar)
    bars = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
        rects,
    )
    rules = format_html_join(
        "",
        '<line class="compaction-mark" x1="{0}" x2="{0}" y1="' + str(TOP) + '" y2="'
        f'{TOP + plot_h}" stroke="#dc2626" stroke-width="1.5"><title>{{1}}</title></line>',
        marks,
    )
    return format_html(
        '<svg id="cost-chart" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        'viewBox="0 0 {w} {h}" role="img" aria-label="Prompt tokens per call">'
        '<text x="4" y="{top_label}" font-size="11" fill="#6b7280">{peak}</text>'
        '<text x="4" y="{zero}" font-size="11" fill="#6b7280">0</text>'
        '<text id="everything-peak" x="{right}" y="{top_label}" font-size="11" fill="#6b7280" '
        'text-anchor="end">sending everything: up to {everything_peak} tokens</text>'
        '<line x1="{left}" x2="{right}" y1="{zero_y}" y2="{zero_y}" stroke="#9ca3af"/>'
        "{bars}{rules}"
        '<polyline id="everything-line" points="{points}" fill="none" stroke="#6b7280" '
        'stroke-dasharray="4 3" stroke-width="1.5"><title>sending everything</title></polyline>'
        '<text x="{left}" y="{bottom_label}" font-size="11" fill="#6b7280">call 1</text>'
        '<text x="{right}" y="{bottom_label}" font-size="11" fill="#6b7280" '
        'text-anchor="end">call {n}</text></svg>',
        w=WIDTH,
        h=HEIGHT,
        top_label=TOP + 10,
        peak=f"{peak:,}",
        everything_peak=f"{everything_peak:,}",
        zero=TOP + plot_h,
        zero_y=TOP + plot_h,
        left=LEFT,
        right=WIDTH - 8,
        bars=bars,
        rules=rules,
        points=mark_safe(" ".join(points)),  # numbers only
        bottom_label=HEIGHT - 6,
        n=len(calls),
    )


def _bars(
    calls: list[Call], peak: int, step: float, bar: float, plot_h: int
) -> tuple[list[tuple[str, str, str, str, str, str]], list[str]]:
    """Each call's stacked rectangles, and its point on the sending-everything line."""

    def y(tokens: float) -> float:
        return TOP + plot_h * (1 - tokens / peak)

    rects, points = [], []
    for index, call in enumerate(calls):
        x = LEFT + index * step
        base = 0
        for key, tokens in (
            ("read", call.cache_read_tokens),
            ("write", call.cache_write_tokens),
            ("input", call.input_tokens),
        ):
            if tokens:
                rects.append(
                    (
                        f"{x:.1f}",
                        f"{y(base + tokens):.1f}",
                        f"{bar:.1f}",
                        f"{plot_h * tokens / peak:.1f}",
                        COLOURS[key],
                        f"call {index + 1} (message #{call.message_id}): {key} {tokens:,}",
                    )
                )
            base += tokens
        points.append(f"{x + bar / 2:.1f},{y(min(call.everything_tokens, peak)):.1f}")
    return rects, points


def _marks(
    calls: list[Call], events: list[tuple], step: float, bar: float
) -> list[tuple[str, str]]:
    """Each compaction's rule: its x and its title."""
    times = [call.at for call in calls]
    marks = []
    for at, kind, before, after, details in events:
        # Before the first call made after it (at the right end when none was).
        x = LEFT + bisect_left(times, at) * step - (step - bar) / 2
        measured = measures(CompactionEvent(kind=kind, details=details))
        marks.append((f"{x:.1f}", f"{kind}, {token_change(before, after, measured)}"))
    return marks
