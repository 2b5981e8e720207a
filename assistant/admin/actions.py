"""The conversation list's actions. Each is thin: it refuses deleted
conversations, asks for confirmation where it changes what the model sees
(the shape of Django's `delete_selected`), calls a service, and reports what
happened, or why nothing did. Runs that call the summarizer, or cover many
conversations, go to the worker; their results land in each conversation's
History."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from assistant import services
from assistant.admin.listing import ConversationModelAdmin
from assistant.cleanup import purge_after
from assistant.history import an_id
from assistant.models import Conversation, Message
from assistant.providers import check_instructions
from assistant.settings.conf import compaction_config
from assistant.staff import (
    CALLS_THE_MODEL,
    COMPACT_TOOL_RESULTS,
    EMERGENCY_1,
    EMERGENCY_2,
    FORK_CONTINUATION,
    FORK_FROM_MESSAGE,
    LABELS,
    REGENERATE_SUMMARY,
    RESTORE_ORIGINALS,
    SUMMARIZE_AFTER,
    SUMMARIZE_BEFORE,
    UNDO_COMPACTION,
    can_continue,
    undo_words,
)

Conversations = QuerySet[Conversation]
# What a confirmation page shows of one conversation (assistant.services previews).
PreviewOf = Callable[[Conversation], services.Preview]

# A run over more conversations than this goes to the worker.
INLINE_LIMIT = 5
BRANCH_MESSAGES_SHOWN = 50


def describe(conversations: list[Conversation]) -> str:
    return ", ".join(f"“{c}” (#{c.pk})" for c in conversations)


def live_only(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> list[Conversation]:
    """The selected conversations that are not deleted; the others are named
    in a warning and left alone."""
    chosen = sorted(queryset, key=lambda c: c.pk)
    deleted = [c for c in chosen if c.deleted_at is not None]
    if deleted:
        modeladmin.message_user(
            request,
            f"Refused for deleted conversation(s) {describe(deleted)}: restore them first "
            "(“Restore deleted conversations”).",
            messages.WARNING,
        )
    return [c for c in chosen if c.deleted_at is None]


def log(
    request: HttpRequest, conversations: list[Conversation], message: str, flag: int = CHANGE
) -> Any:
    user_id = request.user.pk
    assert user_id is not None  # the admin serves signed-in staff only
    return LogEntry.objects.log_actions(user_id, conversations, flag, message)


def _confirmation(
    modeladmin: ConversationModelAdmin,
    request: HttpRequest,
    *,
    action: str,
    title: str,
    intro: str,
    rows: list[dict[str, Any]],
    on_worker: bool,
    takes_instructions: bool = False,
) -> TemplateResponse:
    """The confirmation page. Only the rows with something to do are
    submitted; when none has, there is nothing to confirm and no button."""
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "rows": rows,
        "actionable": [row for row in rows if not row.get("preview") or row["preview"].changes],
        "action": action,
        "on_worker": on_worker,
        "takes_instructions": takes_instructions,
        "opts": modeladmin.model._meta,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/assistant/conversation/confirm_action.html", context)


# The actions that may write summaries: their confirmation takes instructions for them.
TAKES_INSTRUCTIONS = frozenset({*CALLS_THE_MODEL, COMPACT_TOOL_RESULTS})


def _run(
    modeladmin: ConversationModelAdmin,
    request: HttpRequest,
    action: str,
    conversations: list[Conversation],
) -> None:
    """Inline for a few conversations when no model is called, else on the worker."""
    instructions = request.POST.get("instructions", "") if action in TAKES_INSTRUCTIONS else ""
    try:
        check_instructions(instructions)  # refused before any is queued or run
        _run_checked(modeladmin, request, action, conversations, instructions)
    except ValidationError as error:
        modeladmin.message_user(request, " ".join(error.messages), messages.ERROR)


def _run_checked(
    modeladmin: ConversationModelAdmin,
    request: HttpRequest,
    action: str,
    conversations: list[Conversation],
    instructions: str,
) -> None:
    if action in CALLS_THE_MODEL or len(conversations) > INLINE_LIMIT:
        for conversation in conversations:
            services.queue_staff_action(
                action, conversation.pk, acting_user=request.user, instructions=instructions
            )
        modeladmin.message_user(
            request,
            f"{LABELS[action]}: queued on the worker for {describe(conversations)}. "
            "The result appears in each conversation's History and compaction events.",
            messages.INFO,
        )
        return
    for conversation in conversations:
        outcome = services.run_staff_action(action, conversation.pk, request.user.pk, instructions)
        modeladmin.message_user(
            request,
            f"{LABELS[action]} on “{conversation}” (#{conversation.pk}): {outcome.message}.",
            messages.SUCCESS if outcome.changed else messages.WARNING,
        )


def _preview_rows(conversations: list[Conversation], preview: PreviewOf) -> list[dict[str, Any]]:
    return [{"conversation": c, "preview": preview(c)} for c in conversations]


def _confirmed_run(
    modeladmin: ConversationModelAdmin,
    request: HttpRequest,
    queryset: Conversations,
    action: str,
    intro: str,
    preview: PreviewOf,
) -> HttpResponse | None:
    conversations = live_only(modeladmin, request, queryset)
    if not conversations:
        return None
    if request.POST.get("post") == "yes":
        _run(modeladmin, request, action, conversations)
        return None
    return _confirmation(
        modeladmin,
        request,
        action=request.POST["action"],
        title=f"{LABELS[action]}: confirm",
        intro=intro,
        rows=_preview_rows(conversations, preview),
        on_worker=action in CALLS_THE_MODEL or len(conversations) > INLINE_LIMIT,
        takes_instructions=action in TAKES_INSTRUCTIONS,
    )


@admin.action(permissions=["compact"], description="Emergency compact, level 1…")
def emergency_compact_level_1(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> HttpResponse | None:
    return _confirmed_run(
        modeladmin,
        request,
        queryset,
        EMERGENCY_1,
        "Level 1 compacts every tool result, whatever its size, and regenerates the window "
        f"summary keeping {compaction_config().EMERGENCY_RECENT_FRACTION:.0%} of the window "
        "verbatim. Originals are kept; “Restore compacted originals” undoes the tool-result part.",
        lambda c: services.emergency_preview(c, 1),
    )


@admin.action(permissions=["compact"], description="Emergency compact, level 2…")
def emergency_compact_level_2(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> HttpResponse | None:
    return _confirmed_run(
        modeladmin,
        request,
        queryset,
        EMERGENCY_2,
        "Level 2 summarizes everything but the current turn's user message and the newest "
        "step (never splitting a tool call from its result) and compacts every tool result. "
        "Originals are kept.",
        lambda c: services.emergency_preview(c, 2),
    )


@admin.action(permissions=["compact"], description="Regenerate window summary…")
def regenerate_window_summary(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> HttpResponse | None:
    return _confirmed_run(
        modeladmin,
        request,
        queryset,
        REGENERATE_SUMMARY,
        "Shifts the window now, whatever the triggers say: the older messages go into a new "
        "window summary and the recent ones stay verbatim.",
        services.regenerate_preview,
    )


@admin.action(permissions=["compact"], description="Restore compacted originals…")
def restore_compacted_originals(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> HttpResponse | None:
    return _confirmed_run(
        modeladmin,
        request,
        queryset,
        RESTORE_ORIGINALS,
        "The model is shown the verbatim originals of compacted messages again, and they stay "
        "verbatim from now on. Originals dropped by retention cannot come back.",
        services.restore_preview,
    )


@admin.action(permissions=["compact"], description="Undo the last compaction…")
def undo_last_compaction(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> HttpResponse | None:
    return _confirmed_run(
        modeladmin,
        request,
        queryset,
        UNDO_COMPACTION,
        "Takes the conversation back to the request it sent before its last compaction: "
        "the summary, split and segment its shift replaced, and the messages it compacted "
        "sent whole again; the messages since stay verbatim. The same shift "
        "waits until the context has grown 10% past the trigger (docs/compaction.rst).",
        undo_words,
    )


@admin.action(permissions=["compact"], description="Summarize before a message…")
def summarize_before_message(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> HttpResponse | None:
    """The first POST lists the user messages; the confirming POST queues the cut
    before the one chosen on the worker (it calls the summarizer)."""
    return _cut_at_message(
        modeladmin, request, queryset, SUMMARIZE_BEFORE, services.summarize_before_preview
    )


@admin.action(permissions=["compact"], description="Summarize after a message…")
def summarize_after_message(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> HttpResponse | None:
    """The first POST lists the user messages; the confirming POST queues, on the
    worker, the summary of what follows the chosen one's turn, up to the newest step."""
    return _cut_at_message(
        modeladmin, request, queryset, SUMMARIZE_AFTER, services.summarize_after_preview
    )


