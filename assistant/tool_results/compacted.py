"""The compacted form of a tool result (truncated, or summarized under a
"summarize" policy) and its write: a batch of results compacted at once
for the pre-call hook and `compact_tool_results` (assistant.tool_results.compaction),
each result with its own audit row."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from assistant import providers as llm
from assistant.history import record_compaction, stopwatch
from assistant.models import CompactionEvent, Message, ref
from assistant.providers import render_transcript
from assistant.settings.conf import CompactionConfig
from assistant.summary import guided_by
from assistant.text import estimate_tokens, truncate_tool_result
from assistant.window import stub_text

logger = logging.getLogger(__name__)


def compact_batch(conversation_id: int, rows: list[Message], config: CompactionConfig) -> int:
    """Compact these results, each with its own audit row and duration: the
    prepared texts read in one query and written in one transaction (an
    interrupted batch loses nothing: the originals stay); a result summarized
    now is committed right after its LLM call, so a killed run keeps what
    it paid for."""
    with_prepared = [row.pk for row in rows if _uses_prepared(row)]
    prepared = dict(
        Message.objects.filter(pk__in=with_prepared).values_list("pk", "prepared_content")
        if with_prepared
        else []
    )
    writes, count = [], 0
    for row in rows:
        with stopwatch() as made:
            text, kind, model = _text_for(row, prepared, config)
        tokens = estimate_tokens(text) + row.blocks_tokens
        if tokens >= row.token_estimate:
            continue  # never replace a result by something as long or longer
        if kind == Message.Compaction.SUMMARIZED and prepared.get(row.pk) is None:
            with transaction.atomic():
                count += _write_compacted(
                    conversation_id, row, (text, kind, model), tokens, made.ms
                )
        else:
            writes.append((row, text, kind, model, tokens, made.ms))
    if not writes:
        return count
    with transaction.atomic():
        for row, text, kind, model, tokens, made_ms in writes:
            count += _write_compacted(conversation_id, row, (text, kind, model), tokens, made_ms)
    return count


# On the way to a model call, the key statements of a newest result are looked for in
# its first 200,000 characters only: the scan of a whole 5,000,000-character result
# takes minutes.
_SCAN_CHARS = 200_000


def truncate_to_fit(
    conversation_id: int, rows: list[Message], excess: int, config: CompactionConfig
) -> int:
    """Truncate these results, largest first, until `excess` tokens are saved: the last
    resort for a newest step the model has not read yet, which cannot fit otherwise.
    Truncated, never summarized (no model call on the way to one); each original kept,
    its recall handle in the marker, each with its audit row as compact_batch's."""
    count = 0
    for row in sorted(rows, key=lambda row: row.token_estimate, reverse=True):
        if excess <= 0:
            break
        with stopwatch() as made:
            content = Message.objects.values_list("content", flat=True).get(pk=row.pk)
            text = truncate_tool_result(
                content, config, handle_ref=ref(row.pk), scan_chars=_SCAN_CHARS
            )
        tokens = estimate_tokens(text) + row.blocks_tokens
        if tokens >= row.token_estimate:
            continue
        made_text = (text, Message.Compaction.TRUNCATED, "")
        with transaction.atomic():
            if _write_compacted(conversation_id, row, made_text, tokens, made.ms):
                count += 1
                excess -= row.token_estimate - tokens
    return count


def _uses_prepared(row: Message) -> bool:
    return bool(row.prepared_compaction) and (
        row.prepared_compaction != Message.Compaction.DEDUPLICATED
    )


def _text_for(
    row: Message, prepared: dict[int, str | None], config: CompactionConfig
) -> tuple[str, str, str]:
    """(text, kind, summarizer model): the worker's prepared text, else made now."""
    text = prepared.get(row.pk)
    if _uses_prepared(row) and text is not None:
        return text, row.prepared_compaction, ""
    original = Message.objects.only("conversation_id", "content", "tool_name", "tool_call_id").get(
        pk=row.pk
    )
    return compacted_text(original, config)


def _write_compacted(
    conversation_id: int, row: Message, made: tuple[str, str, str], tokens: int, made_ms: int
) -> int:
    text, kind, model = made
    with stopwatch() as elapsed:
        # Conditional: a concurrent run that got there first wins.
        updated = Message.objects.filter(pk=row.pk, compaction="", pinned=False).update(
            compacted_content=text,
            compaction=kind,
            compacted_at=timezone.now(),
            token_estimate=tokens,
            prepared_content=None,
            prepared_compaction="",
            prepared_token_estimate=None,
        )
    if updated:
        record_compaction(
            conversation_id,
            CompactionEvent.Kind.TOOL_RESULTS,
            tokens_before=row.token_estimate,
            tokens_after=tokens,
            messages_affected=1,
            duration_ms=made_ms + elapsed.ms,
            summarizer_model=model,
            details={"message_id": row.pk},
        )
    return updated


def compacted_text(message: Message, config: CompactionConfig) -> tuple[str, str, str]:
    """(model-facing text, compaction kind, summarizer model or "")."""
    if config.policy_for(message.tool_name) == "summarize":
        try:
            with guided_by(message.conversation_id, config):
                result = llm.summarize(
                    render_transcript(
                        [
                            {
                                "role": "tool",
                                "content": message.content,
                                "tool_name": message.tool_name,
                                "tool_call_id": message.tool_call_id,
                            }
                        ]
                    )
                )
            header = (
                f"[Summary of a {len(message.content):,}-character {message.tool_name} result; "
                f"the full original is stored and can be restored ({ref(message.pk)}).]"
            )
            return f"{header}\n{result.text}", Message.Compaction.SUMMARIZED, result.model
        except Exception as exc:  # fall back to truncation, never lose the turn
            logger.warning(
                "tool_summary_failed message=%s error=%s", message.pk, type(exc).__name__
            )
    text = truncate_tool_result(message.content, config, handle_ref=ref(message.pk))
    return text, Message.Compaction.TRUNCATED, ""


def planned_texts(
    rows: list[Message], stubbed: list[Message], config: CompactionConfig
) -> tuple[dict[int, tuple[str, str]], int]:
    """What a batch's compaction (`compact_batch` and the stubs) would write, without
    writing it or calling the summarizer: {message id: (text, kind)} for each result it
    replaces, and how many results a "summarize" policy summarizes first (left out:
    their text is the summarizer's to write). The pre-call hook's view ahead of it
    (assistant.precall.hook.next_request)."""
    texts: dict[int, tuple[str, str]] = {}
    for row in stubbed:
        if not row.pinned and row.compaction != Message.Compaction.DEDUPLICATED:
            texts[row.pk] = (stub_text(row.pk), Message.Compaction.DEDUPLICATED)
    summarized = 0
    for row in rows:
        if _uses_prepared(row) and row.prepared_content is not None:
            text, kind = row.prepared_content, row.prepared_compaction
        elif config.policy_for(row.tool_name) == "summarize":
            summarized += 1
            continue
        else:
            text = truncate_tool_result(row.content, config, handle_ref=ref(row.pk))
            kind = Message.Compaction.TRUNCATED
        shorter = estimate_tokens(text) + row.blocks_tokens < row.token_estimate
        if shorter and not row.compaction and not row.pinned:
            texts[row.pk] = (text, kind)
    return texts, summarized
