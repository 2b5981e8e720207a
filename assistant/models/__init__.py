"""Conversations, their append-only messages, and the compaction audit log.

Compaction is a view over the history, never a rewrite of it:
`Message.content` always holds the verbatim original, and the model-facing
text of a compacted message lives in `Message.compacted_content`. The hot
query (`Message.objects.model_view()`) selects
COALESCE(compacted_content, content), so the originals of compacted messages
never leave the database on the chat path.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.core.exceptions import ValidationError
from django.db import models
from pgvector.django import VectorField

from assistant.metadata_keys import STATE_FIELDS, ConversationMetadata, StateOf, WindowStateColumns
from assistant.metadata_keys import MetadataKeys as MetadataKeys  # the state fields' names
from assistant.models.links import MAX_WALK as MAX_WALK
from assistant.models.links import ancestors as ancestors
from assistant.models.querysets import (
    CACHE_BREAK,
    CALL_DIGEST,
    CompactionEventQuerySet,
    MessageQuerySet,
)
from assistant.models.querysets import SEARCH_INDEX_CHARS as SEARCH_INDEX_CHARS
from assistant.models.querysets import SIZE_FIELDS as SIZE_FIELDS
from assistant.models.querysets import document_of as document_of


def handle(message_id: int) -> str:
    """The short, stable name of a message's stored original in the texts the model
    sees ("m4182", written "ref m4182"): the recall tool reads the original by it.
    Message ids never change, and recall is scoped to the conversation."""
    return f"m{message_id}"


def ref(message_id: int) -> str:
    return f"ref {handle(message_id)}"


class Conversation(WindowStateColumns):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="assistant_conversations",
    )
    title = models.CharField(max_length=255, blank=True, default="")
    parent_conversation = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )

    class Link(models.TextChoices):
        """How a conversation is linked to its parent (blank: a root)."""

        SESSION = "session"
        CONTINUATION = "continuation"
        BRANCH = "branch"

    # How it is linked to `parent_conversation` (assistant.fork.sessions): session
    # links do not count toward MAX_FORK_DEPTH.
    parent_link = models.CharField(
        max_length=16, choices=Link.choices, blank=True, default="", db_default=""
    )
    # The child shown below this one on the tree's active path (NULL: this one itself
    # goes on; assistant.fork.tree.set_active_branch).
    active_branch = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    metadata = models.JSONField(default=dict, blank=True, db_default={})
    system_prompt = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Post-exchange bookkeeping: finish_exchange stamps the first, the
    # post-exchange task copies it into the second when done. A row where
    # they differ had work that never ran (the sweep finds it).
    last_exchange_at = models.DateTimeField(null=True, blank=True)
    post_exchange_done_at = models.DateTimeField(null=True, blank=True)
    # Summary lease: one summary generation per conversation at a time,
    # claimed with a conditional UPDATE, never held across a transaction.
    summary_lease_token = models.UUIDField(null=True, blank=True)
    summary_lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The holder's PostgreSQL backend: once it is gone the lease is dead.
    summary_lease_holder_pid = models.IntegerField(null=True, blank=True)
    # Calls of the recall tools (assistant.recall) the model made here.
    recall_count = models.PositiveIntegerField(default=0, db_default=0)
    # How large the next request's context is (assistant.window.context_size),
    # stored whenever the window changes: the admin list shows, sorts and
    # filters on it, so it is the figure the pre-call hook decides on. NULL on
    # a conversation stored before the column, until `migrate` measures it.
    context_tokens = models.PositiveBigIntegerField(null=True, default=0)
    # What a stored message adds to that size without measuring the window
    # again (assistant.history.append): our estimate of the context when it was
    # stored (WindowState.estimated_tokens), and whether it was the provider's
    # count plus estimates. NULL: unknown; the next message measures the
    # window. A write of the state the size is made of (assistant.history.state_writes)
    # and every save reset it.
    context_estimate = models.PositiveBigIntegerField(null=True, default=None)
    context_counted = models.BooleanField(default=False, db_default=False)
    # What the conversation cost and saved (assistant.cost.pricing), as last
    # computed, with what it covered: {"cover": [newest message id, newest event
    # id, fixed part's estimate, pricing], "cost": {...}}. The admin list reads it
    # while it covers what the conversation holds; NULL: never computed.
    cost_figures = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-updated_at"]
        permissions = [
            ("fork_conversation", "Can fork or branch a conversation"),
            ("compact_conversation", "Can compact a conversation"),
        ]
        indexes = [
            # A user's conversation list, newest first.
            models.Index(fields=["user", "-updated_at"], name="assistant_conv_user_recent"),
            # Purge of soft-deleted conversations (cleanup task).
            models.Index(
                fields=["deleted_at"],
                name="assistant_conv_deleted",
                condition=models.Q(deleted_at__isnull=False),
            ),
            # Sweep for exchanges whose post-exchange task never ran: only
            # those rows, a handful, whatever the number of conversations.
            models.Index(
                fields=["id"],
                name="assistant_conv_unprocessed",
                condition=models.Q(deleted_at__isnull=True, last_exchange_at__isnull=False)
                & (
                    models.Q(post_exchange_done_at__isnull=True)
                    | models.Q(post_exchange_done_at__lt=models.F("last_exchange_at"))
                ),
            ),
            # The other scheduled cleanup queries and the admin's state
            # filters: partial indexes holding only the rows each one looks
            # at (a query whose WHERE repeats the condition can use them).
            models.Index(
                fields=["summary_lease_expires_at"],
                name="assistant_conv_lease",
                condition=models.Q(summary_lease_expires_at__isnull=False),
            ),
            models.Index(
                fields=["id"],
                name="assistant_conv_through",
                condition=models.Q(compaction_through_message_id__isnull=False),
            ),
            models.Index(
                fields=["id"],
                name="assistant_conv_pending",
                condition=models.Q(pending_through_message_id__isnull=False),
            ),
            models.Index(
                fields=["id"],
                name="assistant_conv_fork_deferred",
                condition=models.Q(summary_deferred=True),
            ),
            # The admin list sorted by context size, and its "context" filter.
            models.Index(fields=["context_tokens"], name="assistant_conv_context"),
            models.Index(
                fields=["-updated_at"],
                name="assistant_conv_summarized",
                condition=models.Q(compaction_summary__isnull=False),
            ),
            # The session summaries the embedding job embeds (the model's, once landed).
            models.Index(
                fields=["id"],
                name="assistant_conv_session_summary",
                condition=models.Q(
                    parent_link="session",
                    parent_conversation_summary__isnull=False,
                    summary_deferred=False,
                ),
            ),
        ]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # A save may change what the size is made of (the system prompt): the
        # next stored message measures the window again.
        self.context_estimate = None
        updating = not (self._state.adding or kwargs.get("force_insert") or args)
        if kwargs.get("update_fields") is None and updating:
            # The state columns are written by assistant.history.state_writes alone: a
            # save of a copy loaded earlier must not put back what it held.
            kwargs["update_fields"] = _SAVED_FIELDS
        if kwargs.get("update_fields") is not None:
            kwargs["update_fields"] = {*kwargs["update_fields"], "context_estimate"}
        super().save(*args, **kwargs)

    def clean(self) -> None:
        """A conversation cannot continue itself, nor one of its own forks (the admin's
        change form): the parent chain must end."""
        if self.pk is None or self.parent_conversation_id is None:
            return
        ancestor: int | None = self.parent_conversation_id
        seen: set[int] = set()
        while ancestor is not None and ancestor not in seen:
            if ancestor == self.pk:
                parent = self.parent_conversation_id
                message = (
                    "A conversation cannot be its own parent."
                    if parent == self.pk
                    else f"Conversation {parent} continues this conversation: it cannot be "
                    "its parent (a cycle of forks)."
                )
                raise ValidationError(
                    {"parent_conversation": ValidationError(message, code="fork_cycle")}
                )
            seen.add(ancestor)
            ancestor = (
                Conversation.objects.filter(pk=ancestor)
                .values_list("parent_conversation_id", flat=True)
                .first()
            )

    # The typed reads over the state columns (assistant.metadata_keys).

    @property
    def meta(self) -> ConversationMetadata:
        return ConversationMetadata(StateOf(self))


# What Conversation.save writes on an existing row: every column but the state.
_SAVED_FIELDS = {
    field.name
    for field in Conversation._meta.concrete_fields
    if not field.primary_key and field.name not in {*STATE_FIELDS, "cost_figures", "active_branch"}
}


ONE_RESULT_PER_CALL = "assistant_msg_one_result_per_call"


class Message(models.Model):
    class Role(models.TextChoices):
        SYSTEM = "system"
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    class Compaction(models.TextChoices):
        SUMMARIZED = "summarized"
        TRUNCATED = "truncated"
        DEDUPLICATED = "deduplicated"

    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.CASCADE,
        related_name="messages",
        # (conversation, id) serves every lookup by conversation; an index of the
        # conversation alone would tempt the planner to filter `id > split` row by row.
        db_index=False,
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    # The verbatim original, never overwritten by compaction.
    content = models.TextField(blank=True, default="")
    # What the model sees instead of `content` once compacted; NULL = verbatim.
    compacted_content = models.TextField(null=True, blank=True)  # noqa: DJ001 (NULL = verbatim)
    compaction = models.CharField(max_length=16, choices=Compaction.choices, blank=True, default="")
    compacted_at = models.DateTimeField(null=True, blank=True)
    # Content blocks besides the text (assistant.text.blocks), verbatim: thinking on assistant
    # messages, images and documents on user messages and tool results.
    blocks = models.JSONField(null=True, blank=True)
    # What the model sees of them once the exchange is over: thinking dropped, images and
    # documents as placeholders naming them. NULL = verbatim.
    compacted_blocks = models.JSONField(null=True, blank=True)
    # The part of token_estimate the blocks the model sees take (they are not loaded to
    # re-estimate a message whose text is compacted).
    blocks_tokens = models.PositiveIntegerField(default=0)
    # Compaction the worker prepared but the model does not see yet: the
    # pre-call hook applies it when it pays (docs/compaction.rst), copying these three
    # into compacted_content, compaction and token_estimate.
    prepared_content = models.TextField(null=True, blank=True)  # noqa: DJ001 (NULL = none)
    prepared_compaction = models.CharField(
        max_length=16, choices=Compaction.choices, blank=True, default=""
    )
    prepared_token_estimate = models.PositiveIntegerField(null=True, blank=True)
    # Set when a retention policy dropped the original of a compacted message.
    original_dropped_at = models.DateTimeField(null=True, blank=True)
    tool_calls = models.JSONField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=255, blank=True, default="")
    # On a tool result: the assistant message whose call it answers. A model
    # may reuse a call id once its first call was answered, so the id alone
    # does not name the call. DO_NOTHING keeps the purge's bulk delete one
    # query; messages are append-only and go with their whole conversation.
    tool_call_message = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="tool_results",
        db_index=False,  # the one-result-per-call constraint's index leads with it
    )
    tool_name = models.CharField(max_length=255, blank=True, default="")
    tool_arguments = models.JSONField(null=True, blank=True)
    # Usage reported by the provider for the call that produced this message.
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_read_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Who answered (assistant messages): the provider's name in assistant.providers
    # ("anthropic", "gemini", "openai", "openai_responses") and the model id it
    # reported. Prices, windows and telemetry read them (docs/providers.rst).
    provider = models.CharField(max_length=32, blank=True, default="", db_default="")
    model = models.CharField(max_length=255, blank=True, default="", db_default="")
    # Heuristic token counts, stored so that nothing re-reads content to count:
    # of what the model sees now, and of the original.
    token_estimate = models.PositiveIntegerField(default=0)
    original_token_estimate = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True, db_default={})
    pinned = models.BooleanField(default=False, db_default=False)  # see pins/pinning.py
    # The provider's own compaction this message carries (docs/provider-compaction.rst):
    # {"wire", "block" (Anthropic's compaction block or OpenAI's compaction item, verbatim),
    # "live" (it holds a summary: the requests start at this message), "on_demand",
    # "usage" (the compaction's own tokens)}. NULL: none. The messages before it stay.
    provider_compaction = models.JSONField(null=True, blank=True)
    # search_history's full-text document of `content` (its first SEARCH_INDEX_CHARS):
    # written with the message (assistant.history.append), emptied with the original.
    # NULL on SQLite, the demo's store, which searches substrings only.
    search_vector = SearchVectorField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MessageQuerySet.as_manager()
    # What the model sees (the compacted text, else the original): annotated by
    # `MessageQuerySet.model_view`, not a column.
    model_content: str

    class Meta:
        ordering = ["id"]
        indexes = [
            # build_context and the split: a conversation's messages by id.
            models.Index(fields=["conversation", "id"], name="assistant_msg_conv_id"),
            # The window query also reads every system message: without this, it
            # would filter all of a long conversation's messages to find them.
            models.Index(
                fields=["conversation", "id"],
                name="assistant_msg_system",
                condition=models.Q(role="system"),
            ),
            models.Index(  # the window query's pinned messages below the split
                fields=["conversation", "id"],
                name="assistant_msg_pinned",
                condition=models.Q(pinned=True),
            ),
            # Dedup and per-tool lookups: tool results by conversation and tool.
            models.Index(
                fields=["conversation", "tool_name", "id"],
                name="assistant_msg_tool_name",
                condition=models.Q(role="tool"),
            ),
            # The duplicate check: the latest result of one call (tool and arguments).
            # By a digest: a btree entry holds at most a third of a page, arguments more.
            models.Index(
                models.F("conversation_id"),
                models.F("tool_name"),
                CALL_DIGEST,
                models.F("id"),
                name="assistant_msg_same_call",
                condition=models.Q(role="tool", pinned=False),
            ),
            # The newest assistant message, and the newest final answer (no tool
            # calls): an index lookup whatever the conversation's length.
            models.Index(
                fields=["conversation", "id"],
                name="assistant_msg_answers",
                condition=models.Q(role="assistant"),
            ),
            models.Index(
                fields=["conversation", "id"],
                name="assistant_msg_final",
                condition=models.Q(role="assistant", tool_calls__isnull=True),
            ),
            # search_history (assistant.recall): full text and substrings, each
            # one GIN index holding the conversation too (btree_gin), so that a
            # search reads the matches of one conversation, never all its rows.
            GinIndex(
                models.F("conversation_id"), models.F("search_vector"), name="assistant_msg_search"
            ),
            GinIndex(
                fields=["conversation", "content"],
                opclasses=["int8_ops", "gin_trgm_ops"],
                name="assistant_msg_trgm",
            ),
            # The pre-call hook applying what the worker prepared.
            models.Index(
                fields=["conversation", "id"],
                name="assistant_msg_prepared",
                condition=~models.Q(prepared_compaction=""),
            ),
            # The retention job that drops originals of compacted messages.
            models.Index(
                fields=["compacted_at"],
                name="assistant_msg_compacted",
                condition=models.Q(original_dropped_at__isnull=True)
                & models.Q(compacted_content__isnull=False),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(role__in=["system", "user", "assistant", "tool"]),
                name="assistant_msg_role_valid",
            ),
            models.CheckConstraint(
                condition=~models.Q(role="tool") | ~models.Q(tool_call_id=""),
                name="assistant_msg_tool_has_call_id",
            ),
            # One result per call, whatever the number of concurrent writers.
            # Its index also answers add_message's "is this call answered?".
            models.UniqueConstraint(
                fields=["tool_call_message", "tool_call_id"],
                name=ONE_RESULT_PER_CALL,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.pk}"

    @property
    def provider_live(self) -> bool:
        """It carries the provider's compaction with a summary: requests start here."""
        return bool(self.provider_compaction and self.provider_compaction.get("live"))

    @property
    def prompt_tokens(self) -> int | None:
        """The whole prompt the provider reported for the call that produced
        this message (uncached input plus cache reads and writes)."""
        if self.input_tokens is None:
            return None
        return self.input_tokens + (self.cache_read_tokens or 0) + (self.cache_write_tokens or 0)


