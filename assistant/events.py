"""The audit trail: a CompactionEvent row and one structured log line per
compaction. Logs carry ids, kinds, counts and durations, never content."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from assistant.logs import log_event
from assistant.models import CompactionEvent


@dataclass
class Stopwatch:
    started: float = 0.0

    @property
    def ms(self) -> int:
        return int((time.perf_counter() - self.started) * 1000)


@contextmanager
def stopwatch() -> Iterator[Stopwatch]:
    yield Stopwatch(time.perf_counter())


def record_compaction(
    conversation_id: int,
    kind: str,
    *,
    tokens_before: int,
    tokens_after: int,
    messages_affected: int,
    duration_ms: int,
    summarizer_model: str = "",
    summarizer_input_tokens: int = 0,
    summarizer_output_tokens: int = 0,
    details: dict | None = None,
) -> CompactionEvent:
    event = CompactionEvent.objects.create(
        conversation_id=conversation_id,
        kind=kind,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        messages_affected=messages_affected,
        duration_ms=duration_ms,
        summarizer_model=summarizer_model,
        summarizer_input_tokens=summarizer_input_tokens,
        summarizer_output_tokens=summarizer_output_tokens,
        details=details or {},
    )
    log_event(
        kind,
        conversation_id=conversation_id,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        messages_affected=messages_affected,
        duration_ms=duration_ms,
        summarizer_model=summarizer_model or None,
    )
    return event
