from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from assistant.cleanup import JOBS, pending_counts, run_job


class Command(BaseCommand):
    help = (
        "Run every scheduled cleanup job now, batch after batch until none has work "
        "left: purge soft-deleted conversations past the retention, drop old "
        "originals (when a retention is set), re-enqueue post-exchange work that "
        "never ran and missing fork summaries, release expired leases and clear "
        "stale cached summaries. Safe to run while beat runs the same jobs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Only count what each job would do."
        )
        parser.add_argument(
            "--only",
            action="append",
            choices=JOBS,
            help="Run just this job (repeatable).",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bars.")

    def handle(self, *args: Any, **options: Any) -> None:
        jobs = options["only"] or list(JOBS)
        counts = pending_counts()
        if options["dry_run"]:
            for job in jobs:
                self.stdout.write(f"{job}: {counts[job]} (dry run, nothing changed)")
            return
        for job in jobs:
            progress = not options["no_progress"] and counts[job] > 0
            with tqdm(
                total=counts[job], desc=job, unit="row", disable=not progress, file=sys.stderr
            ) as bar:
                try:
                    total = run_job(job, on_batch=lambda result: bar.update(result.count))
                except ValueError as exc:
                    raise CommandError(str(exc)) from None
            self.stdout.write(f"{job}: {total}")
