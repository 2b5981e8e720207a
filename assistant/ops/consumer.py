"""A worker's consumer that survives losing Redis with a task in flight.

Celery 5.7 with kombu 5.7's Redis transport: when the broker connection breaks while
the consumer holds an unacknowledged delivery (every running task, with late
acknowledgement), ``Consumer.on_connection_error_after_connected`` first collects the
connection, and kombu detaches its transport (``transport.client = None``). Two later
calls still go through that transport's channel and build a Redis pool from its
address, which now raises ``AttributeError: 'NoneType' object has no attribute
'hostname'``:

- the close that follows the collect, which restores the unacknowledged delivery;
- the late acknowledgement of the task in flight, when it ends after the reconnect.

Neither error is one Celery ignores there, so the worker stopped with "Unrecoverable
error" and never reconnected (docs/operations.rst, "Processes"). Here the collected
transport keeps the address of its connection, so both calls do what kombu meant: the
restore fails with a connection error Celery ignores while Redis is down, and the
late acknowledgement removes the delivery from Redis's unacked hash once it is back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery.utils.imports import symbol_by_name
from celery.worker.consumer import Consumer


class ReconnectingConsumer(Consumer):
    """Celery's consumer, but a broker lost with a task in flight means reconnecting."""

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        connection = self.connection
        if connection is not None and connection._transport is not None:
            connection.collect = _keeping_the_address(connection, connection.collect)
        super().on_connection_error_after_connected(exc)


def _keeping_the_address(connection: Any, collect: Callable[..., None]) -> Callable[..., None]:
    transport = connection.transport

    def collect_keeping_the_address(*args: Any, **kwargs: Any) -> None:
        try:
            collect(*args, **kwargs)
        finally:
            transport.client = connection

    return collect_keeping_the_address


def reconnecting(consumer_cls: type | str) -> type:
    """The worker's consumer class (Celery's `worker_consumer`, a host's own included)
    with the reconnect guard mixed in; `ReconnectingConsumer` for Celery's own."""
    base = symbol_by_name(consumer_cls)
    if issubclass(base, ReconnectingConsumer):
        return base
    if base is Consumer:
        return ReconnectingConsumer
    return type(f"Reconnecting{base.__name__}", (ReconnectingConsumer, base), {})
