"""The rows of a conversation: appending with validation at the door, soft
deletion, message metadata, the conversation's own state writes, the audit
events, and the task queue that runs after a commit.

- append: `add_message`, every field checked before anything is written;
- arguments, fields: the one check of a public entry point's arguments, and of
  a stored field's value;
- deletion: the guard every writing entry point passes (`require_live`);
- state_writes: every write of the conversation's window state;
- cache_check: each recorded answer's cache reads against the prefix its request
  expected, a shortfall recorded as a `cache_break` event;
- events: a CompactionEvent row and one log line per compaction, and each
  compaction's start and one end (`compacting`, `listening`);
- metadata: atomic writes to a message's metadata;
- queue, deliveries: tasks enqueued by name after the transaction, and a cap
  on how often the same work is delivered;
- figures: how a token figure reads, wherever it is shown (admin, History,
  events, the demo).

May import: metadata_keys, models, ops, providers, settings, signals, text, window.
See docs/architecture.rst.
"""

from assistant.history.append import add_message, check_results_wanted, validated_fields
from assistant.history.arguments import (
    MAX_ID,
    MAX_INT,
    a_callable,
    a_flag,
    an_id,
    entry_point,
    instance_of,
    one_of,
    optional_callable,
    optional_count,
    optional_seconds,
    optional_text,
    sequence_of,
)
from assistant.history.cache_check import (
    EXPECTED_KEY,
    CacheHits,
    cache_expectation,
    cache_hits,
    record_cache_break,
)
from assistant.history.deletion import (
    deleted_error,
    live,
    mark_deleted,
    require_live,
    require_live_id,
    saved_id,
    validated_ids,
)
from assistant.history.deliveries import in_flight, losses, over_delivery_cap
from assistant.history.events import (
    Lifecycle,
    acting_as,
    acting_user_id,
    acting_user_of,
    compacting,
    listening,
    noted,
    one_event,
    one_rewrite,
    record_compaction,
    stopwatch,
)
from assistant.history.fields import check_content, checked_text, jsonb_equal
from assistant.history.figures import measures, share, token_change, token_count
from assistant.history.metadata import merge_metadata
from assistant.history.queue import (
    EMBED_TASK,
    PARENT_SUMMARY_TASK,
    POST_EXCHANGE_TASK,
    PREBUILD_TASK,
    enqueue_on_commit,
    first_in,
    queued_exchanges_older_than,
    task_started,
)
from assistant.history.state_writes import (
    fresh_state,
    new_conversation,
    read_state,
    refresh_state,
    remember,
    write_state,
)

__all__ = [
    "EMBED_TASK",
    "EXPECTED_KEY",
    "MAX_ID",
    "MAX_INT",
    "PARENT_SUMMARY_TASK",
    "POST_EXCHANGE_TASK",
    "PREBUILD_TASK",
    "CacheHits",
    "Lifecycle",
    "a_callable",
    "a_flag",
    "acting_as",
    "acting_user_id",
    "acting_user_of",
    "add_message",
    "an_id",
    "cache_expectation",
    "cache_hits",
    "check_content",
    "check_results_wanted",
    "checked_text",
    "compacting",
    "deleted_error",
    "enqueue_on_commit",
    "entry_point",
    "first_in",
    "fresh_state",
    "in_flight",
    "instance_of",
    "jsonb_equal",
    "listening",
    "live",
    "losses",
    "mark_deleted",
    "measures",
    "merge_metadata",
    "new_conversation",
    "noted",
    "one_event",
    "one_of",
    "one_rewrite",
    "optional_callable",
    "optional_count",
    "optional_seconds",
    "optional_text",
    "over_delivery_cap",
    "queued_exchanges_older_than",
    "read_state",
    "record_cache_break",
    "record_compaction",
    "refresh_state",
    "remember",
    "require_live",
    "require_live_id",
    "saved_id",
    "sequence_of",
    "share",
    "stopwatch",
    "task_started",
    "token_change",
    "token_count",
    "validated_fields",
    "validated_ids",
    "write_state",
]
