"""The message queries every layer shares (`Message.objects`): the model's view of
the history, the context size's integers, search_history's document and the
duplicate check's digest; and the compaction events' (`CompactionEvent.objects`).
Imported by the models, beside them."""

from __future__ import annotations

from django.contrib.postgres.search import SearchVector
from django.db import models
from django.db.models.functions import MD5, Cast, Coalesce

# search_history's full-text index covers this many leading characters of each
# original: to_tsvector refuses a text whose lexemes pass 1 MB, and content may be 5 MB.
SEARCH_INDEX_CHARS = 100_000


def document_of(content: str) -> SearchVector:
    """The full-text document search_history matches (`Message.search_vector`), of
    a text being stored: its first SEARCH_INDEX_CHARS, in the `simple` configuration."""
    return SearchVector(models.Value(content[:SEARCH_INDEX_CHARS]), config="simple")


class MessageQuerySet(models.QuerySet):
    def model_view(self) -> MessageQuerySet:
        """Messages as the model sees them, in order, without loading the
        originals of compacted messages: `model_content` is the compacted
        text where there is one, else the original."""
        return (
            self.defer(
                "content",
                "compacted_content",
                "prepared_content",
                "blocks",
                "compacted_blocks",
                "search_vector",
            )
            .annotate(
                model_content=Coalesce("compacted_content", "content"),
                model_blocks=Coalesce("compacted_blocks", "blocks"),
            )
            .order_by("id")
        )

    def size_values(self) -> MessageQuerySet:
        """What the context's size reads (`assistant.window.context_size`), as
        tuples of SIZE_FIELDS, in order: the counts and estimates of every
        message, and the text of system messages alone (they make the system
        part of every request; "" for the others)."""
        system_text = models.Case(
            models.When(role=self.model.Role.SYSTEM, then=Coalesce("compacted_content", "content")),
            default=models.Value(""),
            output_field=models.TextField(),
        )
        provider_live = models.ExpressionWrapper(
            models.Q(provider_compaction__live=True), output_field=models.BooleanField()
        )
        return (
            self.annotate(system_text=system_text, provider_live=provider_live)
            .order_by("id")
            .values_list(*SIZE_FIELDS)
        )


# A tool call's arguments as one short value (jsonb's text is canonical: equal
# arguments, in any key order, give one digest): the duplicate check's index.
CALL_DIGEST = MD5(Cast("tool_arguments", models.TextField()))


# The message fields the context's size is computed from (`size_values`).
SIZE_FIELDS = (
    "id",
    "role",
    "token_estimate",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "system_text",
    "provider_live",
    "pinned",
)


class CompactionEventQuerySet(models.QuerySet):
    def compactions(self) -> CompactionEventQuerySet:
        """The events that changed what a request sends: every kind but a cache break,
        which records what the provider's cache did (docs/compaction.rst, "Cache
        breaks") and counts in no cost figure, compaction count or undo."""
        return self.exclude(kind=CACHE_BREAK)


# CompactionEvent.Kind.CACHE_BREAK's value (the models import this module).
CACHE_BREAK = "cache_break"
