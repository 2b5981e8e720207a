"""Fork and branch (the fourth strategy of docs/compaction.rst).

A fork is a new conversation that carries a summary of its parent in
`Conversation.parent_conversation_summary`; it never changes the parent.

- `fork_continuation`: "continue with context" when a conversation has grown
  too large; the summary covers the whole parent.
- `fork_from_message`: "branch from here" (edit and resend) at one of the
  parent's own user messages, whose text comes back so the caller can offer it
  for edit. The parent's messages before it go to the branch verbatim when they
  fit under the trigger (copied, without their usage: the parent paid for
  them); only when they do not does a summary of them stand in their place.

The summary is built from the parent's cached window summary plus only the
messages after its cutoff (the summarizer reads the new slice, not the whole
history). With `summarize=False` the fork is created at once and a Celery task
writes the summary later, into its column alone (assistant.history.state_writes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from assistant.history import (
    PARENT_SUMMARY_TASK,
    add_message,
    enqueue_on_commit,
    new_conversation,
    read_state,
    record_compaction,
    remember,
    write_state,
)
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys, ancestors
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.summary import summarize_messages
from assistant.text import estimate_tokens
from assistant.window import WindowState, refresh_size, should_shift

logger = logging.getLogger(__name__)

TITLE_PREFIX_CHARS = 44
CONTINUATION_SUFFIX = " (cont.)"
FORK_SUFFIX = " (fork)"
# The last parent message a deferred continuation summary covers: messages the
# parent gains after the fork was made are not the fork's context.
FORK_THROUGH_MESSAGE_ID = MetadataKeys.FORK_THROUGH_MESSAGE_ID
# Message.metadata of a branch's verbatim copy: the parent's message it copies.
COPIED_FROM = "copied_from"
# What a verbatim copy keeps of the parent's message: its text as stored and as the
# model saw it, its blocks, tool fields and estimates. Not its usage (the parent's
# calls, priced there) nor its search document (search_history reaches the parent's
# original along the chain, so a match is not found twice).
_COPIED_FIELDS = (
    "role",
    "content",
    "compacted_content",
    "compaction",
    "compacted_at",
    "blocks",
    "compacted_blocks",
    "blocks_tokens",
    "original_dropped_at",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "tool_arguments",
    "provider",
    "model",
    "token_estimate",
    "original_token_estimate",
    "pinned",
    "provider_compaction",
)
_TITLE_MAX = Conversation._meta.get_field("title").max_length or 255


@dataclass(frozen=True)
class ParentSummary:
    text: str | None
    messages_summarized: int = 0
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = 0
    called_summarizer: bool = False
    # The parent's context the summary stands for: its system part, the summaries it
    # built on and the messages summarized, as their requests carried them (estimates).
    tokens_summarized: int = 0


def fork_depth(conversation: Conversation) -> int:
    """How many fork ancestors the conversation has (0 for a root): continuations
    and branches count, session links do not (a chat has any number of sessions).
    One query, walking at most MAX_FORK_DEPTH + 1 fork links past the sessions."""
    chain = ancestors(conversation.pk) if conversation.pk else []
    return sum(1 for link in chain if link.parent_id is not None and link.link != "session")


def can_fork(conversation: Conversation) -> bool:
    """A fork of this conversation would stay within MAX_FORK_DEPTH ancestors."""
    return fork_depth(conversation) < compaction_config().MAX_FORK_DEPTH


def _validated_services(tool_services: Any) -> list[str]:
    """A list of service names: any iterable of strings but a string itself."""
    if isinstance(tool_services, Iterable) and not isinstance(tool_services, str | bytes):
        services = list(tool_services)
        if all(isinstance(name, str) for name in services):
            return services
    raise ValidationError(
        f"tool_services must be a list of service names (strings), got {tool_services!r}.",
        code="invalid_tool_services",
    )


def fork_continuation(
    conversation: Conversation,
    pending_user_message: str | None = None,
    tool_services: Iterable[str] = (),
    summarize: bool = True,
) -> Conversation | None:
    """A new conversation that continues this one with its summary: same owner,
    title "<first 44 chars> (cont.)", the given tool services, and the pending
    user message as its first message. None (logged) past MAX_FORK_DEPTH."""
    services = _validated_services(tool_services)
    if not can_fork(conversation):
        _log_refused(conversation, "max_fork_depth")
        return None
    through_id = _last_message_id(conversation)
    title = f"{conversation.title[:TITLE_PREFIX_CHARS]}{CONTINUATION_SUFFIX}"
    state: dict[str, Any] = {MetadataKeys.TOOL_SERVICES: services}
    if through_id is not None:
        state[FORK_THROUGH_MESSAGE_ID] = through_id
    return _create_fork(
        conversation,
        title=title,
        state=state,
        end_before=through_id + 1 if through_id is not None else None,
        first_message=pending_user_message,
        summarize=summarize,
    )


def fork_from_message(
    conversation: Conversation, message_id: Any, summarize: bool = True
) -> tuple[Conversation, str] | None:
    """Branch at one of this conversation's own user messages: a new
    conversation "<title> (fork)" that carries everything before that message,
    verbatim when it fits under the trigger, else as a summary. Returns the fork
    and the message's text (to edit and resend), or None, creating nothing, for
    another conversation's message, a non-user message, a missing id, or past
    MAX_FORK_DEPTH."""
    try:
        message_id = int(message_id)
    except (TypeError, ValueError):
        _log_refused(conversation, "invalid_message_id")
        return None
    message = (
        Message.objects.filter(pk=message_id, conversation_id=conversation.pk)
        .only("id", "role", "content")
        .first()
    )
    if message is None or message.role != Message.Role.USER:
        _log_refused(conversation, "not_a_user_message_of_this_conversation", message_id)
        return None
    if not can_fork(conversation):
        _log_refused(conversation, "max_fork_depth")
        return None
    suffix_room = _TITLE_MAX - len(FORK_SUFFIX)
    title = f"{conversation.title[:suffix_room]}{FORK_SUFFIX}"
    state: dict[str, Any] = {
        MetadataKeys.FORK_MESSAGE_ID: message.pk,
        MetadataKeys.TOOL_SERVICES: conversation.tool_services,
    }
    copies = _verbatim_copies(conversation, message.pk, state)
    if copies is not None:
        return _create_verbatim_branch(conversation, title, state, copies), message.content
    fork = _create_fork(
        conversation,
        title=title,
        state=state,
        end_before=message.pk,
        first_message=None,
        summarize=summarize,
    )
    return (fork, message.content) if fork is not None else None


def _verbatim_copies(
    parent: Conversation, end_before: int, state: dict[str, Any]
) -> list[Message] | None:
    """The parent's messages before `end_before`, as unsaved copies, when the branch
    that carries them verbatim stays under the trigger: its size measured as the
    window measures any context (`WindowState.context_tokens`, `should_shift`),
    with the parent's own parent summary and token ratio, which it carries too.
    None when it would not fit. Adds what the branch carries to `state`."""
    carried = {
        name: value
        for name, value in read_state(parent.pk).items()
        if name in (MetadataKeys.PARENT_CONVERSATION_SUMMARY, MetadataKeys.TOKEN_RATIO)
        and value is not None
    }
    before = Message.objects.filter(conversation_id=parent.pk, id__lt=end_before)
    config = compaction_config()
    if _surely_over_the_trigger(before, carried, config):
        return None  # a long history is not loaded only to find it does not fit
    copies = []
    for original in before.order_by("id"):
        copy = Message(**{name: getattr(original, name) for name in _COPIED_FIELDS})
        copy.metadata = {**(original.metadata or {}), COPIED_FROM: original.pk}
        copy.created_at = original.created_at
        copy.tool_call_message_id = original.tool_call_message_id  # remapped once saved
        copies.append(copy)
    if not copies:
        return None  # nothing before the message: the branch starts empty either way
    for copy in copies:  # what the window reads of a system message
        copy.model_content = (
            copy.content if copy.compacted_content is None else copy.compacted_content
        )
    prospective = WindowState(0, parent.system_prompt, carried, config)
    for copy in copies:
        (prospective.system_rows if copy.role == Message.Role.SYSTEM else prospective.rows).append(
            copy
        )
    if should_shift(prospective, config):
        return None
    state.update(carried)
    return copies


def _surely_over_the_trigger(
    before: QuerySet[Message], carried: dict[str, Any], config: CompactionConfig
) -> bool:
    """The messages' estimates alone (a lower bound of the branch's size: the system
    part and summaries come on top) already reach a trigger, by one aggregate."""
    figures = before.exclude(role=Message.Role.SYSTEM).aggregate(
        tokens=Coalesce(Sum("token_estimate"), 0), messages=Count("id")
    )
    ratio = WindowState(0, "", carried, config).token_ratio
    return bool(
        figures["tokens"] * ratio >= config.CONTEXT_TOKEN_THRESHOLD
        or figures["messages"] >= config.MAX_MESSAGES_BEFORE_SUMMARY
    )


def _create_verbatim_branch(
    parent: Conversation, title: str, state: dict[str, Any], copies: list[Message]
) -> Conversation:
    """The branch with the parent's messages before the edit copied in, in order,
    each tool result pointing at its copied call, each as old as its original."""
    with transaction.atomic():
        fork = new_conversation(
            state,
            user_id=parent.user_id,
            title=title,
            parent_conversation=parent,
            parent_link=Conversation.Link.BRANCH,
            system_prompt=parent.system_prompt,
        )
        created_at = [copy.created_at for copy in copies]
        calls = [copy.tool_call_message_id for copy in copies]
        for copy in copies:
            copy.conversation = fork
            copy.tool_call_message_id = None
        Message.objects.bulk_create(copies)  # ids in order: PostgreSQL returns them
        copy_of = {copy.metadata[COPIED_FROM]: copy.pk for copy in copies}
        for copy, when, call in zip(copies, created_at, calls, strict=True):
            copy.created_at = when  # auto_now_add set it to now
            copy.tool_call_message_id = copy_of.get(call) if call is not None else None
        Message.objects.bulk_update(copies, ["created_at", "tool_call_message"])
        refresh_size(fork.pk)
    logger.info("fork_created parent=%s fork=%s verbatim=%s", parent.pk, fork.pk, len(copies))
    return fork


def generate_parent_summary(conversation: Conversation) -> str | None:
    """Write the deferred parent summary of a fork made with summarize=False.
    A no-op returning the stored summary when one exists; None for a
    conversation without a parent (or whose parent is gone). The summary is
    written to its column in the database, so a concurrent write of other state
    is kept, and a second run does not overwrite the first."""
    columns = read_state(conversation.pk)
    existing = columns.get(MetadataKeys.PARENT_CONVERSATION_SUMMARY)
    if existing and not columns.get(MetadataKeys.SUMMARY_DEFERRED):
        # A session's offline summary (new_session) waits for this one: deferred.
        return existing
    if columns.get(MetadataKeys.FORK_MESSAGE_ID) is not None and not columns.get(
        MetadataKeys.SUMMARY_DEFERRED
    ):
        return existing  # a branch made whole: verbatim, or summarized at once
    parent = (
        Conversation.objects.filter(pk=conversation.parent_conversation_id).first()
        if conversation.parent_conversation_id
        else None
    )
    if parent is None:
        logger.info("parent_summary_skipped conversation=%s reason=no_parent", conversation.pk)
        return None
    if columns.get(MetadataKeys.FORK_MESSAGE_ID) is not None:
        end_before: int | None = int(columns[MetadataKeys.FORK_MESSAGE_ID])
    elif columns.get(FORK_THROUGH_MESSAGE_ID) is not None:
        end_before = int(columns[FORK_THROUGH_MESSAGE_ID]) + 1
    else:
        end_before = None
    summary = summarize_parent(parent, end_before=end_before)
    values: dict[str, Any] = {MetadataKeys.SUMMARY_DEFERRED: False}
    if summary.text:
        values[MetadataKeys.PARENT_CONVERSATION_SUMMARY] = summary.text
    with transaction.atomic():
        # First writer wins: a second run (a redelivered task) changes nothing.
        unsummarized = Conversation.objects.filter(
            Q(parent_conversation_summary__isnull=True) | Q(summary_deferred=True),
            pk=conversation.pk,
        )
        stored = write_state(unsummarized, values) == 1
        if stored and summary.called_summarizer:
            size = refresh_size(conversation.pk)
            _record_event(conversation.pk, parent, summary, size, deferred=True)
        elif stored:
            refresh_size(conversation.pk)
    if not stored:  # another run wrote it first: theirs stands
        return read_state(conversation.pk).get(MetadataKeys.PARENT_CONVERSATION_SUMMARY)
    remember(conversation, values)
    return summary.text


def summarize_parent(
    parent: Conversation, *, end_before: int | None = None, offline: bool = False
) -> ParentSummary:
    """The context a fork inherits: the parent's own parent summary and cached
    window summary (when its cutoff lies before `end_before`), updated with a
    summary of only the messages after that cutoff and before `end_before`.
    No database writes. Raises what the summarizer raises."""
    stored = read_state(parent.pk)
    previous: list[str] = []
    if stored.get(MetadataKeys.PARENT_CONVERSATION_SUMMARY):
        previous.append(stored[MetadataKeys.PARENT_CONVERSATION_SUMMARY])
    window = stored.get(MetadataKeys.COMPACTION_SUMMARY)
    cutoff = stored.get(MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID)
    messages = Message.objects.filter(conversation_id=parent.pk)
    if window and cutoff is not None and (end_before is None or int(cutoff) < end_before):
        previous.append(window)
        messages = messages.filter(id__gt=int(cutoff))
    if end_before is not None:
        messages = messages.filter(id__lt=end_before)
    selected = list(
        messages.annotate(model_content=Coalesce("compacted_content", "content")).order_by("id")
    )
    previous_summary = "\n\n".join(previous) or None
    if not selected:
        return ParentSummary(text=previous_summary)
    started = time.monotonic()
    # offline: the deterministic summarizer answers at once (a deadline already past).
    deadline: dict[str, Any] = {"deadline": time.monotonic()} if offline else {}
    outcome = summarize_messages(selected, previous_summary=previous_summary, **deadline)
    return ParentSummary(
        text=outcome.text or previous_summary,
        messages_summarized=len(selected),
        model=outcome.model or "",
        input_tokens=outcome.input_tokens or 0,
        output_tokens=outcome.output_tokens or 0,
        duration_ms=int((time.monotonic() - started) * 1000),
        called_summarizer=True,
        tokens_summarized=estimate_tokens(parent.system_prompt)
        + estimate_tokens(previous_summary)
        + sum(message.token_estimate for message in selected),
    )


def _create_fork(
    parent: Conversation,
    *,
    title: str,
    state: dict[str, Any],
    end_before: int | None,
    first_message: str | None,
    summarize: bool,
    link: str = "",
) -> Conversation:
    summary: ParentSummary | None = None
    if summarize:
        # The summarizer runs before the transaction: no row is held meanwhile.
        try:
            summary = summarize_parent(parent, end_before=end_before)
        except Exception:
            logger.exception("fork_summary_failed parent=%s; deferring it to a task", parent.pk)
    if summary is not None:
        if summary.text:
            state[MetadataKeys.PARENT_CONVERSATION_SUMMARY] = summary.text
    else:
        state[MetadataKeys.SUMMARY_DEFERRED] = True

    with transaction.atomic():
        fork = new_conversation(
            state,
            user_id=parent.user_id,
            title=title,
            parent_conversation=parent,
            parent_link=link or _link_of(state),
            system_prompt=parent.system_prompt,
        )
        if first_message:
            add_message(fork, Message.Role.USER, first_message)
        size = refresh_size(fork.pk)
        if summary is not None and summary.called_summarizer:
            _record_event(fork.pk, parent, summary, size, deferred=False)
        if summary is None:
            enqueue_on_commit(PARENT_SUMMARY_TASK, fork.pk)
    logger.info("fork_created parent=%s fork=%s deferred=%s", parent.pk, fork.pk, summary is None)
    return fork


def _link_of(state: dict[str, Any]) -> str:
    """A branch leaves at a message of its parent; a continuation follows on from it."""
    if state.get(MetadataKeys.FORK_MESSAGE_ID) is not None:
        return Conversation.Link.BRANCH
    return Conversation.Link.CONTINUATION


def _record_event(
    conversation_id: int, parent: Conversation, summary: ParentSummary, size: int, *, deferred: bool
) -> None:
    """The fork summary's event: the parent's context it stands for, then the fork's
    request with it (`size`, docs/admin.rst "Token figures")."""
    record_compaction(
        conversation_id,
        CompactionEvent.Kind.FORK_SUMMARY,
        tokens_before=summary.tokens_summarized,
        tokens_after=size,
        messages_affected=summary.messages_summarized,
        summarizer_model=summary.model[:128],
        summarizer_input_tokens=summary.input_tokens,
        summarizer_output_tokens=summary.output_tokens,
        duration_ms=summary.duration_ms,
        details={"parent_id": parent.pk, "deferred": deferred},
        summary=summary.text or None,
    )


def _last_message_id(conversation: Conversation) -> int | None:
    return (
        Message.objects.filter(conversation_id=conversation.pk)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )


def _log_refused(conversation: Conversation, reason: str, message_id: Any = None) -> None:
    logger.warning(
        "fork_refused conversation=%s reason=%s message=%s", conversation.pk, reason, message_id
    )