def _cut_at_message(
    modeladmin: ConversationModelAdmin,
    request: HttpRequest,
    queryset: Conversations,
    cut: str,
    preview: Callable[[Conversation, int], object],
) -> HttpResponse | None:
    """Where to cut: the message page, then the cut queued on the worker once its
    preview (which refuses as the cut refuses) accepts the message chosen."""
    if queryset.count() != 1:
        modeladmin.message_user(request, "Select exactly one conversation.", messages.ERROR)
        return None
    conversations = live_only(modeladmin, request, queryset)
    if not conversations:
        return None
    conversation = conversations[0]
    posted = request.POST.get("message_id")
    where = "before" if cut == SUMMARIZE_BEFORE else "after"
    if request.POST.get("post") == "yes" and isinstance(posted, str) and posted.isdigit():
        try:
            preview(conversation, int(posted))
            services.queue_staff_action(
                cut,
                conversation.pk,
                acting_user=request.user,
                instructions=request.POST.get("instructions", ""),
                message_id=int(posted),
            )
        except ValidationError as refused:
            modeladmin.message_user(request, " ".join(refused.messages), messages.ERROR)
        else:
            modeladmin.message_user(
                request,
                f"{LABELS[cut]}: queued on the worker for “{conversation}” "
                f"(#{conversation.pk}) {where} message #{posted}.",
                messages.INFO,
            )
            return HttpResponseRedirect(
                reverse("admin:assistant_conversation_change", args=[conversation.pk])
            )
    return _branch_page(
        modeladmin,
        request,
        queryset,
        conversation,
        action=f"summarize_{where}_message",
        title=LABELS[cut],
    )


