"""The post-exchange flow, run by a worker after each exchange
(`assistant.tasks.post_exchange_task`): it prepares the compaction of consumed
tool results (applied at once with COMPACTION_TIMING "eager") and builds the
next window summary ahead when a shift is in sight, without changing what the
next request sends. See docs/architecture.rst."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TypeVar

from django.db.models import Q
from django.utils import timezone

from assistant.cost import store_costs
from assistant.history import EMBED_TASK, an_id, enqueue_on_commit, entry_point, stopwatch
from assistant.models import CompactionEvent, Conversation, SummaryVersion
from assistant.ops.logs import log_event
from assistant.provider_compaction import provider_compacts
from assistant.settings.app import app_setting
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.summary import prebuild_window_summary
from assistant.tool_results import compact_old_blocks, prepare_tool_results
from assistant.window import (
    decide,
    load_window,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


@entry_point(conversation_id=an_id)
def process_exchange(conversation_id: int) -> bool:
    """The post-exchange pipeline: prepare compaction of consumed tool results
    (applied at once with COMPACTION_TIMING "eager") and pre-build the next
    window summary. Idempotent; False when the conversation is gone or deleted."""
    conversation = Conversation.objects.filter(pk=conversation_id, deleted_at__isnull=True).first()
    if conversation is None:
        log_event("post_exchange_skipped", conversation_id=conversation_id, reason="missing")
        return False
    exchange_stamp = conversation.last_exchange_at
    with stopwatch() as elapsed:
        config = compaction_config()
        prepared = prepare_tool_results(conversation)
        if config.COMPACTION_TIMING == "eager":
            prepared += compact_old_blocks(conversation_id)
        prebuilt = shift_ahead(conversation_id, config) and prebuild_window_summary(conversation)
        # The admin list's figures, with this exchange's calls and compactions.
        store_costs([conversation_id])
    embeddings_on = str(app_setting("ASSISTANT_EMBEDDINGS")).lower() != "off"
    if embeddings_on and compacted_since(conversation_id, conversation.post_exchange_done_at):
        # The texts semantic recall searches (docs/operations.rst, "Semantic recall").
        enqueue_on_commit(EMBED_TASK)
    record_processed(conversation_id, exchange_stamp)
    log_event(
        "post_exchange_done",
        conversation_id=conversation_id,
        compacted=prepared,
        prebuilt=prebuilt,
        duration_ms=elapsed.ms,
    )
    return True


def compacted_since(conversation_id: int, since: datetime | None) -> bool:
    """Whether something was compacted or a summary version written in the
    conversation since `since` (the previous exchange processed; None: ever), on
    the chat path's hook or here: new texts to embed."""
    events = CompactionEvent.objects.compactions().filter(conversation_id=conversation_id)
    versions = SummaryVersion.objects.filter(conversation_id=conversation_id)
    if since is not None:
        events = events.filter(created_at__gt=since)
        versions = versions.filter(created_at__gt=since)
    return events.exists() or versions.exists()


def record_processed(conversation_id: int, exchange_stamp: datetime | None) -> None:
    """Record which exchange was processed; the sweep compares the two stamps.
    Two deliveries for one conversation may run at once on two children and
    end in either order, so the stamp only moves forward: a slower run of an
    earlier exchange never takes back a later one's."""
    if exchange_stamp is None:
        return
    Conversation.objects.filter(pk=conversation_id).filter(
        Q(post_exchange_done_at__isnull=True) | Q(post_exchange_done_at__lt=exchange_stamp)
    ).update(post_exchange_done_at=exchange_stamp)


def shift_ahead(conversation_id: int, config: CompactionConfig) -> bool:
    """Whether a window shift is in sight (`Plan.shift_in_sight`), so a
    summary the worker builds now will be used: never while the provider
    compacts in ours' place (PROVIDER_COMPACTION "provider")."""
    if config.PROVIDER_COMPACTION == "provider":
        state = load_window(conversation_id, config)
        if provider_compacts(state, config):
            return False
    if config.COMPACTION_TIMING == "eager":
        return True
    state = load_window(conversation_id, config)
    return decide(state, config, timezone.now()).shift_in_sight
