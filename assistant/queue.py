"""Enqueue Celery tasks after the surrounding transaction commits.

One helper used everywhere: work is published only once its rows are
visible to the worker, never from inside an open transaction, and never after
a rollback. A broker that is down must not break the chat that triggered the
work: the failure is logged and the periodic sweep picks the work up later.
"""

import logging
from typing import Any

from celery import Task
from django.db import transaction

logger = logging.getLogger(__name__)


def enqueue_on_commit(task: Task, *args: Any, using: str | None = None) -> None:
    def publish() -> None:
        try:
            task.apply_async(args=args)
        except Exception as exc:  # broker down: the sweep recovers it
            logger.warning(
                "enqueue_failed task=%s args=%s error=%s", task.name, args, type(exc).__name__
            )

    transaction.on_commit(publish, using=using)