@admin.action(permissions=["compact"], description="Compact tool results now")
def compact_tool_results_now(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> None:
    conversations = live_only(modeladmin, request, queryset)
    if conversations:
        _run(modeladmin, request, COMPACT_TOOL_RESULTS, conversations)


@admin.action(permissions=["fork"], description="Continue in a new conversation")
def continue_in_new_conversation(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> None:
    """Its summary calls the summarizer: queued on the worker, like the other runs
    that do; one past MAX_FORK_DEPTH is refused at once."""
    conversations = live_only(modeladmin, request, queryset)
    refused = [c for c in conversations if not can_continue(c)]
    if refused:
        modeladmin.message_user(
            request,
            f"Not forked (more than {compaction_config().MAX_FORK_DEPTH} forks deep): "
            + ", ".join(f"“{c}”" for c in refused)
            + ".",
            messages.WARNING,
        )
    chosen = [c for c in conversations if c not in refused]
    if chosen:
        _run(modeladmin, request, FORK_CONTINUATION, chosen)


@admin.action(permissions=["fork"], description="Branch from a message…")
def branch_from_message(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> HttpResponse | None:
    """The first POST shows the conversation's user messages (newest first,
    searchable); the confirming POST forks at the one chosen."""
    if queryset.count() != 1:
        modeladmin.message_user(
            request, "Select exactly one conversation to branch.", messages.ERROR
        )
        return None
    conversations = live_only(modeladmin, request, queryset)
    if not conversations:
        return None
    conversation = conversations[0]
    if request.POST.get("post") == "yes":
        branched = _branch(modeladmin, request, conversation)
        if branched is not None:
            return branched
    return _branch_page(modeladmin, request, queryset, conversation)


def _branch(
    modeladmin: ConversationModelAdmin, request: HttpRequest, conversation: Conversation
) -> HttpResponse | None:
    """Queue the branch at the chosen message on the worker (its summary calls the
    summarizer, never inside a web request): back to the conversation's page, or None
    (with the error shown) when it cannot be made there."""
    message_id = _branch_point(conversation, request.POST.get("message_id"))
    if message_id is None:
        modeladmin.message_user(
            request,
            "Could not branch: choose one of this conversation's user messages "
            f"(and forks stop at {compaction_config().MAX_FORK_DEPTH} levels).",
            messages.ERROR,
        )
        return None
    services.queue_staff_action(
        FORK_FROM_MESSAGE, conversation.pk, acting_user=request.user, message_id=message_id
    )
    modeladmin.message_user(
        request,
        f"{LABELS[FORK_FROM_MESSAGE]}: queued on the worker for “{conversation}” "
        f"(#{conversation.pk}) at message #{message_id}. The branch appears in this "
        "conversation's History; its page shows the message to edit and resend in full.",
        messages.INFO,
    )
    return HttpResponseRedirect(
        reverse("admin:assistant_conversation_change", args=[conversation.pk])
    )


def _branch_point(conversation: Conversation, posted: Any) -> int | None:
    """The posted message id when a branch can start there: one of this conversation's
    user messages, and the fork under MAX_FORK_DEPTH (checked again on the worker)."""
    if not isinstance(posted, str) or not (posted.isascii() and posted.isdigit()):
        return None
    message_id = int(posted)
    try:
        an_id("message_id", message_id)
    except ValidationError:
        return None
    own = Message.objects.filter(
        pk=message_id, conversation_id=conversation.pk, role=Message.Role.USER
    ).exists()
    return message_id if own and can_continue(conversation) else None


def _branch_page(
    modeladmin: ConversationModelAdmin,
    request: HttpRequest,
    queryset: Conversations,
    conversation: Conversation,
    *,
    action: str = "branch_from_message",
    title: str = "Branch from a message",
) -> HttpResponse:
    """The user messages to branch from, or to cut before (newest first, searchable)."""
    search = request.POST.get("q", "").strip()
    user_messages = Message.objects.filter(conversation=conversation, role=Message.Role.USER)
    total = user_messages.count()
    if search:
        user_messages = user_messages.filter(content__icontains=search)
    matching = user_messages.count()
    shown = list(user_messages.model_view().order_by("-id")[:BRANCH_MESSAGES_SHOWN])
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "action_name": action,
        "subtitle": str(conversation),
        "conversation": conversation,
        "user_messages": shown,
        "search": search,
        "total": total,
        "matching": matching,
        "queryset": queryset,
        "opts": modeladmin.model._meta,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(
        request, "admin/assistant/conversation/branch_from_message.html", context
    )


@admin.action(permissions=["delete"], description="Delete selected conversations…")
def delete_selected(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> HttpResponse | None:
    """The admin's delete marks conversations deleted: the purge job removes
    them after the retention (with its in-use checks); until then they can be
    restored."""
    conversations = live_only(modeladmin, request, queryset)
    if not conversations:
        return None
    if request.POST.get("post") == "yes":
        count = services.mark_deleted(c.pk for c in conversations)
        log(request, conversations, f"Marked deleted ({retention_words()}).")
        modeladmin.message_user(
            request,
            f"Marked {count} conversation(s) deleted: {describe(conversations)}. "
            f"{retention_words().capitalize()}; until then “Restore deleted conversations” "
            "brings them back.",
            messages.SUCCESS,
        )
        return None
    forks = Conversation.objects.filter(
        parent_conversation__in=conversations, deleted_at__isnull=True
    ).count()
    return _confirmation(
        modeladmin,
        request,
        action="delete_selected",
        title="Delete: confirm",
        intro=(
            f"These conversations will be marked deleted; {retention_words()}, with their "
            "messages and compaction events, unless still in use. "
            + (
                f"Their {forks} live fork(s) keep working: each keeps the summary it carries."
                if forks
                else ""
            )
        ),
        rows=[{"conversation": c, "preview": None} for c in conversations],
        on_worker=False,
    )


@admin.action(permissions=["delete"], description="Restore deleted conversations")
def restore_deleted_conversations(
    modeladmin: ConversationModelAdmin, request: HttpRequest, queryset: Conversations
) -> None:
    result = services.restore_deleted(c.pk for c in queryset)
    by_id = {c.pk: c for c in queryset}
    restored = [by_id[pk] for pk in result.restored]
    if restored:
        log(request, restored, "Restored from deleted.")
        modeladmin.message_user(request, f"Restored {describe(restored)}.", messages.SUCCESS)
    if result.expired:
        modeladmin.message_user(
            request,
            f"Not restored (deleted longer ago than the retention; the purge may remove them "
            f"at any time): {describe([by_id[pk] for pk in result.expired])}.",
            messages.ERROR,
        )
    if result.not_deleted:
        live = describe([by_id[pk] for pk in result.not_deleted])
        modeladmin.message_user(
            request,
            f"Not deleted, nothing to restore: {live}.",
            messages.WARNING,
        )


def retention_words() -> str:
    keep = purge_after()
    if keep is None:
        return "the purge never removes them (PURGE_RETENTION_DAYS is null)"
    return f"the purge removes them after {keep.days} days"
