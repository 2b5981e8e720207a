"""kombu's filesystem transport, with every file a reader can open written whole.

The demo's embedded broker is a folder of message files and a control folder
holding each exchange's table of bindings. kombu's own channel (5.7) writes
both in place:

- a message file is opened under its final name and then written, so a worker
  polling the folder could move it away in between and read it empty: the
  message, an exchange's post-exchange task, was gone;
- an exchange table is created with ``open("wb")``, which empties the file
  before the lock is taken, so a publish reading the table in between (any
  process binding the same exchange for the first time: a worker starting
  beside the demo) got an empty file and failed;
- the bindings a process declared are remembered process-wide (below), so a
  table missing on disk was never written again and publishes went nowhere.

Here each is written under a name no reader looks for and renamed into place
(a rename within one folder is atomic), so a reader sees the old file or the
new one, never a part. Changes to a table are serialized by a lock file of
their own, since a reader's lock is on whichever file it opened. Reading,
ordering and the names are kombu's.

Used when CELERY_BROKER_URL is filesystem:// (config/settings.py).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem, virtual
from kombu.utils.json import dumps, loads

Binding = filesystem.exchange_queue_t


def write_then_rename(folder: str | Path, name: str, data: bytes) -> None:
    """`data` in `folder/name`, seen by a reader whole or not at all."""
    # mkstemp's names hold no dot, so `.xxxx.part` never matches `<id>.<queue>.msg`.
    fd, partial = tempfile.mkstemp(dir=folder, prefix=".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(partial, os.path.join(folder, name))
    except OSError:
        with suppress(OSError):
            os.unlink(partial)
        raise


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        # kombu's name: milliseconds first, so the sorted folder is the queue's order.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        try:
            write_then_rename(self.data_folder_out, name, dumps(payload).encode())
        except OSError as exc:
            raise ChannelError(f"Cannot add message {name!r} to {self.data_folder_out!r}") from exc

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        binding = Binding(routing_key or "", pattern or "", queue or "")

        def bound(table: list[Binding]) -> list[Binding]:
            # kombu's order: the newest binding first.
            return table if binding in table else [binding, *table]

        self._change_table(exchange, bound)

    def _delete(
        self, queue: str, exchange: str, routing_key: str, pattern: str, *args: Any, **kwargs: Any
    ) -> None:
        virtual.Channel._delete(self, queue)  # purges the queue's messages, as kombu's does
        binding = Binding(routing_key or "", pattern or "", queue or "")
        self._change_table(exchange, lambda table: [b for b in table if b != binding])

    def _change_table(
        self, exchange: str, change: Callable[[list[Binding]], list[Binding]]
    ) -> None:
        file = self._exchange_file(exchange)
        try:
            self.control_folder.mkdir(parents=True, exist_ok=True)
            with self._table_lock(file):
                table = self.get_table(exchange)
                changed = change(table)
                if changed != table:
                    write_then_rename(self.control_folder, file.name, dumps(changed).encode())
        except OSError as exc:
            raise ChannelError(f"Cannot change {file}") from exc

    @contextmanager
    def _table_lock(self, file: Path) -> Iterator[None]:
        with open(file.with_name(f".{file.name}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def get_table(self, exchange: str) -> list[Binding]:
        file = self._exchange_file(exchange)
        try:
            table = loads(file.read_bytes())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc
        return [Binding(*binding) for binding in table]


class Transport(filesystem.Transport):
    Channel = Channel

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        # kombu shares one record of declared bindings across the process, and
        # a channel skips writing a binding that record already holds: a second
        # connection to another folder (or to one whose tables were removed)
        # then published into no table at all, and every message was dropped
        # silently. The tables on disk are the broker's state; each connection
        # keeps its own record, and writing a binding already there is a no-op.
        self.state = virtual.BrokerState()
