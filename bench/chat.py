"""How a replay drives the services, as a chat backend does: each neutral
message stored through add_message, each user turn finished by the
post-exchange pipeline (in-process), on the session's own clock where asked
(`SessionClock`), each request asking its cache lifetime (`ask_lifetime`).
Used by the bench and by the tests' replays; imports no peer library. Import
after django.setup()."""

from __future__ import annotations

from typing import Any

import time_machine
from django.utils import timezone

from assistant import services
from assistant.models import Conversation
from assistant.window import LIFETIME_KEY, request_lifetime
from bench.payload import RequestFigures


def store(conversation: Conversation, message: dict[str, Any], **fields: Any) -> None:
    """One neutral message of a replay, through add_message; an assistant message
    with neither text nor tool calls (a model answer that was all thinking, in
    cc-medgemma) is stored too, as a chat backend stores what the model said."""
    if message.get("tool_calls"):
        fields["tool_calls"] = message["tool_calls"]
    if message["role"] == "tool":
        fields["tool_call_id"] = message["tool_call_id"]
    services.add_message(conversation, message["role"], message["content"], **fields)


def finish_turn(conversation: Conversation) -> None:
    """The end of a user turn: the exchange is stamped and the post-exchange
    pipeline runs, in-process."""
    Conversation.objects.filter(pk=conversation.pk).update(last_exchange_at=timezone.now())
    services.process_exchange(conversation.pk)


class SessionClock:
    """The session's own clock for a replay (`on`): Django's and Python's wall clock
    (time-machine, not the monotonic clocks) moved to each moment given, so messages are
    stored at their `ts` and the pre-call hook decides at the time of the call; off, the
    replay runs on the machine's clock, as one request right after another."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self._travel: time_machine.travel | None = None
        self._coordinates: time_machine.Coordinates | None = None

    def __enter__(self) -> SessionClock:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._travel is not None:
            self._travel.stop()

    def at(self, moment: float | None) -> None:
        """Now is `moment` (seconds since the epoch); None keeps the time as it is."""
        if not self.on or moment is None:
            return
        if self._coordinates is None:
            self._travel = time_machine.travel(moment, tick=False)
            self._coordinates = self._travel.start()
        else:
            self._coordinates.move_to(moment)


def ask_lifetime(conversation: Conversation, wire: str, figures: RequestFigures) -> dict[str, Any]:
    """The cache lifetime the app chooses for the request (`request_lifetime`, as
    `chat_step` asks it), kept on its figures; the answer's fields that record it."""
    figures.lifetime = request_lifetime(conversation.pk, wire, figures.tokens)
    return {"metadata": {LIFETIME_KEY: figures.lifetime.name}} if figures.lifetime else {}
