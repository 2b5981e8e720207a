"""`make demo`: a long, tool-heavy conversation replayed through a real worker.

Each model call goes through the pre-exchange hook (`ensure_context_summary`)
and `build_context`; each completed exchange is handed to the worker with
`finish_exchange`, which compacts tool results and pre-builds summaries.
The workload is the benchmark's deterministic blog-admin conversation.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from assistant.llm.overflow import model_context_window
from assistant.models import CompactionEvent, Conversation
from assistant.services import add_message, build_context, ensure_context_summary, finish_exchange
from bench.workload import generate
from demo.scenes import run_overflow_and_fork_demo


@contextmanager
def worker_process(stdout):
    """Start `celery -A config worker` as a child process, wait until it is
    ready, and stop it (warm shutdown) on the way out."""
    log_path = Path(settings.VAR_DIR) / "demo-worker.log"
    command = [
        sys.executable, "-m", "celery", "-A", "config", "worker",
        "-Q", "compaction,celery", "--concurrency", "1", "--loglevel", "INFO",
    ]  # fmt: skip
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy()
        )
        try:
            deadline = time.monotonic() + 60
            while "ready." not in log_path.read_text():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise CommandError(f"The worker did not start; see {log_path}")
                time.sleep(0.2)
            broker = settings.CELERY_BROKER_URL.split("://", 1)[0]
            stdout.write(f"worker started: pid {process.pid}, broker {broker}, log {log_path}")
            yield process
        finally:
            process.terminate()
            process.wait(timeout=30)
            stdout.write("worker stopped")


class Command(BaseCommand):
    help = "Replay a long tool-heavy conversation through a real Celery worker."

    def add_arguments(self, parser):
        parser.add_argument("--turns", type=int, default=120)

    def handle(self, *args, turns: int, **options):
        db = settings.DATABASES["default"]
        self.stdout.write(f"database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}")
        workload = generate(turns, name="demo")
        self.window = model_context_window(settings.ANTHROPIC_CHAT_MODEL)
        with worker_process(self.stdout):
            conversation = Conversation.objects.create(
                title="Demo: blog admin", system_prompt=workload.system_prompt
            )
            totals = self.replay(conversation, workload)
            self.scenes()
        self.report(conversation, totals)

    def replay(self, conversation: Conversation, workload) -> dict[str, int]:
        totals = {"calls": 0, "sent": 0, "everything": 0, "largest": 0}
        everything = len(workload.system_prompt) // 4
        last_event = 0
        progress = tqdm(workload.turns, desc="turns", unit="turn", file=sys.stdout)
        for turn in progress:
            for message in turn.messages:
                if message["role"] == "assistant":
                    ensure_context_summary(conversation)  # the pre-exchange hook
                    sent = build_context(conversation).tokens.total
                    totals["calls"] += 1
                    totals["sent"] += sent
                    totals["everything"] += everything
                    totals["largest"] = max(totals["largest"], sent)
                added = add_message(
                    conversation, message["role"], message["content"],
                    tool_calls=message["tool_calls"], tool_call_id=message["tool_call_id"] or "",
                )  # fmt: skip
                everything += added.original_token_estimate
            finish_exchange(conversation)  # no transaction open: enqueued at once
            self.wait_for_worker(conversation)
            last_event = self.notify(progress, conversation, turn.index, last_event)
        progress.close()
        return totals

    def wait_for_worker(self, conversation: Conversation) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            conversation.refresh_from_db(fields=["last_exchange_at", "post_exchange_done_at"])
            if conversation.post_exchange_done_at == conversation.last_exchange_at:
                return
            time.sleep(0.05)
        raise CommandError("The worker did not process the exchange within 60 s")

    def notify(self, progress, conversation: Conversation, turn: int, last_event: int) -> int:
        events = CompactionEvent.objects.filter(conversation=conversation, pk__gt=last_event)
        for event in events.order_by("pk"):
            now = build_context(conversation).tokens.total
            progress.write(
                f"  turn {turn:>3}: {event.get_kind_display().lower()}: "
                f"{event.messages_affected} message{'s' if event.messages_affected != 1 else ''}, "
                f"{event.tokens_before:,} -> "
                f"{event.tokens_after:,} tokens; context now {now:,} tokens "
                f"({now / self.window:.1%} of the {self.window:,}-token window)"
            )
            last_event = event.pk
        return last_event

    def scenes(self) -> None:
        run_overflow_and_fork_demo(self.stdout)

    def report(self, conversation: Conversation, totals: dict[str, int]) -> None:
        events = CompactionEvent.objects.filter(conversation=conversation)
        compacted = events.filter(kind="tool_results")
        stubbed = events.filter(kind="dedup")
        rows = [
            ("model calls", f"{totals['calls']:,}"),
            ("tokens without compaction", f"{totals['everything']:,}"),
            ("tokens sent with compaction", f"{totals['sent']:,}"),
            ("share sent", f"{totals['sent'] / max(totals['everything'], 1):.2%}"),
            ("largest single context", f"{totals['largest']:,}"),
            ("window summaries generated", f"{events.filter(kind='window_summary').count()}"),
            ("tool results compacted", f"{sum(e.messages_affected for e in compacted)}"),
            ("tool results deduplicated", f"{sum(e.messages_affected for e in stubbed)}"),
            ("messages stored (all originals kept)", f"{conversation.messages.count():,}"),
        ]
        width = max(len(name) for name, _ in rows)
        self.stdout.write(f"\nconversation {conversation.pk}: {conversation.title}")
        for name, value in rows:
            self.stdout.write(f"  {name:<{width}}  {value:>12}")