class OfflineFallback(models.TextChoices):
    """Why the offline summarizer wrote a window shift: the event's
    `details["offline_fallback"]` (docs/operations.rst, "Faults")."""

    STALLED_HOLDER = "stalled_holder", "Lease taken over: the holder's heartbeat stopped"
    LATE_HOLDER = "late_holder", "Lease taken over: past the chat's deadline"
    SUMMARIZER_FAILED = "summarizer_failed", "The summarizer failed or timed out"


class CompactionEvent(models.Model):
    class Kind(models.TextChoices):
        TOOL_RESULTS = "tool_results", "Tool results compacted"
        DEDUP = "dedup", "Duplicate tool results stubbed"
        WINDOW_SUMMARY = "window_summary", "Window summary"
        EMERGENCY_1 = "emergency_1", "Emergency compaction, level 1"
        EMERGENCY_2 = "emergency_2", "Emergency compaction, level 2"
        FORK_SUMMARY = "fork_summary", "Fork summary"
        RESTORE = "restore", "Originals restored"
        MEDIA = "media", "Old images, documents and thinking compacted"
        PROVIDER = "provider", "Compacted by the provider"
        PROVIDER_FAILED = "provider_failed", "The provider's compaction failed"
        # Not a compaction: the provider read less from its cache than the request's
        # unchanged prefix (assistant.window.cache_check); `compactions()` leaves it out.
        CACHE_BREAK = CACHE_BREAK, "The provider's cache missed an unchanged prefix"

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="compaction_events"
    )
    kind = models.CharField(max_length=32, choices=Kind.choices)
    tokens_before = models.PositiveIntegerField(default=0)
    tokens_after = models.PositiveIntegerField(default=0)
    messages_affected = models.PositiveIntegerField(default=0)
    summarizer_model = models.CharField(max_length=128, blank=True, default="")
    summarizer_input_tokens = models.PositiveIntegerField(default=0)
    summarizer_output_tokens = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)
    details = models.JSONField(default=dict, blank=True, db_default={})
    # The staff user who asked for it (admin action, command run as a user);
    # NULL for the automatic work of the chat path and the worker.
    acting_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = CompactionEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The admin's and context_report's history of one conversation.
            models.Index(fields=["conversation", "-created_at"], name="assistant_event_conv"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on {self.conversation_id}"


_USER = settings.AUTH_USER_MODEL


class SummaryVersion(models.Model):
    """A window summary as written (model, staff edit, revert): assistant.summary.versions."""

    class Kind(models.TextChoices):
        MODEL = "model", "Written by the summarizer"
        STAFF_EDIT = "staff_edit", "Corrected by staff"
        REVERT = "revert", "Reverted to an earlier version"

    conversation = models.ForeignKey(Conversation, models.CASCADE, related_name="summary_versions")
    through_message_id = models.BigIntegerField(null=True, blank=True)
    # A segment summary's (`summarize_after`): the message the segment follows.
    # NULL: a version of the window summary.
    after_message_id = models.BigIntegerField(null=True, blank=True)
    text = models.TextField()
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.MODEL)
    model = models.CharField(max_length=128, blank=True, default="")
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    source = models.ForeignKey("self", models.SET_NULL, null=True, blank=True, related_name="+")
    created_by = models.ForeignKey(_USER, models.SET_NULL, null=True, blank=True, related_name="+")
    reviewed_by = models.ForeignKey(_USER, models.SET_NULL, null=True, blank=True, related_name="+")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["conversation", "-id"], name="assistant_summary_conv")]

    def __str__(self) -> str:
        return f"Summary version {self.pk} of conversation {self.conversation_id}"


