"""Every code block a reader of the README or the docs would copy is marked, and
every block marked runnable is run (tests/doc_examples.py says how blocks are
marked). The host project's blocks (installation, the chat loop) run in
tests/test_packaging.py; the others run here."""

from __future__ import annotations

import inspect
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.core import checks
from django.db import transaction

from assistant.history.figures import ARROW
from assistant.models import Conversation
from assistant.providers.catalog import model_prices, price_of
from assistant.services import compact_tool_results
from assistant.settings.conf import compaction_config
from assistant.testing.fake_provider import FakeProvider
from tests.doc_examples import (
    CODE_LANGUAGES,
    HOST_KINDS,
    REPO,
    RUNNERS,
    Example,
    all_examples,
    docs_pages,
    examples_of,
    host_extensions,
    plain_code_blocks,
    readme_examples,
)
from tests.scenarios import tool_heavy_conversation

# A bound against a stall, not a timing: `make demo` replays 120 turns through a worker.
MAKE_TIMEOUT = 900


def test_every_code_block_is_marked_and_each_mark_has_a_runner() -> None:
    examples = all_examples()
    assert len(examples) > 20
    unmarked = [str(e) for e in examples if not e.mark and e.language in CODE_LANGUAGES]
    assert unmarked == [], "code blocks with no example mark"
    assert [str(e) for e in examples if e.mark and not (e.runs or e.reason)] == []
    plain = [where for page in docs_pages() for where in plain_code_blocks(page)]
    assert plain == [], "docs code blocks written without the example directive"
    assert [str(e) for e in examples if e.runs and e.kind not in RUNNERS] == []
    for kind, runner in RUNNERS.items():
        assert (REPO / runner).exists(), kind


def test_blocks_not_run_say_so_visibly_and_are_few() -> None:
    examples = [e for e in all_examples() if e.language in CODE_LANGUAGES]
    not_run = [e for e in examples if e.reason]
    for example in not_run:
        # The docs' directive prints the reason above the block; the README's block says it.
        if example.source == "README.md":
            assert "not run by the test suite" in example.code.lower(), str(example)
    print(f"\n{len(examples) - len(not_run)} blocks run, {len(not_run)} not run:")
    for example in not_run:
        print(f"  {example}")
    assert len(not_run) <= len(examples) // 4


def test_the_docs_copies_of_the_host_blocks_are_the_readmes() -> None:
    """The host project runs the README's blocks; a docs page that repeats one
    repeats it exactly, so running the README's runs the page's. Only
    docs/chat-loop.rst adds host files' blocks of its own (host_extensions), which
    the host project applies after the README's."""
    readme = {(e.kind, tuple(e.args), e.code) for e in readme_examples() if e.kind in HOST_KINDS}
    extensions = {(e.kind, tuple(e.args), e.code) for e in host_extensions()}
    copies = [e for e in all_examples() if e.kind in HOST_KINDS and e.source != "README.md"]
    assert copies
    assert extensions  # the Responses API's call function, at least
    assert [
        str(e) for e in copies if (e.kind, tuple(e.args), e.code) not in readme | extensions
    ] == []


# --- examples run in this project ---------------------------------------------------


class Notifications(list):
    """The `notify` a host supplies (a websocket push, say): here, a record."""

    def __call__(self, conversation_id: int, text: str) -> None:
        self.append((conversation_id, text))


def given_names(example: Example) -> dict[str, object]:
    """The names a block takes from its reader's code (`given=conversation,html`)."""
    wanted = [
        name
        for arg in example.args
        if arg.startswith("given=")
        for name in arg.removeprefix("given=").split(",")
    ]
    supply = {
        "conversation": lambda: Conversation.objects.create(title="Docs", system_prompt="Help."),
        "html": lambda: "<article>" + "<p>The post.</p>" * 200 + "</article>",
        "notify": Notifications,
    }
    return {name: supply[name]() for name in wanted}


@pytest.mark.django_db
@pytest.mark.parametrize("example", examples_of("django"), ids=str)
def test_a_django_example_runs(example: Example, django_capture_on_commit_callbacks) -> None:
    given = given_names(example)
    namespace: dict[str, object] = {"__name__": "docs_example", **given}
    exec(compile(example.code, str(example), "exec"), namespace)
    if "notify" in given:
        # A block that pushes notices: a compaction, once committed, reaches its `notify`.
        conversation, _ = tool_heavy_conversation()
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            assert compact_tool_results(conversation) >= 1
        ((conversation_id, text),) = given["notify"]
        assert conversation_id == conversation.pk
        assert text.startswith("Compacted (") and " · tool_results · Total: " in text
    # The functions it defines that take only given names are called, as its reader would.
    for name, value in list(namespace.items()):
        if inspect.isfunction(value) and value.__module__ == "docs_example":
            parameters = inspect.signature(value).parameters
            if parameters and set(parameters) <= set(given):
                result = value(**{p: given[p] for p in parameters})
                assert result, f"{name}() of {example} returned nothing"


@pytest.mark.parametrize("example", examples_of("settings"), ids=str)
def test_a_settings_example_is_accepted(example: Example, settings) -> None:
    namespace: dict[str, object] = {}
    exec(compile(example.code, str(example), "exec"), namespace)
    names = {name: value for name, value in namespace.items() if name.isupper()}
    assert names, f"{example} sets no setting"
    for name, value in names.items():
        setattr(settings, name, value)
    errors = [m for m in checks.run_checks() if m.level >= checks.ERROR]
    assert errors == []
    compaction_config()
    prices = model_prices()
    for model in names.get("ASSISTANT_MODEL_PRICES", {}):
        assert price_of(model, prices) is not None


