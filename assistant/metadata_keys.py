"""The window's own state: the names of its columns on `Conversation`, the
columns stored and cleared together, and the typed reads over them
(`Conversation.meta`, `WindowState.meta`). The state is written by
assistant.history.state_writes alone; `Conversation.metadata` is the host's.

Until migration 0015 the state was kept as keys of `Conversation.metadata`;
each column keeps the name its key had, so `MetadataKeys` still names them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import models


class MetadataKeys:
    """The names of the state columns of `Conversation` (deprecated name: they
    were keys of `Conversation.metadata` before migration 0015)."""

    COMPACTION_SUMMARY = "compaction_summary"
    COMPACTION_THROUGH_MESSAGE_ID = "compaction_through_message_id"
    PARENT_CONVERSATION_SUMMARY = "parent_conversation_summary"
    FORK_MESSAGE_ID = "fork_message_id"
    # A continuation's last message of its parent (fork_continuation).
    FORK_THROUGH_MESSAGE_ID = "fork_through_message_id"
    TOOL_SERVICES = "tool_services"
    # A summary pre-built by the post-exchange task, keyed by the split it covers.
    PENDING_SUMMARY = "pending_summary"
    PENDING_THROUGH_MESSAGE_ID = "pending_through_message_id"
    # Set when a provider reported more input tokens than the model's window.
    NEEDS_EMERGENCY_COMPACTION = "needs_emergency_compaction"
    SUMMARY_DEFERRED = "summary_deferred"
    # Provider counts reported at or before this message id predate the last
    # compaction of the context, so they no longer describe it.
    CONTEXT_EPOCH_MESSAGE_ID = "context_epoch_message_id"
    # The split a pending (pre-built) summary was built on top of, and what
    # building it cost (model, input and output tokens) for its audit row.
    PENDING_BASE_MESSAGE_ID = "pending_base_message_id"
    PENDING_USAGE = "pending_usage"
    # Tool results up to this id have been looked at by the post-exchange worker.
    TOOL_RESULTS_PROCESSED_THROUGH = "tool_results_processed_through"
    # When the split falls inside a turn: that turn's user message, sent
    # verbatim ahead of the kept steps (and the same for a pending summary).
    COMPACTION_ANCHOR_MESSAGE_ID = "compaction_anchor_message_id"
    PENDING_ANCHOR_MESSAGE_ID = "pending_anchor_message_id"
    # A summary attempt that failed or did not shrink the context: which split,
    # how many attempts, and when the next one may run (epoch seconds).
    SUMMARY_FAILURE = "summary_failure"
    # What compaction has saved under prompt caching (assistant.window.ledger).
    CACHE_LEDGER = "cache_ledger"
    # The tool specs ({name, description, parameters}) the last chat_step sent: a
    # cached-suffix summary request sends them too, or the provider's cache misses.
    CHAT_TOOLS = "chat_tools"
    # The provider's count of a request over our estimate of it: sizes the
    # context by estimates once compaction has made the provider's counts stale.
    TOKEN_RATIO = "token_ratio"
    # Set once a provider count far below our estimate was logged (a host
    # passing only usage.input_tokens under caching): warn once per conversation.
    IMPLAUSIBLE_USAGE_WARNED = "implausible_usage_warned"
    # Inside a turn the pre-call hook asks the worker for the next window
    # summary ({"base": split, "at": epoch seconds, "answered": bool}); a
    # Celery worker stamps WORKER_SEEN_AT when it runs this conversation's work,
    # so the hook knows one answers.
    PREBUILD_REQUEST = "prebuild_request"
    WORKER_SEEN_AT = "worker_seen_at"
    # The cumulative artifact index of the summarized messages (assistant.recall.artifact_index),
    # and the one a pre-built summary was rendered with.
    ARTIFACT_INDEX = "artifact_index"
    PENDING_ARTIFACT_INDEX = "pending_artifact_index"
    # A shift the offline summarizer wrote because a holder was late or stalled
    # ({"base", "through", "previous": the summary at base, "awaits_holder"}): the
    # model's summary of the same split replaces it at the next prefix rewrite.
    OFFLINE_SHIFT = "offline_shift"
    # A summarized segment after the split (`summarize_after`): {"after": the last
    # message kept verbatim before it, "through": its last message, "summary"}.
    SEGMENT_SUMMARY = "segment_summary"


# The cached window summary: the columns stored together by a shift, and cleared
# together when its split message no longer exists (assistant.cleanup.jobs).
WINDOW_SUMMARY_KEYS = (
    MetadataKeys.COMPACTION_SUMMARY,
    MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID,
    MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID,
    MetadataKeys.ARTIFACT_INDEX,
)


# A pre-built summary: cleared together when it is adopted, refused or stale.
PENDING_SUMMARY_KEYS = (
    MetadataKeys.PENDING_SUMMARY,
    MetadataKeys.PENDING_THROUGH_MESSAGE_ID,
    MetadataKeys.PENDING_BASE_MESSAGE_ID,
    MetadataKeys.PENDING_USAGE,
    MetadataKeys.PENDING_ANCHOR_MESSAGE_ID,
    MetadataKeys.PENDING_ARTIFACT_INDEX,
)


_FLAGS = {
    MetadataKeys.NEEDS_EMERGENCY_COMPACTION,
    MetadataKeys.SUMMARY_DEFERRED,
    MetadataKeys.IMPLAUSIBLE_USAGE_WARNED,
}
_COUNTERS = {MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID, MetadataKeys.TOOL_RESULTS_PROCESSED_THROUGH}

# Every state column, and its value when nothing is stored (what clearing it writes).
STATE_FIELDS: tuple[str, ...] = tuple(
    value for name, value in vars(MetadataKeys).items() if name.isupper()
)
STATE_EMPTY: dict[str, Any] = {
    name: False if name in _FLAGS else 0 if name in _COUNTERS else None for name in STATE_FIELDS
}
STATE_EMPTY[MetadataKeys.TOOL_SERVICES] = []

# The state the context's size is made of (assistant.window.loading): a write
# of one of these makes the next stored message measure the window again.
SIZE_STATE = frozenset(
    {
        MetadataKeys.COMPACTION_SUMMARY,
        MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID,
        MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID,
        MetadataKeys.PARENT_CONVERSATION_SUMMARY,
        MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID,
        MetadataKeys.TOKEN_RATIO,
        MetadataKeys.SEGMENT_SUMMARY,
    }
)


class WindowStateColumns(models.Model):
    """The window's own state, as columns of `Conversation` (which inherits
    them): typed, loaded with the row, written by assistant.history.state_writes alone."""

    # The window's own state (docs/architecture.rst, "Conversation state"):
    # written only through assistant.history.state_writes; `metadata` is the host's.
    # The cached window summary, the id of the last message it covers (the
    # split), the turn's user message sent verbatim when the split falls
    # inside a turn (the anchor), and the artifact index of what it covers.
    compaction_summary = models.TextField(null=True, blank=True)  # noqa: DJ001 (NULL = none)
    compaction_through_message_id = models.BigIntegerField(null=True, blank=True)
    compaction_anchor_message_id = models.BigIntegerField(null=True, blank=True)
    artifact_index = models.JSONField(null=True, blank=True)
    # A fork's summary of its parent, the parent's message it branched at (a
    # continuation: the parent's last message it continues), the tool services
    # it was given, and whether its summary is still to be made.
    parent_conversation_summary = models.TextField(null=True, blank=True)  # noqa: DJ001
    fork_message_id = models.BigIntegerField(null=True, blank=True)
    fork_through_message_id = models.BigIntegerField(null=True, blank=True)
    tool_services = models.JSONField(default=list, blank=True, db_default=[])
    summary_deferred = models.BooleanField(default=False, db_default=False)
    # A summary pre-built by the worker: its text, the split it covers, the split
    # it was built on (base), its anchor, its artifact index and what it cost.
    pending_summary = models.TextField(null=True, blank=True)  # noqa: DJ001 (NULL = none)
    pending_through_message_id = models.BigIntegerField(null=True, blank=True)
    pending_base_message_id = models.BigIntegerField(null=True, blank=True)
    pending_anchor_message_id = models.BigIntegerField(null=True, blank=True)
    pending_artifact_index = models.JSONField(null=True, blank=True)
    pending_usage = models.JSONField(null=True, blank=True)
    # A shift the offline summarizer wrote for a late or stalled holder
    # ({"base", "through", "previous", "awaits_holder"}).
    offline_shift = models.JSONField(null=True, blank=True)
    # A summary attempt that failed: {"through", "attempts", "retry_at"}.
    summary_failure = models.JSONField(null=True, blank=True)
    # A provider reported more input tokens than the model's window.
    needs_emergency_compaction = models.BooleanField(default=False, db_default=False)
    # Provider counts reported at or before this message id predate the last
    # compaction of the context (0: none).
    context_epoch_message_id = models.BigIntegerField(default=0, db_default=0)
    # The provider's count of a request over our estimate of it (NULL: never measured).
    token_ratio = models.FloatField(null=True, blank=True)
    # A provider count far below our estimate was logged: warned once.
    implausible_usage_warned = models.BooleanField(default=False, db_default=False)
    # Tool results up to this id have been looked at by the post-exchange worker.
    tool_results_processed_through = models.BigIntegerField(default=0, db_default=0)
    # What compaction has saved under prompt caching (assistant.window.ledger).
    cache_ledger = models.JSONField(null=True, blank=True)
    # The tool specs the last chat_step sent, as JSON text (assistant.chat).
    chat_tools = models.TextField(null=True, blank=True)  # noqa: DJ001 (NULL = none)
    # The pre-call hook's request for the next summary ({"base", "at", ...}), and
    # when a Celery worker last ran this conversation's work (epoch seconds).
    prebuild_request = models.JSONField(null=True, blank=True)
    worker_seen_at = models.FloatField(null=True, blank=True)
    # A summarized segment after the split, sent between the messages before it and
    # the newest step ({"after", "through", "summary"}; assistant.staff.cut).
    segment_summary = models.JSONField(null=True, blank=True)

    class Meta:
        abstract = True


class StateOf(Mapping[str, Any]):
    """A conversation's state columns read as a mapping of their names (the
    model instance's attributes, live: an assignment shows at once)."""

    __slots__ = ("row",)

    def __init__(self, row: object) -> None:
        self.row = row

    def __getitem__(self, name: str) -> Any:
        if name not in STATE_EMPTY:
            raise KeyError(name)
        return getattr(self.row, name)

    def __iter__(self) -> Iterator[str]:
        return iter(STATE_FIELDS)

    def __len__(self) -> int:
        return len(STATE_FIELDS)


