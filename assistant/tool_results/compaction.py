"""Strategy 1: compact consumed tool results and stub repeated tool calls.

A view over the history, never a rewrite: the model-facing text goes to
`Message.compacted_content`, the original stays in `Message.content` and
`restore_originals` brings it back. Already compacted or stubbed messages
are skipped, so running this twice changes nothing. What to compact is
planned below, in the window (assistant.window.results); this module writes it.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import F, JSONField, Max, Q, QuerySet, TextField, Value
from django.db.models.functions import MD5, Cast
from django.utils import timezone

from assistant import providers as llm
from assistant.history import (
    fresh_state,
    merge_metadata,
    record_compaction,
    stopwatch,
    validated_ids,
    write_state,
)
from assistant.models import (
    CALL_DIGEST,
    CompactionEvent,
    Conversation,
    Message,
    MessageQuerySet,
    MetadataKeys,
    ref,
)
from assistant.providers import media_rates
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.text import (
    KEEP_VERBATIM,
    blocks_tokens,
    compacted_blocks,
    estimate_tokens,
    has_media,
    truncate_tool_result,
)
from assistant.tool_results.compacted import compact_batch, compacted_text
from assistant.window import (
    CompactionPlan,
    WindowState,
    canonical_arguments,
    compacted_ceiling_tokens,
    consumed_boundary,
    load_window,
    plan_compaction,
    refresh_size,
    refreshed_window,
    stub_text,
)


def compact_tool_results(
    conversation: Conversation,
    *,
    include_current_turn: bool = False,
    min_chars: int | None = None,
) -> int:
    """Compact, now, the tool results of completed exchanges (all consumed
    results with `include_current_turn`) of at least `min_chars` characters
    (default: TOOL_RESULT_CHAR_THRESHOLD), and stub older copies of identical
    calls. A result is only ever replaced by something shorter. Returns the
    number of messages compacted or stubbed."""
    config = compaction_config()
    plan = plan_tool_results(
        conversation, include_current_turn=include_current_turn, min_chars=min_chars
    )
    media = compact_old_blocks(conversation.pk, include_current_turn=include_current_turn)
    return apply_plan(conversation.pk, plan, config) + media


def plan_tool_results(
    conversation: Conversation,
    *,
    include_current_turn: bool = False,
    min_chars: int | None = None,
) -> CompactionPlan:
    """The plan compact_tool_results applies (also `compact_conversation --dry-run`'s)."""
    if min_chars is not None and (type(min_chars) is not int or min_chars < 0):
        raise ValidationError(
            f"min_chars must be a whole number of at least 0 (or None), got {min_chars!r}.",
            code="invalid_min_chars",
        )
    boundary = _consumed_boundary(conversation.pk, final_answers_only=not include_current_turn)
    rows = _tool_rows(conversation.pk).filter(id__lt=boundary)
    return plan_compaction(list(rows), compaction_config(), min_chars=min_chars)


def compactable_count(
    conversation: Conversation,
    *,
    include_current_turn: bool = False,
    min_chars: int | None = None,
) -> int:
    """How many tool results `compact_tool_results` would compact or stub now
    (its preview): the planned ones that would shrink, as `compact_batch`
    judges them (a result no shorter once compacted stays as it is). A result
    whose policy summarizes it counts when it is larger than any truncation:
    a summary's length is known only once the summarizer wrote it."""
    config = compaction_config()
    plan = plan_tool_results(
        conversation, include_current_turn=include_current_turn, min_chars=min_chars
    )
    ceiling = compacted_ceiling_tokens(config)
    count = len(plan.stub)
    for row in plan.compact:
        if row.prepared_compaction or row.token_estimate > ceiling:
            count += 1
        elif config.policy_for(row.tool_name) == "prune":
            content = Message.objects.values_list("content", flat=True).get(pk=row.pk)
            text = truncate_tool_result(content, config, handle_ref=ref(row.pk))
            count += estimate_tokens(text) + row.blocks_tokens < row.token_estimate
    return count


def prepare_tool_results(conversation: Conversation) -> int:
    """Run by the post-exchange worker: compute the compacted form of every
    consumed tool result not looked at yet (and the dedup stubs) and keep it
    as *prepared*, leaving what the next request sends unchanged; the
    pre-call hook applies it when it pays. With COMPACTION_TIMING "eager"
    the compaction is applied at once. Only messages after the last run are
    read, so the cost does not grow with the history."""
    config = compaction_config()
    done = fresh_state(conversation.pk).tool_results_processed_through
    boundary = _consumed_boundary(conversation.pk, final_answers_only=False)
    rows = list(_tool_rows(conversation.pk).filter(id__gt=done, id__lt=boundary))
    if not rows:
        return 0
    rows = _with_older_duplicates(conversation.pk, rows)
    plan = plan_compaction(rows, config)
    if config.COMPACTION_TIMING == "eager":
        changed = apply_plan(conversation.pk, plan, config)
    else:
        changed = _store_prepared(plan, config)
    write_state(
        Conversation.objects.filter(pk=conversation.pk),
        {MetadataKeys.TOOL_RESULTS_PROCESSED_THROUGH: max(row.pk for row in rows)},
    )
    return changed


def apply_plan(conversation_id: int, plan: CompactionPlan, config: CompactionConfig) -> int:
    """Make the model see the planned compactions: prepared texts where the
    worker made them, computed now otherwise; each result with its audit row
    (`compact_batch`: an interrupted run loses nothing, and keeps what it paid for)."""
    count = _apply(conversation_id, plan, config)
    if count:
        _mark_context_changed(conversation_id)
    return count


def apply_plan_window(
    conversation_id: int, plan: CompactionPlan, config: CompactionConfig
) -> WindowState | None:
    """`apply_plan` for the pre-call hook: the window it left (loaded once, its
    size stored), None when it changed nothing."""
    if not _apply(conversation_id, plan, config):
        return None
    _mark_epoch(conversation_id)
    return refreshed_window(conversation_id, config)


def _apply(conversation_id: int, plan: CompactionPlan, config: CompactionConfig) -> int:
    if not plan:
        return 0
    count = _stub(conversation_id, plan.stub)
    if plan.compact:
        count += compact_batch(conversation_id, plan.compact, config)
    return count


def restorable(conversation_id: int) -> QuerySet[Message]:
    """The messages `restore_originals` restores (and its preview counts):
    compacted, compacted in waiting (prepared) or with compacted blocks,
    their originals kept."""
    return Message.objects.filter(
        conversation_id=conversation_id, original_dropped_at__isnull=True
    ).filter(~Q(compaction="", prepared_compaction="") | Q(compacted_blocks__isnull=False))


def put_back_originals(conversation_id: int, message_ids: Iterable[int] | None = None) -> list[int]:
    """The write of `restore_originals`, without its event (the caller records one):
    the `restorable` messages (of `message_ids`, all when None) made verbatim again,
    and kept verbatim from now on; provider counts so far are stale (the caller
    stores the new size). Returns their ids."""
    messages = restorable(conversation_id)
    if message_ids is not None:
        messages = messages.filter(pk__in=list(message_ids))
    ids = list(messages.values_list("id", flat=True))
    if not ids:
        return []
    _restore_blocks(ids)
    _mark_epoch(conversation_id)
    merge_metadata(
        Message.objects.filter(pk__in=ids),
        {KEEP_VERBATIM: True},
        compacted_content=None,
        compaction="",
        compacted_at=None,
        token_estimate=F("original_token_estimate"),
        prepared_content=None,
        prepared_compaction="",
        prepared_token_estimate=None,
    )
    return ids


def restore_originals(conversation: Conversation, message_ids: list[int] | None = None) -> int:
    """Show the model the verbatim originals again (and keep them verbatim
    from now on). Messages whose original a retention policy dropped stay
    as they are. Returns the number restored. Its one event reads the
    context before and after, and lists the messages restored."""
    if message_ids is not None:
        message_ids = validated_ids(message_ids, "message_ids", "invalid_message_ids")
    before = load_window(conversation.pk).context_tokens()
    with stopwatch() as elapsed, transaction.atomic():
        ids = put_back_originals(conversation.pk, message_ids)
        restored = len(ids)
        if not restored:
            return 0
        after = refresh_size(conversation.pk)
        record_compaction(
            conversation.pk,
            CompactionEvent.Kind.RESTORE,
            tokens_before=before,
            tokens_after=after,
            messages_affected=restored,
            duration_ms=elapsed.ms,
            details={"message_ids": ids},
        )
    return restored


def _tool_rows(conversation_id: int) -> MessageQuerySet:
    """Tool results, oldest first, without their text (it is loaded only for
    the results actually compacted)."""
    return (
        # A pinned result is never compacted or stubbed (assistant.pins.pinning).
        Message.objects.filter(
            conversation_id=conversation_id, role=Message.Role.TOOL, pinned=False
        )
        .defer(
            "content",
            "compacted_content",
            "prepared_content",
            "blocks",
            "compacted_blocks",
            "search_vector",
        )
        .order_by("id")
    )


def _consumed_boundary(conversation_id: int, *, final_answers_only: bool) -> int:
    """`consumed_boundary` over the conversation's assistant messages (its final
    answers, without tool calls, with `final_answers_only`: results of
    completed exchanges), read as the newest one's id alone."""
    answers = Message.objects.filter(conversation_id=conversation_id, role=Message.Role.ASSISTANT)
    if final_answers_only:
        answers = answers.filter(tool_calls__isnull=True)
    newest = answers.aggregate(last=Max("id"))["last"]
    return consumed_boundary([] if newest is None else [newest])


def _with_older_duplicates(conversation_id: int, rows: list[Message]) -> list[Message]:
    """`rows` plus the latest earlier result of each of their calls, which a new
    copy turns into a duplicate (jsonb equality ignores key order; the results
    before that one were its duplicates, handled when it came): one statement,
    each call one entry of the index assistant_msg_same_call, never a scan of
    the tool's history."""
    calls = {(row.tool_name, canonical_arguments(row.tool_arguments)): row for row in rows}
    if not calls:
        return rows
    seen = {row.pk for row in rows}
    first = min(seen)
    latest = [
        _tool_rows(conversation_id)
        .alias(digest=CALL_DIGEST)
        .filter(
            tool_name=row.tool_name,
            digest=MD5(Cast(Value(row.tool_arguments, JSONField()), TextField())),
            tool_arguments=row.tool_arguments,
            id__lt=first,
        )
        .order_by("-id")[:1]
        for row in calls.values()
    ]
    if len(latest) > 1 and connection.features.supports_slicing_ordering_in_compound:
        older = list(latest[0].union(*latest[1:], all=True))
    else:  # SQLite (the demo's store) takes no LIMIT inside a UNION: one per call
        older = [row for query in latest for row in query]
    return sorted([*older, *rows], key=lambda row: row.pk)


def _store_prepared(plan: CompactionPlan, config: CompactionConfig) -> int:
    """Keep the planned compactions as prepared (the model still sees the
    original until the pre-call hook applies them)."""
    prepared = 0
    for row in plan.stub:
        text = stub_text(row.pk)
        prepared += Message.objects.filter(pk=row.pk, compaction="", pinned=False).update(
            prepared_content=text,
            prepared_compaction=Message.Compaction.DEDUPLICATED,
            prepared_token_estimate=estimate_tokens(text) + F("blocks_tokens"),
        )
    for row in plan.compact:
        if row.prepared_compaction:
            continue
        original = Message.objects.only(
            "conversation_id", "content", "tool_name", "tool_call_id"
        ).get(pk=row.pk)
        text, kind, _model = compacted_text(original, config)
        tokens = estimate_tokens(text) + row.blocks_tokens
        if tokens < row.token_estimate:
            prepared += Message.objects.filter(pk=row.pk, compaction="", pinned=False).update(
                prepared_content=text, prepared_compaction=kind, prepared_token_estimate=tokens
            )
    return prepared


def _stub(conversation_id: int, rows: list[Message]) -> int:
    """Replace older copies of identical calls by the stub, with one audit row."""
    if not rows:
        return 0
    now = timezone.now()
    with stopwatch() as elapsed, transaction.atomic():
        stubbed = after = 0
        ids = []
        for row in rows:
            text = stub_text(row.pk)
            done = (
                Message.objects.filter(pk=row.pk, pinned=False)
                .exclude(compaction=Message.Compaction.DEDUPLICATED)
                .update(
                    compacted_content=text,
                    compaction=Message.Compaction.DEDUPLICATED,
                    compacted_at=now,
                    token_estimate=estimate_tokens(text) + F("blocks_tokens"),
                    prepared_content=None,
                    prepared_compaction="",
                    prepared_token_estimate=None,
                )
            )
            stubbed += done
            after += estimate_tokens(text) * done
            ids += [row.pk] * done
        if stubbed:
            record_compaction(
                conversation_id,
                CompactionEvent.Kind.DEDUP,
                tokens_before=sum(row.token_estimate for row in rows),
                tokens_after=after,
                messages_affected=stubbed,
                duration_ms=elapsed.ms,
                details={"message_ids": ids},
            )
    return stubbed


def _mark_context_changed(conversation_id: int) -> int:
    """Provider counts reported so far described the context before this
    compaction; from the latest message on, estimates fill in until a new one.
    Returns the context's size now."""
    _mark_epoch(conversation_id)
    return refresh_size(conversation_id)


def _mark_epoch(conversation_id: int) -> None:
    latest = Message.objects.filter(conversation_id=conversation_id).aggregate(last=Max("id"))
    write_state(
        Conversation.objects.filter(pk=conversation_id),
        {MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID: latest["last"] or 0},
    )


def compact_old_blocks(conversation_id: int, *, include_current_turn: bool = False) -> int:
    """Content blocks of completed exchanges, as the model needs them no more: thinking
    dropped (Anthropic's API ignores it outside the current turn), each image and
    document a placeholder naming it. With `include_current_turn` (emergency), images and
    documents of the current turn too, its thinking kept (the API requires it). The
    originals stay in `Message.blocks` and `restore_originals` brings them back. Returns
    the number of messages compacted."""
    boundary = _consumed_boundary(conversation_id, final_answers_only=True)
    messages = Message.objects.filter(
        conversation_id=conversation_id,
        blocks__isnull=False,
        compacted_blocks__isnull=True,
        pinned=False,
    )
    if not include_current_turn:
        messages = messages.filter(id__lt=boundary)
    rows = list(
        messages.exclude(metadata__has_key=KEEP_VERBATIM)
        .values("id", "blocks", "blocks_tokens", "token_estimate")
        .order_by("id")
    )
    rates = media_rates(llm.provider_name())
    with stopwatch() as elapsed, transaction.atomic():
        before = after = updated = 0
        ids = []
        for row in rows:
            current = row["id"] >= boundary
            if current and not has_media(row["blocks"]):
                continue  # only thinking, which the current turn must send
            kept = compacted_blocks(row["blocks"], keep_thinking=current, handle_ref=ref(row["id"]))
            kept_tokens = blocks_tokens(kept, rates)
            tokens = max(row["token_estimate"] - row["blocks_tokens"] + kept_tokens, 0)
            # Conditional: a concurrent run that got there first wins.
            if Message.objects.filter(pk=row["id"], compacted_blocks__isnull=True).update(
                compacted_blocks=kept, blocks_tokens=kept_tokens, token_estimate=tokens
            ):
                updated += 1
                before += row["token_estimate"]
                after += tokens
                ids.append(row["id"])
        if updated:
            record_compaction(
                conversation_id,
                CompactionEvent.Kind.MEDIA,
                tokens_before=before,
                tokens_after=after,
                messages_affected=updated,
                duration_ms=elapsed.ms,
                details={"message_ids": ids},
            )
    if updated:
        _mark_context_changed(conversation_id)
    return updated


def _restore_blocks(message_ids: list[int]) -> None:
    """Verbatim blocks again for these messages (restore_originals), with their estimate."""
    rates = media_rates(llm.provider_name())
    compacted = Message.objects.filter(pk__in=message_ids, compacted_blocks__isnull=False)
    for pk, blocks in compacted.values_list("id", "blocks"):
        Message.objects.filter(pk=pk).update(
            compacted_blocks=None, blocks_tokens=blocks_tokens(blocks, rates)
        )
