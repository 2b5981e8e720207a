"""The window summary's versions (docs/admin.rst, "Summary history"): every
summary written is kept as a `SummaryVersion`; staff correct one (a new
version, with their name), mark one reviewed (who and when; it gates
nothing), or revert to an earlier one (a new version bringing its text back).
Nothing is ever deleted but with the conversation. The newest version of the
current split is the text the next request carries."""

from __future__ import annotations

import difflib
import itertools
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from assistant.history import acting_user_id, an_id, checked_text, write_state
from assistant.metadata_keys import PENDING_SUMMARY_KEYS, MetadataKeys
from assistant.models import Conversation, Message, SummaryVersion, handle
from assistant.window import load_window, refresh_size

# A correction is a summary: it must fit where the model's did.
MAX_SUMMARY_CHARS = 200_000


def record_version(
    conversation_id: int,
    text: str,
    through: int | None,
    *,
    kind: str = SummaryVersion.Kind.MODEL,
    model: str = "",
    input_tokens: int = 0,
    output_tokens: int = 0,
    source: SummaryVersion | None = None,
    after: int | None = None,
) -> SummaryVersion:
    """Keep one version of the window summary (every write of it calls this), or,
    `after` a message, of a segment summary (`summarize_after`)."""
    return SummaryVersion.objects.create(
        conversation_id=conversation_id,
        text=text,
        through_message_id=through,
        after_message_id=after,
        kind=kind,
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        source=source,
        created_by_id=acting_user_id(),
    )


def _store_current(
    conversation: Conversation, text: str, *, kind: str, source: SummaryVersion | None = None
) -> SummaryVersion:
    """Make `text` the summary the next request carries, for the current split (a
    concurrent shift wins: then ValidationError, nothing written)."""
    through = load_window(conversation.pk).through_id
    if through is None:
        raise ValidationError(
            f"Conversation {conversation.pk} has no window summary yet.", code="no_summary"
        )
    same_split = Conversation.objects.filter(
        Q(**{MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID: through}), pk=conversation.pk
    )
    with transaction.atomic():
        # A summary pre-built from the old text would undo the change at the next shift.
        stored = write_state(
            same_split, {MetadataKeys.COMPACTION_SUMMARY: text}, clear=PENDING_SUMMARY_KEYS
        )
        if not stored:
            raise ValidationError(
                "The window shifted meanwhile: reload the page and look again.",
                code="summary_moved",
            )
        version = record_version(conversation.pk, text, through, kind=kind, source=source)
    refresh_size(conversation.pk)
    return version


def correct_summary(conversation: Conversation, text: Any) -> SummaryVersion:
    """Staff's corrected text becomes the current summary (a new version)."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("A corrected summary cannot be empty.", code="empty_summary")
    checked_text("A corrected summary", text)
    if len(text) > MAX_SUMMARY_CHARS:
        raise ValidationError(
            f"A summary is at most {MAX_SUMMARY_CHARS:,} characters, got {len(text):,}.",
            code="summary_too_long",
        )
    # A browser's form sends CRLF line ends; the code that reads sections splits on LF.
    normalized = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    return _store_current(conversation, normalized, kind=SummaryVersion.Kind.STAFF_EDIT)


def _version(conversation: Conversation, version_id: Any) -> SummaryVersion:
    an_id("version_id", version_id)
    version = SummaryVersion.objects.filter(conversation_id=conversation.pk, pk=version_id).first()
    if version is None:
        raise ValidationError(
            f"Summary version {version_id} is not one of conversation {conversation.pk}'s.",
            code="version_not_found",
        )
    return version


def revert_summary(conversation: Conversation, version_id: Any) -> SummaryVersion:
    """Bring an earlier version's text back as the current summary (a new version
    naming it). Only a version of the current split: another covers other messages."""
    version = _version(conversation, version_id)
    through = load_window(conversation.pk).through_id
    if version.through_message_id != through or version.after_message_id is not None:
        raise ValidationError(
            f"Version {version.pk} summarizes the messages up to {version.through_message_id}, "
            f"the window now starts after {through}: it would leave messages out or repeat "
            "them. Regenerate the summary instead.",
            code="other_split",
        )
    return _store_current(
        conversation, version.text, kind=SummaryVersion.Kind.REVERT, source=version
    )


def review_summary(conversation: Conversation, version_id: Any) -> SummaryVersion:
    """Mark a version reviewed by the acting user, now (it gates nothing)."""
    version = _version(conversation, version_id)
    version.reviewed_by_id = acting_user_id()
    version.reviewed_at = timezone.now()
    version.save(update_fields=["reviewed_by", "reviewed_at"])
    return version


def current_version(conversation_id: int) -> SummaryVersion | None:
    """The version the next request carries: the newest one of the current split
    whose text is the stored summary (None: a summary written before versions)."""
    state = load_window(conversation_id)
    newest = (
        SummaryVersion.objects.filter(
            conversation_id=conversation_id,
            through_message_id=state.through_id,
            after_message_id__isnull=True,
        )
        .order_by("-id")
        .first()
    )
    return newest if newest is not None and newest.text == state.summary else None


# What the diff of a compaction shows of each message it dropped, and at most.
DIFF_MESSAGE_CHARS = 2000
DIFF_MAX_LINES = 3000


def previous_version(version: SummaryVersion) -> SummaryVersion | None:
    return (
        SummaryVersion.objects.filter(
            conversation_id=version.conversation_id,
            id__lt=version.pk,
            after_message_id__isnull=version.after_message_id is None,
        )
        .order_by("-id")
        .first()
    )


def compaction_diff(version: SummaryVersion) -> list[str]:
    """What this version changed in the request, as a unified diff: before, the
    previous summary and the messages the window moved past (pinned ones stay, so
    they are left out); after, this summary."""
    previous = previous_version(version)
    start = (previous.through_message_id if previous else None) or 0
    before = (previous.text if previous else "").splitlines()
    if version.after_message_id is not None:  # a segment summary replaced its messages alone
        start, before = version.after_message_id, []
    through = version.through_message_id
    if through is not None and start < through:
        dropped = (
            Message.objects.filter(
                conversation_id=version.conversation_id, id__gt=start, id__lte=through
            )
            .exclude(role=Message.Role.SYSTEM)
            .exclude(pinned=True)
            .model_view()
        )
        for row in dropped:
            text = row.model_content[:DIFF_MESSAGE_CHARS]
            before.extend(f"[{row.role} {handle(row.pk)}] {text}".splitlines())
    diff = difflib.unified_diff(
        before, version.text.splitlines(), "request before", "request after", lineterm=""
    )
    return list(itertools.islice(diff, DIFF_MAX_LINES))
