"""The admin in a real headless browser: Debian's chromium driven by
playwright (the project installs both: requirements/dev.txt and `make test`).

Screenshots go to test-output/; `make screenshots` writes those the
documentation shows to docs/_static/admin/ instead (committed: docs/admin.rst
includes them), so an ordinary run leaves the committed images alone. The
figures (page bytes, pixel heights) are printed for the record.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.utils import timezone

from assistant.models import Conversation
from assistant.services import (
    add_message,
    build_context,
    compact_tool_results,
    regenerate_window_summary,
)
from tests.builders import html, tool_turn
from tests.conftest import wait_until
from tests.scenarios import staff_user, tool_heavy_conversation

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
OUTPUT_DIR = Path(django_settings.BASE_DIR) / "test-output"
DOCS_DIR = (
    Path(django_settings.BASE_DIR) / "docs" / "_static" / "admin"
    if os.environ.get("DOCS_SCREENSHOTS")
    else OUTPUT_DIR
)
# The admin's header colour (--header-bg) once its stylesheet has loaded.
STYLED_HEADER = "rgb(65, 118, 144)"
# Headless as root on a machine with no outside network: no sandbox, no GPU,
# and none of chromium's background connections.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="chromium is not installed (make test installs it)"
)


@pytest.fixture(autouse=True)
def a_worker_is_taken_as_running(settings):
    """The pages as an operator with a running worker sees them (the screenshots
    the docs show): no "no worker" banner, whose own test is in test_health.py."""
    settings.ASSISTANT_HEALTHZ_CHECK_WORKER = False


@pytest.fixture
def browser(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls
    # the test makes between browser steps are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    OUTPUT_DIR.mkdir(exist_ok=True)
    DOCS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 900},
        )
        # Every wait of the page (a navigation, a selector) may take seconds on a loaded
        # machine: the bound only catches a hang.
        context.set_default_timeout(60_000)
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


def log_in(page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-for-tests")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base_url}/admin/")


def header_colour(page) -> str:
    return page.evaluate("getComputedStyle(document.querySelector('#header')).backgroundColor")


def figures(page, response, name: str) -> tuple[int, int]:
    """Bytes of the page's HTML and its full height in pixels, printed."""
    size = len(response.body())
    height = page.evaluate("document.documentElement.scrollHeight")
    print(f"\n{name}: {size} bytes, {height} px")
    return size, height


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def runserver_debug_off():
    """`manage.py runserver` as the docs run it: DEBUG off, the default
    settings, an empty STATIC_ROOT (no collectstatic)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as var_dir:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": "browser-test-key",
            "ASSISTANT_VAR_DIR": var_dir,
        }
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=django_settings.BASE_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60  # a wide bound: only catches a stall
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait(timeout=30)


def test_runserver_with_debug_off_serves_a_styled_admin(runserver_debug_off, browser):
    base_url = runserver_debug_off
    with urllib.request.urlopen(f"{base_url}/static/admin/css/base.css") as css:
        assert css.status == 200
        assert b"--header-bg" in css.read()

    browser.goto(f"{base_url}/admin/login/")

    assert header_colour(browser) == STYLED_HEADER
    browser.screenshot(path=str(OUTPUT_DIR / "login_debug_off.png"))


def test_the_admin_as_an_operator_uses_it(live_server, browser, settings, celery_worker):
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "MIN_RECENT_MESSAGES": 2,
        "CONTEXT_TOKEN_THRESHOLD": 1000,
        "MAX_RECENT_TOKENS": 500,
    }
    staff = staff_user("browser-staff")
    staff.user_permissions.add(Permission.objects.get(codename="delete_conversation"))
    conversation, rows = tool_heavy_conversation(title="Blog admin session")
    compact_tool_results(conversation)
    regenerate_window_summary(conversation)
    gone, _ = tool_heavy_conversation(title="Deleted session")
    Conversation.objects.filter(pk=gone.pk).update(deleted_at=timezone.now())
    page = browser
    log_in(page, live_server.url, "browser-staff")

    # The list: danger at a glance.
    page.goto(f"{live_server.url}/admin/assistant/conversation/")
    assert header_colour(page) == STYLED_HEADER
    row = page.locator(f"#result_list tr:has(input.action-select[value='{conversation.pk}'])")
    assert row.locator("td.field-message_count").inner_text() == "20"
    assert row.locator("td.field-fork_depth").inner_text() == "0"
    deleted_row = page.locator(f"#result_list tr:has(input.action-select[value='{gone.pk}'])")
    assert deleted_row.locator("td.field-status").inner_text().startswith("deleted ")
    assert deleted_row.locator("span.context-near").count() == 1  # 909 tokens: past 80%
    page.click("#toggle-nav-sidebar")
    page.screenshot(path=str(DOCS_DIR / "conversation_list.png"), full_page=True)

    # A confirmation page naming what will change.
    run_from_list(page, conversation, "emergency_compact_level_2")
    assert "go into the window summary" in page.locator("#confirm-rows").inner_text()
    assert page.locator("#on-worker").count() == 1
    page.screenshot(path=str(DOCS_DIR / "confirm_emergency_2.png"), full_page=True)
    page.click("a.cancel-link")

    # The conversation page: the inspector first.
    page.goto(f"{live_server.url}/admin/assistant/conversation/{conversation.pk}/change/")
    inspector = page.locator("#context-inspector")
    inspector.wait_for()
    assert page.locator("#context-inspector .token-bar span").count() == 4
    assert page.locator("#compaction-events tbody tr").count() == 2
    inspector.screenshot(path=str(DOCS_DIR / "context_inspector.png"))

    # Branch: search, choose, land on the fork that shows the whole message.
    page.click("#branch-from-message")
    page.locator("#branch-form").wait_for()
    page.fill("#branch-q", "URL")
    page.click("#branch-search input[type=submit]")
    page.locator("#branch-form").wait_for()
    assert page.locator("input[name=message_id]").count() == 1
    page.screenshot(path=str(DOCS_DIR / "branch_search.png"), full_page=True)
    # The branch's summary calls the summarizer: queued, made by the worker.
    page.click("#branch-form input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/assistant/conversation/{conversation.pk}/change/")
    assert "queued on the worker" in page.locator(".messagelist").inner_text()
    forks = Conversation.objects.filter(parent_conversation=conversation)
    branched = "Branch from a message: branched into #"
    assert wait_until(
        lambda: (
            forks.exists() and LogEntry.objects.filter(change_message__startswith=branched).exists()
        )
    )
    fork = forks.get()
    assert fork.fork_message_id == rows[14].pk
    page.goto(f"{live_server.url}/admin/assistant/conversation/{fork.pk}/change/")
    assert page.locator("#fork-origin pre").inner_text() == rows[14].content
    page.screenshot(path=str(OUTPUT_DIR / "fork_change_page.png"), full_page=True)

    # History: the branch is there, by whom.
    page.goto(f"{live_server.url}/admin/assistant/conversation/{conversation.pk}/history/")
    assert f"{branched}{fork.pk}." in page.locator("#change-history").inner_text()
    assert "browser-staff" in page.locator("#change-history").inner_text()
    page.screenshot(path=str(DOCS_DIR / "history.png"), full_page=True)

    # A deleted conversation: the banner, and a restore.
    page.goto(f"{live_server.url}/admin/assistant/conversation/{gone.pk}/change/")
    assert "This conversation was deleted on" in page.locator("#deleted-banner").inner_text()
    page.screenshot(path=str(OUTPUT_DIR / "deleted_change_page.png"), full_page=True)
    page.click("#restore-deleted")
    page.wait_for_url(f"{live_server.url}/admin/assistant/conversation/")
    assert f"Restored “Deleted session” (#{gone.pk})." in page.locator(".messagelist").inner_text()
    assert Conversation.objects.get(pk=gone.pk).deleted_at is None

    # Restore the compacted originals: the confirmation names the next request.
    run_from_list(page, conversation, "restore_compacted_originals")
    assert (
        "1 compacted message(s) shown verbatim again" in page.locator("#confirm-rows").inner_text()
    )
    page.screenshot(path=str(OUTPUT_DIR / "confirm_restore_originals.png"), full_page=True)
    page.click("input[type=submit][value^=Yes]")
    page.wait_for_url(f"{live_server.url}/admin/assistant/conversation/")
    assert (
        "1 original(s) restored; the next request is" in page.locator(".messagelist").inner_text()
    )

    # Delete the fork: marked deleted, its messages kept.
    run_from_list(page, fork, "delete_selected")
    page.click("input[type=submit][value^=Yes]")
    page.wait_for_url(f"{live_server.url}/admin/assistant/conversation/")
    assert "Marked 1 conversation(s) deleted" in page.locator(".messagelist").inner_text()
    assert Conversation.objects.get(pk=fork.pk).deleted_at is not None
    page.screenshot(path=str(OUTPUT_DIR / "after_delete.png"), full_page=True)


def run_from_list(page, conversation: Conversation, action: str) -> None:
    page.goto(f"{page.url.split('/admin/')[0]}/admin/assistant/conversation/")
    page.locator(f"#result_list input.action-select[value='{conversation.pk}']").check()
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")
    page.locator("#confirm-rows").wait_for()


def test_a_long_conversation_page_and_its_branch_page_stay_light(live_server, browser):
    staff_user("browser-staff")
    conversation = Conversation.objects.create(title="Long", system_prompt="You help.")
    for n in range(130):
        tool_turn(
            conversation,
            f"Question {n} about post {n}",
            [
                ("read_post", {"id": n}, html(3000, f"p{n}")),
                ("read_post", {"id": n + 1000}, html(400)),
            ],
            f"Answer {n}",
        )
    add_message(conversation, "user", "One more question.")
    page = browser
    log_in(page, live_server.url, "browser-staff")

    change_page = f"{live_server.url}/admin/assistant/conversation/{conversation.pk}/change/"
    response = page.goto(change_page)
    size, height = figures(page, response, "change page, 651 messages")
    page.screenshot(path=str(OUTPUT_DIR / "long_change_page.png"))
    assert page.locator("#inspector-messages tbody tr").count() == 30
    # Before: 2.0 MB and 139,000 px (200 inline messages plus every verbatim one).
    assert size < 150_000
    assert height < 20_000

    page.click("#all-messages")
    page.wait_for_url("**/admin/assistant/message/?conversation__exact=*")
    first_id = page.locator("#result_list tbody tr th a").first.inner_text()
    assert first_id == str(conversation.messages.latest("id").pk)
    page.screenshot(path=str(OUTPUT_DIR / "message_list.png"))

    page.goto(change_page)
    page.click("#branch-from-message")
    page.locator("#branch-form").wait_for()
    assert page.locator("input[name=message_id]").count() == 50
    height = page.evaluate("document.documentElement.scrollHeight")
    print(f"branch page, 131 user messages: {len(page.content().encode())} bytes, {height} px")
    page.screenshot(path=str(OUTPUT_DIR / "branch_page.png"))


# Every table in the page's content whose box (its parent) scrolls sideways:
# the table is wider than the room it has, and its last columns are clipped.
OVERFLOWING_TABLES = """() => [...document.querySelectorAll('#content table')]
    .map(table => [table.id || table.className || table.parentElement.id,
                   table.parentElement.scrollWidth, table.parentElement.clientWidth])
    .filter(([, scroll, box]) => scroll > box)"""


# Every control in the page's content (links, buttons, fields) that is drawn but not
# wholly in sight: past the viewport's sides, or past the sides of a box around it that
# clips or scrolls (a table wider than its box hides its last columns' buttons).
CLIPPED_CONTROLS = """() => {
  const width = document.documentElement.clientWidth;
  const controls = document.querySelectorAll(
    '#content a, #content button, #content input:not([type=hidden]), #content select, '
    + '#content textarea');
  const clipped = [];
  for (const control of controls) {
    const own = control.getBoundingClientRect();
    if (own.width === 0 && own.height === 0) continue;  // not drawn (a collapsed fieldset)
    let outside = own.left < 0 || own.right > width + 0.5;
    for (let box = control.parentElement; box && !outside; box = box.parentElement) {
      if (getComputedStyle(box).overflowX === 'visible') continue;
      const room = box.getBoundingClientRect();
      outside = own.left < room.left - 0.5 || own.right > room.right + 0.5;
    }
    if (outside) clipped.push((control.id || control.className || control.tagName) + ': '
      + (control.innerText || control.value || '').trim().slice(0, 30));
  }
  return clipped;
}"""


# Every text block (pre) in the page's content, collapsed sections opened, whose lines
# run past a box that clips them with no scrollbar (a pre as wide as its lines never
# scrolls) (the window state's summary line once
# ran 1,500 px past the Bookkeeping section's edge, cut off).
CLIPPED_TEXT = """() => {
  document.querySelectorAll('#content details').forEach(details => { details.open = true; });
  const clipped = [];
  for (const pre of document.querySelectorAll('#content pre')) {
    const own = pre.getBoundingClientRect();
    if (own.width === 0 && own.height === 0) continue;
    // A pre that scrolls shows its own box; one that does not, all of its lines.
    const scrolls = ['auto', 'scroll'].includes(getComputedStyle(pre).overflowX);
    const right = scrolls ? own.right : Math.max(own.right, own.left + pre.scrollWidth);
    for (let box = pre.parentElement; box; box = box.parentElement) {
      if (getComputedStyle(box).overflowX === 'visible') continue;
      if (right > box.getBoundingClientRect().right + 0.5) {
        clipped.push((pre.closest('[class*=field-], [id]') || pre).className || pre.id);
      }
      break;
    }
  }
  return clipped;
}"""


def identical_two_turns(title: str) -> Conversation:
    conversation = Conversation.objects.create(title=title, system_prompt="You help.")
    for n, prompt in enumerate((1003, 2103)):
        add_message(conversation, "user", f"{n}" * 4000)
        add_message(conversation, "assistant", "A" * 400, input_tokens=prompt, output_tokens=100)
    return conversation


@pytest.mark.parametrize("width", [1440, 1280])
def test_every_list_and_page_fits_its_box_and_identical_conversations_read_alike(
    live_server, browser, settings, width
):
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "MIN_RECENT_MESSAGES": 2,
        "CONTEXT_TOKEN_THRESHOLD": 1000,
        "MAX_RECENT_TOKENS": 500,
    }
    admin_user = get_user_model().objects.create_superuser(
        "operator-with-a-long-name", "operator@example.com", "pw-for-tests"
    )
    conversation, _ = tool_heavy_conversation(title="A blog admin session with a longer title")
    Conversation.objects.filter(pk=conversation.pk).update(user=admin_user)
    compact_tool_results(conversation)
    regenerate_window_summary(conversation)
    first, second = identical_two_turns("Same chat"), identical_two_turns("Same chat")
    event = conversation.compaction_events.first()
    message = conversation.messages.first()
    version = conversation.summary_versions.get()
    page = browser
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, live_server.url, admin_user.username)
    admin = f"{live_server.url}/admin/assistant"
    pages = {
        "summary history": f"{admin}/summaryversion/?conversation__id__exact={conversation.pk}",
        "summary version page": f"{admin}/summaryversion/{version.pk}/change/",
        "summary correction": f"{admin}/summaryversion/correct/{conversation.pk}/",
        "conversation list": f"{admin}/conversation/",
        "message list": f"{admin}/message/",
        "event list": f"{admin}/compactionevent/",
        "costs": f"{admin}/conversation/costs/",
        "conversation page": f"{admin}/conversation/{conversation.pk}/change/",
        "message page": f"{admin}/message/{message.pk}/change/",
        "event page": f"{admin}/compactionevent/{event.pk}/change/",
    }

    overflowing, clipped, cut_text = {}, {}, {}
    for name, url in pages.items():
        page.goto(url)
        overflowing[name] = page.evaluate(OVERFLOWING_TABLES)
        clipped[name] = page.evaluate(CLIPPED_CONTROLS)
        cut_text[name] = page.evaluate(CLIPPED_TEXT)
        page.screenshot(path=str(OUTPUT_DIR / f"{name.replace(' ', '_')}_{width}.png"))

    assert overflowing == {name: [] for name in pages}
    # Nothing is cut off at 1280 px: the summary history's "text and diff / Revert /
    # Mark reviewed" once were (a 762 px table in a 685 px box).
    assert clipped == {name: [] for name in pages}
    assert cut_text == {name: [] for name in pages}
    page.goto(pages["conversation list"])
    rows = [
        page.locator(f"#result_list tr:has(input.action-select[value='{pk}'])")
        for pk in (first.pk, second.pk)
    ]
    cells = [
        [row.locator(f"td.field-{column}").inner_text() for column in ("message_count", "cost")]
        for row in rows
    ]
    assert cells[0] == cells[1] == ["4", "$0.0123 ·\n0%"]


def test_staff_correct_a_summary_and_bring_the_earlier_version_back(live_server, browser, settings):
    """The admin walk of the summary's review: staff read the summary, correct it (the next
    request carries the correction, their name on the version), see the history
    with split, model and cost, open what the compaction dropped, mark a version
    reviewed, and bring the earlier version back with one click."""
    settings.ASSISTANT_COMPACTION = {
        "VERBATIM_AFTER_SHIFT": "recent",
        "MIN_RECENT_MESSAGES": 2,
        "CONTEXT_TOKEN_THRESHOLD": 1000,
        "MAX_RECENT_TOKENS": 500,
    }
    staff_user("summary-staff")
    conversation, _ = tool_heavy_conversation(title="Summary review session")
    assert regenerate_window_summary(conversation)
    model_text = build_context(conversation).window_summary
    page = browser
    log_in(page, live_server.url, "summary-staff")

    page.goto(f"{live_server.url}/admin/assistant/conversation/{conversation.pk}/change/")
    assert page.locator("#window-summary").inner_text().strip() == model_text
    with page.expect_navigation():
        page.click("#correct-summary")
    corrected = model_text.replace("## Goal", "## Goal\n- Staff note: post 42 is the homepage.")
    page.fill("#id_text", corrected)
    with page.expect_navigation():
        page.click("#save-correction")

    # The history list: the correction on top, with the acting user.
    page.wait_for_selector("#result_list")
    assert "one click from coming back" in page.locator("ul.messagelist").inner_text()
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 2
    assert "Corrected by staff" in rows.nth(0).inner_text()
    assert "summary-staff" in rows.nth(0).inner_text()
    assert "Written by the summarizer" in rows.nth(1).inner_text()
    sent_now = [rows.nth(i).locator("td.field-current img").get_attribute("alt") for i in (0, 1)]
    assert sent_now == ["True", "False"]
    assert "message " in rows.nth(1).locator("td.field-split").inner_text()
    assert build_context(conversation).window_summary == corrected
    request = json.loads(
        page.goto(f"{live_server.url}/admin/assistant/conversation/{conversation.pk}/request.json")
        .body()
        .decode()
    )
    assert "Staff note: post 42 is the homepage." in json.dumps(request["system"])
    page.go_back()
    page.screenshot(path=str(DOCS_DIR / "summary_history.png"), full_page=True)

    # What the model's compaction dropped, as a diff of the request.
    with page.expect_navigation():
        rows.nth(1).locator("a", has_text="text and diff").click()
    page.wait_for_selector("#compaction-diff")
    assert page.locator("#compaction-diff .diff-del").count() > 0
    assert "Fix post 42" in page.locator("#compaction-diff").inner_text()
    with page.expect_navigation():
        page.click("#back-to-history")

    # Reviewed: who and when, in the list.
    with page.expect_navigation():
        page.locator("#result_list tbody tr").nth(1).locator("button.summary-review").click()
    page.wait_for_selector("#result_list")
    assert "by summary-staff" in page.locator("#result_list tbody tr").nth(1).inner_text()
    for width in (1280, 1440):  # a reviewed row, a correction: every control in sight
        page.set_viewport_size({"width": width, "height": 800})
        assert page.evaluate(CLIPPED_CONTROLS) == []
        page.screenshot(path=str(OUTPUT_DIR / f"summary_history_reviewed_{width}.png"))
    page.set_viewport_size({"width": 1440, "height": 900})

    # One click brings the model's version back, as a new version: nothing is lost.
    with page.expect_navigation():
        page.locator("#result_list tbody tr").nth(1).locator("button.summary-revert").click()
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 3
    assert "Reverted" in page.locator("#result_list tbody tr").nth(0).inner_text()
    assert build_context(conversation).window_summary == model_text
    # Each step is in the conversation's History, by whom.
    entries = LogEntry.objects.filter(
        object_id=str(conversation.pk), user__username="summary-staff"
    )
    said = " ".join(entries.values_list("change_message", flat=True))
    assert "corrected summary is version" in said and "marked reviewed" in said
    assert "is the current summary again" in said
