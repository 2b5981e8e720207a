"""The pre-call flow's walk: one conversation past its trigger, followed
through `ensure_context_summary` (docs/architecture.rst, the flows).

The measure. A profile hook (`sys.setprofile`) sees every Python function
the call enters. A function entry counts when it is in an `assistant.*`
module and the nearest `assistant.*` frame below it on the stack is the
pre-call flow module (`assistant.precall.hook`), or none (the entry itself):
the calls the flow makes, into its own helpers and into the modules it runs
steps from. What those callees do inside (the window's loading, the
summarizer, the ORM, Celery, the SDKs) is theirs and not counted;
frames of Django, Celery or the SDKs between the flow and a callee are
looked through (a context manager's generator, entered through contextlib,
counts as the flow's call). A generator resumed is not a new entry, nor is
a comprehension.

The walk bounces when the flow calls into a module, then into another one,
and comes back to the first: every module but the flow's must be entered in
one stretch (the flow's own helpers, which run the steps, may come between
two calls into one module: two steps owned by one module in a row).
"""

from __future__ import annotations

import inspect
import itertools
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from assistant.metadata_keys import StateOf
from assistant.models import CompactionEvent, Conversation
from assistant.services import add_message, ensure_context_summary
from assistant.window import load_window
from assistant.window.ledger import Ledger
from tests.builders import html

pytestmark = pytest.mark.django_db

FLOW = "assistant.precall.hook"
_GENERATORS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _module(frame: FrameType) -> str:
    return frame.f_globals.get("__name__", "")


def _ours(module: str) -> bool:
    return module == "assistant" or module.startswith("assistant.")


class Walk:
    """The function entries the flow makes, in order, as (module, function)."""

    def __init__(self, flow: str) -> None:
        self.flow = flow
        self.entries: list[tuple[str, str]] = []
        self._started: set[FrameType] = set()

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        module = _module(frame)
        name = frame.f_code.co_name
        if not _ours(module) or name.startswith("<") or frame in self._started:
            return
        if frame.f_code.co_flags & _GENERATORS:
            self._started.add(frame)  # its later resumptions are not entries
        caller = frame.f_back
        while caller is not None and not _ours(_module(caller)):
            caller = caller.f_back
        if caller is None or _module(caller) == self.flow:
            self.entries.append((module, name))

    def stretches(self) -> list[str]:
        """The modules the flow entered besides its own, in order, consecutive
        entries of one module (with the flow's own calls between them) as one."""
        modules = [module for module, _ in self.entries if module != self.flow]
        return [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]

    def reentered(self) -> list[str]:
        """The modules entered again after another one (not the flow's) was."""
        stretches = self.stretches()
        return sorted({m for m in stretches if stretches.count(m) > 1})


@contextmanager
def walk(flow: str = FLOW) -> Iterator[Walk]:
    recorder = Walk(flow)
    previous = sys.getprofile()
    sys.setprofile(recorder)
    try:
        yield recorder
    finally:
        sys.setprofile(previous)


def _count(conversation) -> int:
    """The provider's count of the request about to be sent: a tenth and a
    half above our estimate, as dense text runs."""
    return math.ceil(load_window(conversation.pk).estimated_tokens() * 1.15)


def _chat_to_the_trigger(conversation, trigger: int) -> None:
    """One conversation as the chat loop runs it, the hook before every model
    call and every answer with the provider's count, up to the call that finds
    the context past `trigger` (not made: the test makes it)."""
    for turn in itertools.count():
        add_message(conversation, "user", f"show post {turn}")
        for answer in range(2):  # the call asking for the page, then the answer
            if load_window(conversation.pk).context_tokens() >= trigger:
                return
            ensure_context_summary(conversation)
            if answer == 0:
                call = {"id": f"call_{turn}", "name": "get_blog_post", "arguments": {"id": turn}}
                add_message(
                    conversation,
                    "assistant",
                    "",
                    tool_calls=[call],
                    input_tokens=_count(conversation),
                )
                page = html(3000, marker=f"Post {turn} ")
                add_message(conversation, "tool", page, tool_call_id=call["id"])
            else:
                text = f"Post {turn} is about spring launches. " + "y" * 600
                add_message(conversation, "assistant", text, input_tokens=_count(conversation))


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 4000,
        "MAX_RECENT_TOKENS": 1200,
    }
)
def test_past_the_trigger_the_flow_runs_its_plan_without_bouncing(conversation):
    _chat_to_the_trigger(conversation, 4000)

    with walk() as path:
        summary = ensure_context_summary(conversation)

    # The step was taken: the window shifted and its summary comes back.
    assert summary and summary == load_window(conversation.pk).summary
    shifts = CompactionEvent.objects.filter(conversation=conversation, kind="window_summary")
    assert shifts.count() == 1
    assert len(path.entries) < 25, path.entries
    assert path.reentered() == [], path.stretches()


@override_settings(
    ASSISTANT_COMPACTION={
        "VERBATIM_AFTER_SHIFT": "recent",
        "CONTEXT_TOKEN_THRESHOLD": 4000,
        "MAX_RECENT_TOKENS": 1200,
    }
)
def test_the_ledger_is_written_once_with_every_step_of_the_call_booked(conversation):
    _chat_to_the_trigger(conversation, 4000)

    events = CompactionEvent.objects.filter(conversation=conversation)
    earlier = list(events.values_list("pk", flat=True))
    booked = Ledger.of(StateOf(Conversation.objects.get(pk=conversation.pk))).gap
    estimated = load_window(conversation.pk).estimated_tokens()

    with CaptureQueriesContext(connection) as queries:
        ensure_context_summary(conversation)

    # Two steps changed the window (a results batch, then the shift)...
    kinds = events.exclude(pk__in=earlier).order_by("pk").values_list("kind", flat=True)
    assert list(kinds) == ["tool_results", "window_summary"]
    # ...and the ledger was written once, after both, with both booked.
    writes = [
        q["sql"] for q in queries if q["sql"].startswith("UPDATE") and "cache_ledger" in q["sql"]
    ]
    assert len(writes) == 1
    ledger = Ledger.of(StateOf(Conversation.objects.get(pk=conversation.pk)))
    # What the two steps freed between them, in the window's estimates (the shift's event
    # reads the request before and after the whole rewrite: docs/admin.rst).
    freed = estimated - load_window(conversation.pk).estimated_tokens()
    assert ledger.gap == booked + freed
