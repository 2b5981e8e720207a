"""Costs in a real headless browser (Debian's chromium through playwright, as
tests/test_admin_browser.py): the list at 1440 px, a conversation page with
its cost chart, and the totals page; every figure equal to what this test
computes from the recorded usage. Screenshots go to a temporary directory
(printed)."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.db.models import F

from assistant.models import CompactionEvent, Conversation, Message
from assistant.services import compact_tool_results
from tests.scenarios import staff_user, tool_heavy_conversation
from tests.test_admin_browser import CHROMIUM, browser, log_in  # noqa: F401 (fixture)
from tests.test_cost import priced_conversation

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="chromium is not installed (make test installs it)"
)

# USD per million tokens: claude-sonnet-4-6 (chat) and claude-haiku-4-5 (summarizer).
SONNET = {"input": 3.0, "output": 15.0, "read": 0.3, "write": 3.75}
HAIKU = {"input": 1.0, "output": 5.0}


def money(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 else f"${value:.4f}"


def expected(conversation: Conversation) -> dict[str, float]:
    """Chat, summarizer and sending-everything costs, from the rows: each
    call as reported, and for sending everything the same call plus what
    compaction had taken out of its prompt (the whole history's original
    estimates less the context after the latest compaction plus what came
    since), the previous call's share of it read from the cache (calls are
    seconds apart)."""
    chat = everything = 0.0
    history = len(conversation.system_prompt) // 4 + (len(conversation.system_prompt) % 4 > 0)
    sent, previous = history, 0
    events = list(conversation.compaction_events.order_by("created_at"))
    for row in Message.objects.filter(conversation=conversation).order_by("id"):
        while events and events[0].created_at <= row.created_at:
            sent = events.pop(0).tokens_after
        if row.role == "assistant" and row.input_tokens is not None:
            read, write = row.cache_read_tokens or 0, row.cache_write_tokens or 0
            paid = (
                row.input_tokens * SONNET["input"]
                + read * SONNET["read"]
                + write * SONNET["write"]
                + row.output_tokens * SONNET["output"]
            )
            removed = max(0, history - sent)
            cached = min(previous, removed)
            chat += paid
            everything += paid + cached * SONNET["read"] + (removed - cached) * SONNET["write"]
            previous = removed
        history += row.original_token_estimate
        sent += row.original_token_estimate
    summarizer = sum(
        e.summarizer_input_tokens * HAIKU["input"] + e.summarizer_output_tokens * HAIKU["output"]
        for e in CompactionEvent.objects.filter(conversation=conversation)
    )
    return {
        "chat": chat / 1e6,
        "summarizer": summarizer / 1e6,
        "everything": everything / 1e6,
        "total": (chat + summarizer) / 1e6,
    }


def saved(figures: dict[str, float]) -> str:
    return f"{round(100 * (1 - figures['total'] / figures['everything']))}%"


def test_an_operator_sees_cost_and_savings_in_the_list_the_chart_and_the_totals(
    live_server,
    browser,  # noqa: F811
):
    shots = Path(tempfile.mkdtemp(prefix="admin-costs-"))
    print(f"\nscreenshots: {shots}")
    staff = staff_user("cost-staff")
    staff.user_permissions.add(Permission.objects.get(codename="view_compactionevent"))
    priced, _ = priced_conversation("newcomer 6 turns")
    old, _ = priced_conversation("newcomer 6 turns")
    # Ten days older, its messages and its summary in the same order.
    Message.objects.filter(conversation=old).update(created_at=F("created_at") - timedelta(days=10))
    old.compaction_events.update(created_at=F("created_at") - timedelta(days=10))
    plain, _ = tool_heavy_conversation(
        title="A conversation with a rather long title, as users write"
    )
    compact_tool_results(plain)
    figures = expected(priced)
    page = browser
    log_in(page, live_server.url, "cost-staff")

    # The list: cost and saving per conversation, every column within 1440 px.
    page.goto(f"{live_server.url}/admin/assistant/conversation/")
    for conversation in (priced, old):
        row = page.locator(f"#result_list tr:has(input.action-select[value='{conversation.pk}'])")
        assert row.locator("td.field-cost").inner_text() == (
            f"{money(figures['total'])} ·\n{saved(figures)}"
        )
    plain_row = page.locator(f"#result_list tr:has(input.action-select[value='{plain.pk}'])")
    assert plain_row.locator("td.field-cost").inner_text() == "—"
    page.screenshot(path=str(shots / "conversation_list.png"), full_page=True)
    # Nothing scrolls sideways: neither the page nor the table's own box.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    results = "document.querySelector('#changelist-form .results')"
    assert page.evaluate(f"{results}.scrollWidth <= {results}.clientWidth")
    least = page.evaluate(
        "(() => { const t = document.querySelector('#result_list'); t.style.width = 'min-content';"
        " const w = t.offsetWidth; t.style.width = ''; return w; })()"
    )
    print(f"list table: at least {least} px, in a {page.evaluate(f'{results}.clientWidth')} px box")

    # A conversation page: the figures and the chart (3 calls, 1 compaction).
    page.goto(f"{live_server.url}/admin/assistant/conversation/{priced.pk}/change/")
    text = page.locator("#cost-figures").inner_text()
    assert text.startswith(
        f"{money(figures['total'])} ({money(figures['chat'])} for 3 chat call(s), "
        f"{money(figures['summarizer'])} for the summarizer: 100 tokens in, 20 out)"
    )
    assert f"against {money(figures['everything'])} for sending everything" in text
    assert page.locator("#cost-saved").inner_text() == saved(figures)
    # Bars: 120 input; 100 read + 110 written + 20 input; 60 written + 5 input.
    assert page.locator("#cost-chart rect").count() == 6
    assert page.locator("#cost-chart line.compaction-mark").count() == 1
    assert page.locator("#cost-chart #everything-line").count() == 1
    # The scale is the conversation's own largest prompt; sending everything is a figure on it.
    assert page.locator("#cost-chart text").first.text_content() == "230"
    assert page.locator("#everything-peak").text_content() == "sending everything: up to 230 tokens"
    page.locator("#cost-section").screenshot(path=str(shots / "cost_chart.png"))
    events = page.locator("#compaction-events tbody tr td.summarizer-tokens")
    assert events.all_inner_texts() == ["100 / 20"]

    # The events list names each conversation by id.
    page.goto(f"{live_server.url}/admin/assistant/compactionevent/")
    assert (
        page.locator(
            f"td.field-conversation_link a:text-is('#{priced.pk} newcomer 6 turns')"
        ).count()
        == 1
    )
    assert page.locator(f"a[href$='/conversation/{old.pk}/change/']").count() == 1

    # The totals page: by period, the summarizer apart.
    page.goto(f"{live_server.url}/admin/assistant/conversation/")
    page.click("#costs-link")
    page.wait_for_url("**/admin/assistant/conversation/costs/")
    rows = {r.locator("th").inner_text(): r for r in page.locator("#cost-totals tbody tr").all()}
    for label in ("Last 24 hours", "Last 7 days"):
        assert rows[label].locator("td.calls").inner_text() == "3"
        assert rows[label].locator("td.chat").inner_text() == money(figures["chat"])
        assert rows[label].locator("td.summarizer").inner_text() == money(figures["summarizer"])
        assert rows[label].locator("td.summarizer-tokens").inner_text() == "100 / 20"
        assert rows[label].locator("td.everything").inner_text() == money(figures["everything"])
        assert rows[label].locator("td.saved").inner_text() == saved(figures)
    for label in ("Last 30 days", "All time"):
        assert rows[label].locator("td.calls").inner_text() == "6"
        assert rows[label].locator("td.total").inner_text() == money(2 * figures["total"])
        assert rows[label].locator("td.summarizer-tokens").inner_text() == "200 / 40"
    page.screenshot(path=str(shots / "cost_totals.png"), full_page=True)