class Embedding(models.Model):
    """An embedding of a text recall can return, for semantic search (assistant.recall.vectors).

    The `vector` column exists only where PostgreSQL has the pgvector extension
    (migration 0017_vectors): elsewhere the table is there without it and nothing
    reads or writes it. One model per deployment, so the column is untyped and each
    row says its `dimensions`; an HNSW index per dimension count holds the rows of
    that count (`assistant.recall.vectors.ensure_index`).
    """

    class Source(models.TextChoices):
        SUMMARY = "summary", "A window summary version"
        ORIGINAL = "original", "A compacted original"
        SESSION = "session", "A session summary"

    # assistant_embedding_conv leads with it: no index of its own.
    conversation = models.ForeignKey(
        Conversation, models.CASCADE, related_name="embeddings", db_index=False
    )
    source = models.CharField(max_length=16, choices=Source.choices)
    # SummaryVersion.id for a summary, Message.id for an original, and for a session's
    # summary the id of the session that carries it (its `parent_conversation_summary`;
    # `conversation` is the session summarized).
    source_id = models.BigIntegerField()
    # An original over the model's input limit is embedded in chunks, 0 first.
    chunk = models.PositiveSmallIntegerField(default=0)
    model = models.CharField(max_length=128)
    dimensions = models.PositiveSmallIntegerField()
    vector = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "source_id", "chunk", "model"], name="assistant_embedding_once"
            )
        ]
        indexes = [
            models.Index(fields=["conversation", "model"], name="assistant_embedding_conv"),
            # The vectors of models other than the current one, once re-embedded, are
            # deleted (assistant.recall.embedding_jobs): found by two ranges of this index.
            models.Index(fields=["model", "source", "source_id"], name="assistant_embedding_model"),
        ]

    def __str__(self) -> str:
        return f"Embedding of {self.source} {self.source_id} ({self.model})"


class EmbeddingUsage(models.Model):
    """The tokens one embedding request took for one conversation's texts
    (assistant.recall.embedding_jobs): what the conversation's cost counts
    (assistant.cost) and the day's cap adds up. Kept when the vectors are replaced
    by another model's: they were paid for."""

    conversation = models.ForeignKey(
        Conversation, models.CASCADE, related_name="embedding_usage", db_index=False
    )
    model = models.CharField(max_length=128)
    input_tokens = models.PositiveIntegerField()
    texts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            # A conversation's cost.
            models.Index(fields=["conversation", "id"], name="assistant_embusage_conv"),
            # The tokens embedded today (the daily cap).
            models.Index(fields=["created_at"], name="assistant_embusage_day"),
        ]

    def __str__(self) -> str:
        return f"{self.input_tokens} tokens of {self.model} for conversation {self.conversation_id}"
