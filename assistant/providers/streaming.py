"""Reading a model call's answer as it arrives (docs/chat-loop.rst, "Streaming"): when
`call_model` returned the SDK's stream, its wire's StreamReader reads it event by
event, each text delta goes to the host's `on_text`, and the whole answer (with its
whole usage) is returned to be recorded; a plain response hands its text on at once.

A stream that fails before any text arrived fails as the call would have (an overflow
is then recovered by the step); one that breaks after text arrived, or ends before its
final event, raises StreamInterrupted and nothing is recorded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import AsyncExitStack, ExitStack
from typing import Any, NoReturn

from django.core.exceptions import ValidationError

from assistant.providers.catalog import read_response
from assistant.providers.wire import StreamReader, Wire

#: Given each text delta as it arrives; achat_step's may be a coroutine function.
OnText = Callable[[str], Any]


class StreamInterrupted(Exception):
    """The model's stream broke off (or ended before its final event) after some of its
    text had arrived: nothing was recorded. `partial_text` is what arrived; run the step
    again for a whole answer."""

    def __init__(self, partial_text: str, reason: str) -> None:
        self.partial_text = partial_text
        super().__init__(
            f"The model's answer broke off after {len(partial_text)} characters ({reason}); "
            "nothing was recorded: run the step again."
        )


class _Reading:
    """What a stream delivered so far, and its final answer."""

    def __init__(self, reader: StreamReader) -> None:
        self.reader = reader
        self.received: list[str] = []

    def take(self, event: Any) -> str:
        delta = self.reader.text(event)
        if delta:
            self.received.append(delta)
        return delta

    def broke(self, error: Exception) -> NoReturn:
        if self.received:
            reason = f"{type(error).__name__}: {error}"
            raise StreamInterrupted("".join(self.received), reason) from error
        raise error

    def final(self) -> Any:
        answer = self.reader.final()
        if answer is None:
            raise StreamInterrupted("".join(self.received), "the stream ended before its end")
        return answer


def asynchronous(returned: Any) -> bool:
    """An awaitable or an async stream (achat_step's call_model returns one)."""
    return inspect.isawaitable(returned) or any(
        hasattr(returned, name) for name in ("__aiter__", "__aenter__")
    )


def _whole_text(returned: Any) -> str:
    result = read_response(returned)
    return result.text if result is not None else ""


def read_answer(chosen: Wire, returned: Any, on_text: OnText | None = None) -> Any:
    """What `call_model` returned, read: a stream to its end (each delta to `on_text`),
    returning its final answer; a response as it is (its text to `on_text`)."""
    if asynchronous(returned):
        if inspect.iscoroutine(returned):
            returned.close()
        raise ValidationError(
            "call_model returned an awaitable or an async stream: use achat_step.",
            code="async_answer",
        )
    reader = chosen.stream_reader(returned)
    if reader is None:
        if on_text is not None and (text := _whole_text(returned)):
            on_text(text)
        return returned
    reading = _Reading(reader)
    try:
        with ExitStack() as stack:
            events = returned
            if hasattr(returned, "__enter__"):
                events = stack.enter_context(returned)
            elif hasattr(returned, "close"):
                stack.callback(returned.close)
            for event in events:
                delta = reading.take(event)
                if delta and on_text is not None:
                    on_text(delta)
    except Exception as error:
        reading.broke(error)
    return reading.final()


async def _hand_on(on_text: OnText | None, text: str) -> None:
    if on_text is not None and text:
        handed = on_text(text)
        if inspect.isawaitable(handed):
            await handed


async def aread_answer(chosen: Wire, returned: Any, on_text: OnText | None = None) -> Any:
    """read_answer's async twin: `returned` is awaited when it is an awaitable, and must
    then be an async stream or a response (a sync stream would block the event loop)."""
    if inspect.isawaitable(returned):
        returned = await returned
    reader = chosen.stream_reader(returned)
    if reader is None:
        await _hand_on(on_text, _whole_text(returned))
        return returned
    if not asynchronous(returned):
        raise ValidationError(
            "call_model returned a synchronous stream: achat_step takes the SDK's async "
            "client (AsyncAnthropic, AsyncOpenAI, genai.Client().aio).",
            code="sync_answer",
        )
    reading = _Reading(reader)
    try:
        async with AsyncExitStack() as stack:
            events = returned
            if hasattr(returned, "__aenter__"):
                events = await stack.enter_async_context(returned)
            elif hasattr(returned, "aclose"):
                stack.push_async_callback(returned.aclose)
            async for event in events:
                await _hand_on(on_text, reading.take(event))
    except Exception as error:
        reading.broke(error)
    return reading.final()
