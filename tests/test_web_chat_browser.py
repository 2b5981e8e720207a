"""The demo's streaming web chat (demo/web_chat.py, docs/chat-loop.rst) in a real
headless browser: the project served over ASGI by uvicorn, Debian's chromium driven
by playwright, the model the testing kit's fake server streaming a word at a time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from django.db import connection

from assistant.models import Conversation
from assistant.services import add_message
from config.asgi import application
from demo import web_chat
from tests.fake_llm import ok
from tests.test_admin_browser import (  # noqa: F401  (the browser fixture)
    CHROMIUM,
    browser,
    free_port,
)

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="chromium is not installed (make test installs it)"
)
ANSWER = "Post 42 is fixed: the typo in its title is gone."
USAGE = {
    "input_tokens": 12,
    "output_tokens": 30,
    "cache_read_input_tokens": 900,
    "cache_creation_input_tokens": 80,
}
# Records each render of the answer, as the reader sees it appear.
WATCH_ANSWER = """() => {
    window.renders = [];
    const answer = document.getElementById("answer");
    new MutationObserver(() => window.renders.push(answer.textContent))
        .observe(answer, {childList: true, characterData: true, subtree: true});
}"""


@pytest.fixture
def asgi_server(transactional_db) -> Iterator[str]:
    """The demo project over ASGI in this process (its views see the test database)."""
    # A previous test's teardown ended every other session of the test database,
    # this thread's among them when it ran in another context: reconnect.
    connection.close()
    port = free_port()
    config = uvicorn.Config(
        application, host="127.0.0.1", port=port, lifespan="off", log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # a wide bound: only catches a stall
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        # The views ran their queries in Django's per-request threads, gone now with
        # their connections still open: end those sessions of the test database, so
        # it can be dropped at the end of the run.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


def test_the_answer_appears_in_parts_and_is_recorded_whole_with_its_usage(
    asgi_server,
    browser,  # noqa: F811
    fake_llm,
    monkeypatch,
):
    # The recipe's client reads the SDK's own variables, as a host's would.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-anthropic")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.url)
    web_chat.claude.cache_clear()
    fake_llm.script_anthropic(ok(ANSWER, usage=USAGE, pace=0.15))
    conversation = Conversation.objects.create(title="Web chat", system_prompt="You help.")
    page = browser

    page.goto(f"{asgi_server}/chat/{conversation.pk}/")
    page.evaluate(WATCH_ANSWER)
    page.fill("#text", "Fix the typo in post 42")
    page.click("button[type=submit]")
    page.wait_for_function("document.getElementById('status').textContent === 'done'")

    renders = [text for text in page.evaluate("window.renders") if text]
    assert renders[-1] == ANSWER
    partial = renders[:-1]
    assert len(partial) >= 2, renders
    assert all(ANSWER.startswith(text) and len(text) < len(ANSWER) for text in partial)
    user, answer = conversation.messages.order_by("id")
    assert (user.role, user.content) == ("user", "Fix the typo in post 42")
    assert (answer.role, answer.content) == ("assistant", ANSWER)
    assert (answer.input_tokens, answer.cache_read_tokens, answer.cache_write_tokens) == (
        12,
        900,
        80,
    )
    assert answer.output_tokens == 30
    assert fake_llm.requests_for("anthropic.messages")[0].body["stream"] is True


def test_a_message_is_edited_answered_and_its_branches_flipped_in_the_page(
    browser,  # noqa: F811  (before the server: its reconnect is then this test's)
    asgi_server,
    fake_llm,
    monkeypatch,
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-anthropic")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.url)
    web_chat.claude.cache_clear()
    fake_llm.script_anthropic(ok(ANSWER, usage=USAGE))
    conversation = Conversation.objects.create(title="Web chat", system_prompt="You help.")
    add_message(conversation, "user", "Fix the typo in post 41")
    add_message(conversation, "assistant", "Post 41 has no typo.")
    page = browser

    page.goto(f"{asgi_server}/chat/{conversation.pk}/")
    page.click("li.user details.edit summary")
    page.fill("li.user details.edit input[name=text]", "Fix the typo in post 42")
    page.click("li.user details.edit button")
    page.wait_for_function("document.getElementById('status').textContent === 'done'")

    branch = Conversation.objects.get(parent_conversation=conversation)
    assert page.url == f"{asgi_server}/chat/{branch.pk}/"
    assert page.text_content("#answer") == ANSWER
    assert page.text_content("li.user span.place") == "2/2"
    assert list(branch.messages.values_list("role", "content")) == [
        ("user", "Fix the typo in post 42"),
        ("assistant", ANSWER),
    ]

    page.click("li.user button.previous")
    page.wait_for_url(f"{asgi_server}/chat/{conversation.pk}/")
    assert page.text_content("li.user span.place") == "1/2"
    assert page.text_content("li.assistant p.text") == "Post 41 has no typo."
    page.fill("#text", "/status")
    page.click("#ask button")
    page.wait_for_function("document.getElementById('status').textContent.includes('tokens')")
    assert "before compaction" in page.text_content("#status")
    assert conversation.messages.count() == 2  # the command is not a message
