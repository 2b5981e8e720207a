"""Strategy 1: compact consumed tool results and stub repeated tool calls.

A view over the history, never a rewrite: the model-facing text goes to
`Message.compacted_content`, the original stays in `Message.content` and
`restore_originals` brings it back. Already compacted or stubbed messages
are skipped, so running this twice changes nothing.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from typing import Any

from django.db import transaction
from django.db.models import F, Max
from django.db.models.functions import Length
from django.utils import timezone

from assistant import llm
from assistant.conf import CompactionConfig, compaction_config
from assistant.events import record_compaction, stopwatch
from assistant.llm.prompts import render_transcript
from assistant.metadata import merge_metadata
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys
from assistant.salience import key_sentences
from assistant.tokens import estimate_tokens

logger = logging.getLogger(__name__)

STUB = "[Already retrieved earlier — omitted to reduce context]"
# Set on a message whose original was restored: compaction leaves it alone.
KEEP_VERBATIM = "keep_verbatim"
_BATCH = 50


def canonical_arguments(arguments: Any) -> str:
    """Arguments compared canonically: key order and whitespace do not matter."""
    return json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compact_tool_results(
    conversation: Conversation,
    *,
    include_current_turn: bool = False,
    min_chars: int | None = None,
) -> int:
    """Compact tool results of completed exchanges (all of them with
    `include_current_turn`) of at least `min_chars` characters (default:
    TOOL_RESULT_CHAR_THRESHOLD), then stub older copies of identical calls.
    Returns the number of messages compacted or stubbed."""
    config = compaction_config()
    threshold = config.TOOL_RESULT_CHAR_THRESHOLD if min_chars is None else min_chars
    rows = list(
        Message.objects.filter(conversation=conversation, role=Message.Role.TOOL)
        .exclude(compaction=Message.Compaction.DEDUPLICATED)
        .exclude(metadata__has_key=KEEP_VERBATIM)
        .annotate(length=Length("content"))
        .values("id", "tool_name", "tool_arguments", "compaction", "token_estimate", "length")
        .order_by("id")
    )
    rows = [row for row in rows if config.policy_for(row["tool_name"]) != "keep"]
    boundary = None if include_current_turn else _last_final_answer_id(conversation)
    consumed = [row for row in rows if boundary is None or row["id"] < boundary]
    stubbed = _stub_duplicates(conversation.pk, rows, config)
    large = [
        row
        for row in consumed
        if not row["compaction"] and row["length"] >= threshold and row["id"] not in stubbed
    ]
    compacted = _compact_large(conversation.pk, large, config)
    if compacted or stubbed:
        _mark_context_changed(conversation.pk)
    return compacted + len(stubbed)


def restore_originals(conversation: Conversation, message_ids: list[int] | None = None) -> int:
    """Show the model the verbatim originals again (and keep them verbatim
    from now on). Messages whose original a retention policy dropped stay
    as they are. Returns the number restored."""
    messages = Message.objects.filter(conversation=conversation, original_dropped_at__isnull=True)
    messages = messages.exclude(compaction="")
    if message_ids is not None:
        messages = messages.filter(pk__in=message_ids)
    with stopwatch() as elapsed, transaction.atomic():
        rows = list(messages.values_list("id", "token_estimate", "original_token_estimate"))
        ids = [row[0] for row in rows]
        restored = merge_metadata(
            Message.objects.filter(pk__in=ids),
            {KEEP_VERBATIM: True},
            compacted_content=None,
            compaction="",
            compacted_at=None,
            token_estimate=F("original_token_estimate"),
        )
        if not restored:
            return 0
        record_compaction(
            conversation.pk,
            CompactionEvent.Kind.RESTORE,
            tokens_before=sum(row[1] for row in rows),
            tokens_after=sum(row[2] for row in rows),
            messages_affected=restored,
            duration_ms=elapsed.ms,
            details={"message_ids": ids[:100]},
        )
    _mark_context_changed(conversation.pk)
    return restored


def _last_final_answer_id(conversation: Conversation) -> int | None:
    """Tool results before the latest assistant answer (one without tool
    calls) belong to completed exchanges: the model has consumed them."""
    return (
        Message.objects.filter(
            conversation=conversation, role=Message.Role.ASSISTANT, tool_calls__isnull=True
        ).aggregate(last=Max("id"))["last"]
        or 0
    )


def _compact_large(conversation_id: int, rows: list[dict], config: CompactionConfig) -> int:
    """Compact in batches. A batch's texts are computed first (a summarize
    policy calls the LLM: never inside a transaction), then its updates and
    its audit row commit together, so a killed worker leaves either both or
    neither and the redelivered task redoes exactly what is missing."""
    count = 0
    for start in range(0, len(rows), _BATCH):
        batch = rows[start : start + _BATCH]
        with stopwatch() as elapsed:
            originals = Message.objects.in_bulk([row["id"] for row in batch])
            texts = [(row, *_compacted_text(originals[row["id"]], config)) for row in batch]
            before = after = updated = 0
            model = ""
            with transaction.atomic():
                for row, text, kind, used_model in texts:
                    tokens = estimate_tokens(text)
                    # Conditional: a concurrent run that got there first wins.
                    if Message.objects.filter(pk=row["id"], compaction="").update(
                        compacted_content=text,
                        compaction=kind,
                        compacted_at=timezone.now(),
                        token_estimate=tokens,
                    ):
                        updated += 1
                        before += row["token_estimate"]
                        after += tokens
                        model = used_model or model
                if updated:
                    record_compaction(
                        conversation_id,
                        CompactionEvent.Kind.TOOL_RESULTS,
                        tokens_before=before,
                        tokens_after=after,
                        messages_affected=updated,
                        duration_ms=elapsed.ms,
                        summarizer_model=model,
                    )
        count += updated
    return count


def _compacted_text(message: Message, config: CompactionConfig) -> tuple[str, str, str]:
    """(model-facing text, compaction kind, summarizer model or "")."""
    if config.policy_for(message.tool_name) == "summarize":
        try:
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
                "the full original is stored and can be restored.]"
            )
            return f"{header}\n{result.text}", Message.Compaction.SUMMARIZED, result.model
        except Exception as exc:  # fall back to truncation, never lose the turn
            logger.warning(
                "tool_summary_failed message=%s error=%s", message.pk, type(exc).__name__
            )
    return truncate_tool_result(message.content, config), Message.Compaction.TRUNCATED, ""


def truncate_tool_result(content: str, config: CompactionConfig | None = None) -> str:
    """The head of the result, a marker giving the original size, and the key
    sentences of the rest: those holding its most specific identifiers (ids,
    paths, URLs, amounts, errors), so a fact deep in a page is not cut off."""
    config = config or compaction_config()
    head = content[: config.TRUNCATION_KEEP_CHARS]
    if len(content) > len(head):
        # End the head at a word boundary: a cut identifier misleads the model.
        boundary = max(head.rfind(" "), head.rfind("\n"), head.rfind(">") + 1)
        if boundary > len(head) * 3 // 4:
            head = head[:boundary]
    marker = (
        f"[Tool result compacted: showing the first {len(head):,} of {len(content):,} "
        "characters. The full original is stored and can be restored.]"
    )
    # From the whole result, so a sentence cut by the head is kept whole.
    details = key_sentences(content, config.TRUNCATION_DETAILS_MAX_CHARS, exclude=head)
    text = f"{marker}\n{head}"
    if details:
        text += "\n[Key details further in the original:\n" + "\n".join(details) + "]"
    return text


def _stub_duplicates(conversation_id: int, rows: list[dict], config: CompactionConfig) -> set[int]:
    """For each (tool, canonical arguments) called MIN_CALLS_TO_DEDUP times
    or more, every result but the newest becomes the stub. Returns the ids."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["tool_name"], canonical_arguments(row["tool_arguments"]))].append(row)
    older = [
        row
        for group in groups.values()
        if len(group) >= config.MIN_CALLS_TO_DEDUP
        for row in group[:-1]  # rows are in id order: the last is the newest
    ]
    if not older:
        return set()
    ids = [row["id"] for row in older]
    stub_tokens = estimate_tokens(STUB)
    with stopwatch() as elapsed, transaction.atomic():
        stubbed = (
            Message.objects.filter(pk__in=ids)
            .exclude(compaction=Message.Compaction.DEDUPLICATED)
            .update(
                compacted_content=STUB,
                compaction=Message.Compaction.DEDUPLICATED,
                compacted_at=timezone.now(),
                token_estimate=stub_tokens,
            )
        )
        if stubbed:
            record_compaction(
                conversation_id,
                CompactionEvent.Kind.DEDUP,
                tokens_before=sum(row["token_estimate"] for row in older),
                tokens_after=stub_tokens * stubbed,
                messages_affected=stubbed,
                duration_ms=elapsed.ms,
            )
    return set(ids)


def _mark_context_changed(conversation_id: int) -> None:
    """Provider counts reported so far described the context before this
    compaction; from the latest message on, estimates fill in until a new one."""
    latest = Message.objects.filter(conversation_id=conversation_id).aggregate(last=Max("id"))
    merge_metadata(
        Conversation.objects.filter(pk=conversation_id),
        {MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: latest["last"] or 0},
    )
