"""The demo's embedded broker (kombu's filesystem transport) never hands a reader
a file that is still being written: a message, or an exchange's table of bindings."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kombu import Connection
from kombu.exceptions import ChannelError

from config.filesystem_broker import Transport

MESSAGES = 400
# Waits bounded only to turn a hang into a failure: a loaded machine, whose disk
# may hold a writer back for seconds, never comes near them.
HANG_SECONDS = 120


def connection(folder: Path) -> Connection:
    return Connection(
        transport=Transport,
        transport_options={
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            # The exchange tables, beside the messages: kombu's default is
            # ./control in the working directory, which every test process (and
            # the checkout) would share.
            "control_folder": str(folder.with_name(f"{folder.name}.control")),
            "store_processed": False,
            "polling_interval": 0,
        },
    )


def test_a_consumer_polling_while_messages_are_written_receives_every_one_whole(
    tmp_path: Path,
) -> None:
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
                    message = queue.get(timeout=HANG_SECONDS)
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
    consumer.join(timeout=HANG_SECONDS)

    assert not consumer.is_alive(), "the consumer stalled"
    assert errors == []
    assert sorted(received, key=lambda p: p["n"]) == payloads


def test_a_message_that_cannot_be_written_is_refused_with_the_folder_named(tmp_path: Path) -> None:
    folder = tmp_path / "broker"
    folder.mkdir()
    with connection(folder) as conn:
        queue = conn.SimpleQueue("work")
        folder.rmdir()  # the broker's folder removed under a running producer
        with pytest.raises(ChannelError, match=r"Cannot add message .* to .*broker"):
            queue.put({"n": 1})


def test_a_publish_reading_the_bindings_while_they_are_written_sees_them_whole(
    tmp_path: Path,
) -> None:
    # kombu's channel creates an exchange's table with open("wb"), which empties
    # the file before its lock is taken: a publish reading the table then got
    # an empty file (JSONDecodeError). Here the table is created again and
    # again, the first bind of a process starting beside a running one, while
    # another connection reads it as each publish does.
    stop = threading.Event()
    failures: list[BaseException] = []
    with connection(tmp_path) as binder, connection(tmp_path) as publisher:
        writing, reading = binder.default_channel, publisher.default_channel
        writing.control_folder.mkdir()
        table = writing.control_folder / "work.exchange"

        def read() -> None:
            while not stop.is_set():
                try:
                    assert reading.get_table("work") in ([], [("work", "", "work")])
                except BaseException as exc:  # reported by the test thread below
                    failures.append(exc)
                    return

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for _ in range(2_000):
                table.unlink(missing_ok=True)
                writing._queue_bind("work", "work", "", "work")
        finally:
            stop.set()
            reader.join(timeout=HANG_SECONDS)
    assert failures == []


def test_deleting_a_queue_drops_its_binding_and_keeps_the_others(tmp_path: Path) -> None:
    with connection(tmp_path) as conn:
        kept, dropped = conn.SimpleQueue("kept"), conn.SimpleQueue("dropped")
        channel = conn.default_channel
        channel.queue_bind("dropped", exchange="kept", routing_key="dropped")
        dropped.put({"n": 1})
        channel.queue_delete("dropped")

        assert channel.get_table("kept") == [("kept", "", "kept")]
        assert channel.get_table("dropped") == []
        kept.put({"n": 2})
        assert kept.get(timeout=HANG_SECONDS).payload == {"n": 2}
        assert channel._size("dropped") == 0  # its messages purged, as kombu does


def test_a_second_broker_folder_in_the_same_process_gets_its_own_bindings(
    tmp_path: Path,
) -> None:
    # kombu's filesystem transport remembered bindings process-wide: the
    # second folder's table was never written and its messages went nowhere.
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        with connection(folder) as conn:
            queue = conn.SimpleQueue("work")
            queue.put({"folder": folder.name})
            assert queue.get(timeout=HANG_SECONDS).payload == {"folder": folder.name}
