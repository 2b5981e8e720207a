"""`make demo`: a long, tool-heavy conversation replayed through a real worker.

Each model call goes through the pre-exchange hook (`ensure_context_summary`)
and `build_context`; each completed exchange is handed to the worker with
`finish_exchange`, which compacts tool results and pre-builds summaries.
The workload is the deterministic blog-admin conversation of demo/workload.py
(the benchmark's too). Each model call's usage is recorded as a provider with
prompt caching would report it (assistant.testing.fake_provider's prompt cache),
so the final table prices the conversation as the admin does.

The screen shows a progress bar and, under it, one line per compaction step;
log lines go to var/demo.log unless `--log` asks for them on the screen.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from assistant.cost.pricing import conversation_cost
from assistant.history.figures import measures, share, token_change, token_count
from assistant.models import CompactionEvent, Conversation
from assistant.providers.catalog import model_context_window
from assistant.services import (
    add_message,
    build_context,
    context_tokens,
    ensure_context_summary,
    finish_exchange,
)
from assistant.testing.fake_provider import PromptCache, default_usage
from demo.scenes import run_overflow_and_fork_demo
from demo.workload import generate


def log_to_file(path: Path) -> None:
    """The log lines (the app's one line per compaction, kombu's, the SDKs') to a file,
    so they do not interleave with the progress bar."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)


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
        parser.add_argument(
            "--log", action="store_true", help="log lines on the screen too (else var/demo.log)"
        )

    def handle(self, *args, turns: int, log: bool, **options):
        db = settings.DATABASES["default"]
        self.stdout.write(f"database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}")
        if not log:
            log_path = Path(settings.VAR_DIR) / "demo.log"
            log_to_file(log_path)
            self.stdout.write(f"log lines: {log_path} (--log shows them here)")
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
        cache = PromptCache()  # what the provider's prompt cache holds
        progress = tqdm(workload.turns, desc="turns", unit="turn", file=sys.stdout)
        for turn in progress:
            for message in turn.messages:
                usage = {}
                if message["role"] == "assistant":
                    ensure_context_summary(conversation)  # the pre-exchange hook
                    context = build_context(conversation)
                    sent = context.tokens.total
                    totals["calls"] += 1
                    totals["sent"] += sent
                    totals["everything"] += everything
                    totals["largest"] = max(totals["largest"], sent)
                    usage = cached_usage(cache, context.to_anthropic())
                added = add_message(
                    conversation, message["role"], message["content"],
                    tool_calls=message["tool_calls"], tool_call_id=message["tool_call_id"] or "",
                    **usage,
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
        """One line under the progress bar per compaction step of this turn (`step_lines`)."""
        events = list(
            CompactionEvent.objects.filter(conversation=conversation, pk__gt=last_event).order_by(
                "pk"
            )
        )
        if events:
            for line in step_lines(turn, events, context_tokens(conversation), self.window):
                progress.write(line)
        return events[-1].pk if events else last_event

    def scenes(self) -> None:
        run_overflow_and_fork_demo(self.stdout)

    def report(self, conversation: Conversation, totals: dict[str, int]) -> None:
        events = CompactionEvent.objects.filter(conversation=conversation)
        compacted = events.filter(kind="tool_results")
        stubbed = events.filter(kind="dedup")
        cost, _ = conversation_cost(conversation)
        self.stdout.write(
            f"\nconversation {conversation.pk}: {conversation.title}, "
            f"{totals['calls']:,} model calls ({settings.ANTHROPIC_CHAT_MODEL} prices)"
        )
        rows = [
            ("", "input tokens", "cost under caching"),
            ("sending everything", f"{totals['everything']:,}", f"${cost.everything:,.2f}"),
            ("with compaction", f"{totals['sent']:,}", f"${cost.total:,.2f}"),
            (
                "  share of sending everything",
                f"{totals['sent'] / max(totals['everything'], 1):.1%}",
                f"{cost.total / cost.everything:.1%}" if cost.everything else "-",
            ),
            ("  of which the summarizer", "", f"${cost.summarizer:,.2f}"),
        ]
        for name, tokens, money in rows:
            self.stdout.write(f"  {name:<30} {tokens:>14} {money:>20}")
        facts = [
            ("largest single context", f"{totals['largest']:,} tokens"),
            ("window summaries generated", f"{events.filter(kind='window_summary').count()}"),
            ("tool results compacted", f"{sum(e.messages_affected for e in compacted)}"),
            ("tool results deduplicated", f"{sum(e.messages_affected for e in stubbed)}"),
            ("messages stored (all originals kept)", f"{conversation.messages.count():,}"),
        ]
        self.stdout.write("")
        for name, value in facts:
            self.stdout.write(f"  {name:<36} {value:>14}")


def step_lines(
    turn: int, events: list[CompactionEvent], next_request: int, window: int
) -> list[str]:
    """The lines of a turn's compaction steps, each figure named for what it measures
    (assistant.history.figures): a step that rewrote the request reads the request before
    and after it, one line each (two shifts in a turn are two lines, never a sum); the
    worker's compaction of many tool results (one event per result) is one line, the
    results' own sizes summed. The last line: the next request after all of them."""
    lines: list[tuple[str, list[CompactionEvent]]] = []
    grouped: dict[str, list[CompactionEvent]] = {}
    for event in events:
        if measures(event) == "the request":
            lines.append((event.get_kind_display().lower(), [event]))
        else:
            grouped.setdefault(event.get_kind_display().lower(), []).append(event)
    lines += list(grouped.items())
    said = []
    for kind, group in lines:
        affected = sum(event.messages_affected for event in group)
        change = token_change(
            sum(event.tokens_before for event in group),
            sum(event.tokens_after for event in group),
            measures(group[0]),
        )
        said.append(f"turn {turn:>3}  {kind:<32} {affected:>4} message(s)  {change}")
    said.append(
        f"turn {turn:>3}  {'the next request':<32} {'':>15}  {token_count(next_request)}, "
        f"{share(next_request, window)} of the model's window of {token_count(window)}"
    )
    return said


def cached_usage(cache: PromptCache, request: dict) -> dict[str, int]:
    """The usage a provider with prompt caching reports for this request, as
    add_message's fields (cache reads and writes apart from uncached input)."""
    usage = default_usage("anthropic.messages", request, cache)
    return {
        "input_tokens": usage["input_tokens"],
        "cache_read_tokens": usage["cache_read_input_tokens"],
        "cache_write_tokens": usage["cache_creation_input_tokens"],
        "output_tokens": usage["output_tokens"],
    }
