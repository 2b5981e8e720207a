"""kombu's filesystem transport, with each message file written whole before it is seen.

The demo's embedded broker is a folder of message files. kombu's own channel
(5.7) opens the message file under its final name and then writes it; a worker
polling the folder can move that file away in between and read it empty, and
the message is gone: the worker never runs the exchange it carried. Here the
message is written under a name the worker's poll skips (no queue in it) and
renamed into place, and a rename within one folder is atomic, so a worker sees
a whole message or none. Reading, ordering and the names are kombu's.

Used when CELERY_BROKER_URL is filesystem:// (config/settings.py).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from contextlib import suppress
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        # kombu's name: milliseconds first, so the sorted folder is the queue's order.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        try:
            self._write_then_rename(dumps(payload).encode(), name)
        except OSError as exc:
            raise ChannelError(f"Cannot add message {name!r} to {self.data_folder_out!r}") from exc

    def _write_then_rename(self, data: bytes, name: str) -> None:
        # mkstemp's names hold no dot, so `.xxxx.part` never matches `<id>.<queue>.msg`.
        fd, partial = tempfile.mkstemp(dir=self.data_folder_out, prefix=".", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(partial, os.path.join(self.data_folder_out, name))
        except OSError:
            with suppress(OSError):
                os.unlink(partial)
            raise


class Transport(filesystem.Transport):
    Channel = Channel
