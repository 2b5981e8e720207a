"""The demo's embedded broker (kombu's filesystem transport) never hands a worker
a message that is still being written."""

from __future__ import annotations

import threading

import pytest
from kombu import Connection
from kombu.exceptions import ChannelError

from config.filesystem_broker import Transport

MESSAGES = 400


def connection(folder) -> Connection:
    return Connection(
        transport=Transport,
        transport_options={
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            "store_processed": False,
            "polling_interval": 0,
        },
    )


def test_a_consumer_polling_while_messages_are_written_receives_every_one_whole(tmp_path):
    # A payload large enough that writing it takes a while, so a poll that
    # took a file before it was written whole would read it short or empty.
    payloads = [{"n": n, "body": f"{n:06d}" * 20_000} for n in range(MESSAGES)]
    received: list[dict] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            with connection(tmp_path) as conn:
                queue = conn.SimpleQueue("work")
                while len(received) < MESSAGES:
                    message = queue.get(timeout=10)
                    received.append(message.payload)
                    message.ack()
        except BaseException as exc:  # reported by the test thread below
            errors.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    with connection(tmp_path) as conn:
        queue = conn.SimpleQueue("work")
        for payload in payloads:
            queue.put(payload)
    consumer.join(timeout=60)

    assert not consumer.is_alive(), "the consumer stalled"
    assert errors == []
    assert sorted(received, key=lambda p: p["n"]) == payloads


def test_a_message_that_cannot_be_written_is_refused_with_the_folder_named(tmp_path):
    folder = tmp_path / "broker"
    folder.mkdir()
    with connection(folder) as conn:
        queue = conn.SimpleQueue("work")
        folder.rmdir()  # the broker's folder removed under a running producer
        with pytest.raises(ChannelError, match=r"Cannot add message .* to .*broker"):
            queue.put({"n": 1})
