"""The admin in a real headless browser: Debian's chromium driven by
playwright (the project installs both: requirements/dev.txt and `make test`).

Open a conversation, run "Branch from a message…", land on the fork, and
save a screenshot of the context inspector to test-output/.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from assistant.models import Conversation
from tests.scenarios import staff_user, tool_heavy_conversation

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
OUTPUT_DIR = Path(django_settings.BASE_DIR) / "test-output"
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


@pytest.fixture
def browser(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls
    # the test makes between browser steps are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        context.set_default_timeout(20_000)
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


def test_branch_from_a_message_in_a_real_browser(live_server, browser, settings):
    settings.ASSISTANT_COMPACTION = {"MIN_RECENT_MESSAGES": 2}
    staff_user("browser-staff")
    conversation, rows = tool_heavy_conversation(title="Blog admin session")
    from assistant.services import regenerate_window_summary

    regenerate_window_summary(conversation)
    page = browser

    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "browser-staff")
    page.fill("#id_password", "pw-for-tests")
    page.click("input[type=submit]")
    page.goto(f"{live_server.url}/admin/assistant/conversation/")
    row = page.locator(f"#result_list tr:has(a[href$='/{conversation.pk}/change/'])")
    assert row.locator("td.field-message_count").inner_text() == "20"
    OUTPUT_DIR.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT_DIR / "conversation_list.png"))
    row.locator("th a").click()

    inspector = page.locator("#context-inspector")
    inspector.wait_for()
    assert page.locator("#context-inspector .token-bar span").count() == 4
    assert page.locator("#compaction-events tbody tr").count() == 1
    inspector.screenshot(path=str(OUTPUT_DIR / "context_inspector.png"))

    page.click("#branch-from-message")
    page.locator("#branch-form").wait_for()
    user_rows = [m for m in rows if m.role == "user"]
    assert page.locator("input[name=message_id]").count() == len(user_rows)
    page.check(f"#message-{rows[14].pk}")
    page.click("#branch-form input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/assistant/conversation/*/change/")

    fork = Conversation.objects.get(parent_conversation=conversation)
    assert page.url == f"{live_server.url}/admin/assistant/conversation/{fork.pk}/change/"
    assert fork.fork_message_id == rows[14].pk
    assert "Message to edit and resend: Check the URL" in page.locator(".messagelist").inner_text()
    assert page.locator("#id_title").input_value() == "Blog admin session (fork)"
    page.screenshot(path=str(OUTPUT_DIR / "fork_change_page.png"), full_page=True)