# A repository file shown on a docs page, and the test that runs it.
REPO_FILE_TESTS = {
    "demo/web_chat.py": "tests/test_web_chat_browser.py",
    "deploy/systemd/assistant-worker.service": "tests/test_worker_faults.py",
}


@pytest.mark.parametrize("example", examples_of("repo-file"), ids=str)
def test_a_repo_file_example_is_the_file_word_for_word(example: Example) -> None:
    (path,) = example.args
    assert example.code == (REPO / path).read_text().rstrip("\n")
    assert (REPO / REPO_FILE_TESTS[path]).exists()


def repo_argv(line: str) -> list[str]:
    argv = shlex.split(line.split(" #")[0])
    return [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]


@pytest.mark.parametrize("example", examples_of("server"), ids=str)
def test_a_server_example_starts_and_answers(example: Example) -> None:
    (line,) = example.code.splitlines()
    process = subprocess.Popen(repo_argv(line), cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        banner = process.stdout.readline()
        assert banner.startswith("fake provider listening on http://"), banner
        url = banner.split()[-1]
        with urllib.request.urlopen(f"{url}/_fake/requests", timeout=30) as response:
            assert response.status == 200
    finally:
        process.terminate()
        process.wait(timeout=30)


# Each SDK built as mysite/chat.py builds it (no key, no base URL in the code), calling once.
SDK_CALLS = """
import anthropic, openai
from google import genai

message = anthropic.Anthropic().messages.create(
    model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
)
chat = openai.OpenAI().chat.completions.create(
    model="gpt-4.1", messages=[{"role": "user", "content": "hi"}]
)
client = genai.Client()  # kept: a Client garbage-collected mid-call closes its connection
gemini = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
print(message.content[0].text, chat.choices[0].message.content, gemini.text, sep="|")
"""


def test_the_fake_providers_environment_points_each_sdk_of_the_chat_loop_at_it() -> None:
    """docs/chat-loop.rst, "Testing the loop without a key": with only its exports
    (no key of the machine's, no other base URL), the three SDKs' clients as the chat
    loop builds them send every request to the fake, and none is refused for want of
    a key."""
    (example,) = [e for e in examples_of("", "docs/chat-loop.rst") if "export " in e.code]
    fake = FakeProvider().start()
    try:
        env = {k: v for k, v in os.environ.items() if "API_KEY" not in k and "BASE_URL" not in k}
        for line in example.code.splitlines():
            words = shlex.split(line)
            assert words[0] == "export", line
            for word in words[1:]:
                name, value = word.split("=", 1)
                env[name] = value.replace("http://127.0.0.1:8765", fake.url)
        done = subprocess.run(
            [sys.executable, "-c", SDK_CALLS], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.count("fake provider") == 3, done.stdout
        assert len(fake.requests) == 3
    finally:
        fake.stop()


@pytest.mark.slow
@pytest.mark.parametrize("example", examples_of("make"), ids=str)
def test_a_make_example_runs_on_a_fresh_var_dir(example: Example, tmp_path: Path) -> None:
    """`make demo` as a reader runs it: no PostgreSQL or Redis settings, nothing of
    the test run's own settings; its state in a fresh directory."""
    foreign = ("DJANGO_", "DATABASE_", "CELERY_", "REDIS_", "ASSISTANT_", "TEST_", "BENCH_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(foreign)}
    env["ASSISTANT_VAR_DIR"] = str(tmp_path)
    for line in example.code.splitlines():
        started = time.monotonic()
        done = subprocess.run(
            shlex.split(line.split(" #")[0]),
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=MAKE_TIMEOUT,
        )
        print(f"\n{line}: {time.monotonic() - started:.0f} s, last lines:")
        print("\n".join(done.stdout.splitlines()[-16:]))
        assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        assert "Traceback" not in done.stdout + done.stderr
        if line == "make demo":
            demo_screen(done.stdout, tmp_path)


def demo_screen(stdout: str, var_dir: Path) -> None:
    """The demo's screen: a line per compaction step, the log lines in var/demo.log
    (not on the screen), and a final table of tokens beside their cost under caching."""
    lines = stdout.splitlines()
    steps = [line for line in lines if line.startswith("turn") and f" {ARROW} " in line]
    assert steps, "no compaction line under the progress bar"
    assert any("window summary" in step and "the request: " in step for step in steps)
    assert any("the next request" in line and "of the model's window" in line for line in lines)
    assert "assistant.events" not in stdout  # the log lines went to the file
    assert "event=window_summary" in (var_dir / "demo.log").read_text()
    (header,) = [line for line in stdout.splitlines() if "cost under caching" in line]
    assert "input tokens" in header
    everything, ours = (
        next(line for line in stdout.splitlines() if line.strip().startswith(label)).split()
        for label in ("sending everything", "with compaction")
    )
    assert everything[-1].startswith("$") and ours[-1].startswith("$")
    assert float(ours[-1][1:].replace(",", "")) < float(everything[-1][1:].replace(",", ""))
