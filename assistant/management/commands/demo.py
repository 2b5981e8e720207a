"""`make demo`: a real worker process and a tool-heavy conversation through it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from assistant.models import Conversation
from assistant.services import add_message, finish_exchange


@contextmanager
def worker_process(stdout):
    """Start `celery -A config worker` as a child process, wait until it is
    ready, and stop it (warm shutdown) on the way out."""
    log_path = Path(settings.VAR_DIR) / "demo-worker.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "-Q",
        "compaction,celery",
        "--concurrency",
        "1",
        "--loglevel",
        "INFO",
    ]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while "ready." not in log_path.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise CommandError(f"The worker did not start; see {log_path}")
            time.sleep(0.2)
        stdout.write(f"worker started (pid {process.pid}, broker {broker_name()}, log {log_path})")
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
        stdout.write("worker stopped")


def broker_name() -> str:
    return settings.CELERY_BROKER_URL.split("://", 1)[0]


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


class Command(BaseCommand):
    help = "Replay a tool-heavy exchange through a real Celery worker and show what was stored."

    def handle(self, *args, **options):
        db = settings.DATABASES["default"]
        self.stdout.write(f"database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}")
        with worker_process(self.stdout):
            conversation = self.record_exchange()
            done = wait_for(lambda: self.processed(conversation), timeout=60)
            if not done:
                raise CommandError("The worker did not run the post-exchange task in 60 s")
        self.report(conversation)

    def record_exchange(self) -> Conversation:
        html = "<article>" + "<p>Post body paragraph.</p>" * 400 + "</article>"
        with transaction.atomic():
            conversation = Conversation.objects.create(title="Demo: blog admin")
            add_message(conversation, "user", "Fix the typo in post 42's title.")
            add_message(
                conversation,
                "assistant",
                "Let me read the post.",
                tool_calls=[{"id": "call_1", "name": "get_blog_post", "arguments": {"id": 42}}],
            )
            add_message(conversation, "tool", html, tool_call_id="call_1")
            add_message(
                conversation, "assistant", "The title read 'Helo'; I changed it to 'Hello'."
            )
            finish_exchange(conversation)
        return conversation

    @staticmethod
    def processed(conversation: Conversation) -> bool:
        conversation.refresh_from_db()
        return conversation.post_exchange_done_at is not None

    def report(self, conversation: Conversation) -> None:
        self.stdout.write(f"\nconversation {conversation.pk}: {conversation.title}")
        for message in conversation.messages.order_by("id"):
            self.stdout.write(
                f"  #{message.pk:<5} {message.role:<9} {len(message.content):>6} chars "
                f"~{message.token_estimate:>5} tokens  {message.tool_name}"
            )
        self.stdout.write(f"post-exchange task done at {conversation.post_exchange_done_at}")