def held_state(row: object) -> dict[str, Any]:
    """A conversation's state columns that hold something (the admin's and the
    transcript export's view of it)."""
    return {name: value for name, value in StateOf(row).items() if value != STATE_EMPTY[name]}


def _id(value: Any) -> int | None:
    return int(value) if value is not None else None


@dataclass(frozen=True)
class PendingSummary:
    """A summary the worker pre-built for the split `base` (None: no split yet)."""

    text: str
    through_id: int | None
    base_id: int | None
    anchor_id: int | None
    usage: dict[str, Any]
    artifact_index: dict[str, Any] | None


@dataclass(frozen=True)
class Segment:
    """Messages after the split summarized in place (`summarize_after`): those after
    `after` up to `through` are sent as `summary`, between the messages before them
    and the newest step."""

    after: int
    through: int
    summary: str

    def covers(self, message_id: int) -> bool:
        return self.after < message_id <= self.through

    def stored(self) -> dict[str, Any]:
        return {"after": self.after, "through": self.through, "summary": self.summary}


class ConversationMetadata:
    """Typed reads of a conversation's state columns, by their names (a model
    instance's `StateOf`, or the values the window loaded). A view, not a copy:
    a caller recording what it just stored shows at once."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw

    @property
    def summary(self) -> str | None:
        return self.raw.get(MetadataKeys.COMPACTION_SUMMARY) or None

    @property
    def through_id(self) -> int | None:
        return _id(self.raw.get(MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID))

    @property
    def anchor_id(self) -> int | None:
        return _id(self.raw.get(MetadataKeys.COMPACTION_ANCHOR_MESSAGE_ID))

    @property
    def parent_summary(self) -> str | None:
        return self.raw.get(MetadataKeys.PARENT_CONVERSATION_SUMMARY) or None

    @property
    def fork_message_id(self) -> int | None:
        return _id(self.raw.get(MetadataKeys.FORK_MESSAGE_ID))

    @property
    def tool_services(self) -> list[str]:
        return list(self.raw.get(MetadataKeys.TOOL_SERVICES) or [])

    @property
    def context_epoch_id(self) -> int:
        return int(self.raw.get(MetadataKeys.CONTEXT_EPOCH_MESSAGE_ID) or 0)

    @property
    def stored_token_ratio(self) -> float | None:
        """The provider's count over our estimate, as stored (None: never measured)."""
        value = self.raw.get(MetadataKeys.TOKEN_RATIO)
        return float(value) if value else None

    @property
    def needs_emergency(self) -> bool:
        return bool(self.raw.get(MetadataKeys.NEEDS_EMERGENCY_COMPACTION))

    @property
    def implausible_usage_warned(self) -> bool:
        return bool(self.raw.get(MetadataKeys.IMPLAUSIBLE_USAGE_WARNED))

    @property
    def artifact_index(self) -> dict[str, Any] | None:
        return self.raw.get(MetadataKeys.ARTIFACT_INDEX)

    @property
    def summary_failure(self) -> dict[str, Any]:
        return self.raw.get(MetadataKeys.SUMMARY_FAILURE) or {}

    def summary_backing_off(self, at: float) -> bool:
        """A summary from the current split failed lately: at `at` (a timestamp) its
        retry delay has not run out (assistant.summary.backoff)."""
        failure = self.summary_failure
        return failure.get("base") == self.through_id and at < failure.get("retry_at", 0)

    @property
    def summary_deferred(self) -> bool:
        return bool(self.raw.get(MetadataKeys.SUMMARY_DEFERRED))

    @property
    def tool_results_processed_through(self) -> int:
        return int(self.raw.get(MetadataKeys.TOOL_RESULTS_PROCESSED_THROUGH) or 0)

    @property
    def cache_ledger(self) -> dict[str, Any]:
        return self.raw.get(MetadataKeys.CACHE_LEDGER) or {}

    @property
    def chat_tools(self) -> str | None:
        """The tool specs the last chat_step sent, as JSON text (None: none)."""
        return self.raw.get(MetadataKeys.CHAT_TOOLS)

    @property
    def prebuild_request(self) -> dict[str, Any]:
        return self.raw.get(MetadataKeys.PREBUILD_REQUEST) or {}

    @property
    def worker_seen(self) -> bool:
        return bool(self.raw.get(MetadataKeys.WORKER_SEEN_AT))

    @property
    def segment(self) -> Segment | None:
        """The summarized segment after the split (None: none)."""
        held = self.raw.get(MetadataKeys.SEGMENT_SUMMARY)
        if not held:
            return None
        return Segment(int(held["after"]), int(held["through"]), held["summary"])

    @property
    def pending(self) -> PendingSummary | None:
        """The pre-built summary, whatever split it was built on (None: none)."""
        text = self.raw.get(MetadataKeys.PENDING_SUMMARY)
        if not text:
            return None
        return PendingSummary(
            text=text,
            through_id=_id(self.raw.get(MetadataKeys.PENDING_THROUGH_MESSAGE_ID)),
            base_id=_id(self.raw.get(MetadataKeys.PENDING_BASE_MESSAGE_ID)),
            anchor_id=_id(self.raw.get(MetadataKeys.PENDING_ANCHOR_MESSAGE_ID)),
            usage=self.raw.get(MetadataKeys.PENDING_USAGE) or {},
            artifact_index=self.raw.get(MetadataKeys.PENDING_ARTIFACT_INDEX),
        )

    @property
    def offline_shift(self) -> dict[str, Any]:
        return self.raw.get(MetadataKeys.OFFLINE_SHIFT) or {}

    @property
    def offline_replacement(self) -> PendingSummary | None:
        """The model's summary built on the offline shift's base and covering at
        least its split: it replaces the offline one (None: none yet)."""
        offline, pending = self.offline_shift, self.pending
        if not offline or pending is None or pending.base_id != offline.get("base"):
            return None
        return pending if (pending.through_id or 0) >= offline["through"] else None

    @property
    def has_pending_summary(self) -> bool:
        """A pre-built summary is ready for the current split."""
        pending = self.pending
        return pending is not None and pending.base_id == self.through_id
