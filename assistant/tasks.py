"""Celery tasks: thin wrappers that take ids and call a service."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import InterfaceError, OperationalError

from assistant import exchanges

logger = logging.getLogger(__name__)

# Database connections dropped mid-task (failover, pg_terminate_backend) are
# retried; the work is idempotent. Delays stay far below the broker's
# visibility timeout so a retried task is not also redelivered.
_DB_RETRY = {
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 1,
    "retry_backoff_max": 10,
    "retry_jitter": True,
    "max_retries": 5,
}


@shared_task(**_DB_RETRY)
def post_exchange_task(conversation_id: int) -> None:
    exchanges.process_exchange(conversation_id)
