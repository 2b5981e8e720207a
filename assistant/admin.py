"""The Django admin: conversations with what the model sees, and the staff
actions that compact, fork and branch them.

Actions are thin: each calls one service and reports what it did. Actions
declare the permission they need (`fork` or `compact`, backed by the
`assistant.fork_conversation` and `assistant.compact_conversation`
permissions); Django hides the ones a user lacks, and posting one anyway is
refused with 403.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import (
    BigIntegerField,
    Count,
    IntegerField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Length
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from assistant import services
from assistant.conf import compaction_config
from assistant.models import CompactionEvent, Conversation, Message, MetadataKeys

MESSAGE_INLINE_LIMIT = 200
EVENTS_SHOWN = 50
FORK_PERMISSION = "assistant.fork_conversation"
COMPACT_PERMISSION = "assistant.compact_conversation"


class ForkFilter(admin.SimpleListFilter):
    title = "origin"
    parameter_name = "origin"

    def lookups(self, request, model_admin):
        return [("root", "Started fresh"), ("fork", "Fork or continuation")]

    def queryset(self, request, queryset):
        if self.value() == "root":
            return queryset.filter(parent_conversation__isnull=True)
        if self.value() == "fork":
            return queryset.filter(parent_conversation__isnull=False)
        return queryset


class SummaryFilter(admin.SimpleListFilter):
    title = "window summary"
    parameter_name = "summarized"

    def lookups(self, request, model_admin):
        return [("yes", "Has a window summary"), ("no", "No window summary")]

    def queryset(self, request, queryset):
        has_summary = Q(metadata__has_key=MetadataKeys.COMPACTION_SUMMARY) & ~Q(
            **{f"metadata__{MetadataKeys.COMPACTION_SUMMARY}": None}
        )
        if self.value() == "yes":
            return queryset.filter(has_summary)
        if self.value() == "no":
            return queryset.exclude(has_summary)
        return queryset


class NeedsEmergencyFilter(admin.SimpleListFilter):
    title = "emergency compaction"
    parameter_name = "needs_emergency"

    def lookups(self, request, model_admin):
        return [("yes", "Marked: over the model's window")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(**{f"metadata__{MetadataKeys.NEEDS_EMERGENCY_COMPACTION}": True})
        return queryset


class MessageInline(admin.TabularInline):
    """The conversation's latest messages as the model sees them (read-only)."""

    model = Message
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ("id", "role", "model_text", "compacted", "tool_name", "token_estimate", "created_at")
    readonly_fields = fields
    verbose_name_plural = f"Messages (the latest {MESSAGE_INLINE_LIMIT}, as the model sees them)"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).model_view()

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="model-facing text")
    def model_text(self, obj: Message) -> str:
        text = getattr(obj, "model_content", None)
        if text is None:
            text = obj.compacted_content if obj.compacted_content is not None else obj.content
        if obj.tool_calls:
            calls = ", ".join(f"{c['name']}({json.dumps(c['arguments'])})" for c in obj.tool_calls)
            text = f"{text}\n→ {calls}" if text else f"→ {calls}"
        return Truncator(text).chars(600)

    @admin.display(description="compacted", boolean=True)
    def compacted(self, obj: Message) -> bool:
        return obj.is_compacted


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = (
        "__str__",
        "user",
        "parent_link",
        "message_count",
        "context_tokens",
        "last_compaction",
        "updated_at",
    )
    list_filter = (ForkFilter, SummaryFilter, NeedsEmergencyFilter, "created_at", "updated_at")
    search_fields = ("title", "user__username", "user__email", "=id")
    list_select_related = ("user", "parent_conversation")
    raw_id_fields = ("user", "parent_conversation")
    readonly_fields = (
        "metadata_pretty",
        "created_at",
        "updated_at",
        "last_exchange_at",
        "post_exchange_done_at",
        "summary_lease_token",
        "summary_lease_expires_at",
    )
    fieldsets = (
        (None, {"fields": ("title", "user", "parent_conversation", "system_prompt")}),
        (
            "Bookkeeping",
            {"classes": ("collapse",), "fields": readonly_fields},
        ),
    )
    inlines = (MessageInline,)
    change_form_template = "admin/assistant/conversation/change_form.html"
    actions = (
        "continue_in_new_conversation",
        "branch_from_message",
        "emergency_compact_level_1",
        "emergency_compact_level_2",
        "compact_tool_results_now",
        "regenerate_window_summary",
    )

    # --- permissions --------------------------------------------------------

    def has_fork_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(FORK_PERMISSION)

    def has_compact_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(COMPACT_PERMISSION)

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None):
        # Django would answer a posted action the user may not run with
        # "No action selected"; refuse it outright instead.
        if request.method == "POST" and "action" in request.POST:
            self._check_action_permission(request, request.POST["action"])
        return super().changelist_view(request, extra_context)

    def _check_action_permission(self, request: HttpRequest, name: str) -> None:
        found = self.get_action(name)
        if found is None:
            return
        for permission in getattr(found[0], "allowed_permissions", ()):
            if not getattr(self, f"has_{permission}_permission")(request):
                raise PermissionDenied

    # --- list ---------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        """The list columns come from annotations: a fixed number of queries
        per page, whatever the number of conversations or messages."""
        per_token = compaction_config().CHARS_PER_TOKEN
        cutoff = Coalesce(
            Cast(KT(f"metadata__{MetadataKeys.COMPACTION_THROUGH_MESSAGE_ID}"), BigIntegerField()),
            Value(0),
        )
        messages = Message.objects.filter(conversation=OuterRef("pk")).order_by()
        message_count = messages.values("conversation").annotate(n=Count("id")).values("n")
        window_tokens = (
            messages.filter(id__gt=OuterRef("_cutoff"))
            .values("conversation")
            .annotate(n=Sum("token_estimate"))
            .values("n")
        )
        last_event = (
            CompactionEvent.objects.filter(conversation=OuterRef("pk"))
            .order_by()
            .values("conversation")
            .annotate(at=Max("created_at"))
            .values("at")
        )
        fixed_chars = (
            Length(Coalesce(KT(f"metadata__{MetadataKeys.COMPACTION_SUMMARY}"), Value("")))
            + Length(
                Coalesce(KT(f"metadata__{MetadataKeys.PARENT_CONVERSATION_SUMMARY}"), Value(""))
            )
            + Length("system_prompt")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(_cutoff=cutoff)
            .annotate(
                _message_count=Coalesce(Subquery(message_count, output_field=IntegerField()), 0),
                _context_tokens=Coalesce(Subquery(window_tokens, output_field=IntegerField()), 0)
                + fixed_chars / per_token,
                _last_compaction=Subquery(last_event),
            )
        )

    @admin.display(description="parent", ordering="parent_conversation")
    def parent_link(self, obj: Conversation) -> str:
        if obj.parent_conversation_id is None:
            return "—"
        url = reverse("admin:assistant_conversation_change", args=[obj.parent_conversation_id])
        return format_html('<a href="{}">{}</a>', url, obj.parent_conversation)

    @admin.display(description="messages", ordering="_message_count")
    def message_count(self, obj: Conversation) -> int:
        return obj._message_count

    @admin.display(description="context tokens (est.)", ordering="_context_tokens")
    def context_tokens(self, obj: Conversation) -> int:
        return obj._context_tokens

    @admin.display(description="last compaction", ordering="_last_compaction")
    def last_compaction(self, obj: Conversation):
        return obj._last_compaction

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Conversation) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.metadata, indent=2, ensure_ascii=False))

    # --- change page: the context inspector ---------------------------------

    def get_formset_kwargs(self, request, obj, inline, prefix):
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        if isinstance(inline, MessageInline) and obj is not None and obj.pk:
            # Only the latest messages: a long conversation's page stays small.
            ids = Message.objects.filter(conversation=obj).order_by("-id").values("id")
            kwargs["queryset"] = inline.get_queryset(request).filter(
                id__in=Subquery(ids[:MESSAGE_INLINE_LIMIT])
            )
        return kwargs

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        obj = self.get_object(request, object_id)
        if obj is not None:
            extra_context["inspector"] = context_inspector(obj)
            extra_context["can_fork"] = self.has_fork_permission(request)
            extra_context["action_checkbox_name"] = helpers.ACTION_CHECKBOX_NAME
        return super().change_view(request, object_id, form_url, extra_context)

    # --- actions ------------------------------------------------------------

    @admin.action(permissions=["fork"], description="Continue in a new conversation")
    def continue_in_new_conversation(self, request: HttpRequest, queryset: QuerySet) -> None:
        created, refused = [], []
        for conversation in queryset:
            fork = services.fork_continuation(
                conversation, tool_services=conversation.tool_services
            )
            (created if fork is not None else refused).append(fork or conversation)
        if created:
            self.message_user(
                request,
                "Created " + ", ".join(f"“{fork}” (#{fork.pk})" for fork in created) + ".",
                messages.SUCCESS,
            )
        if refused:
            self.message_user(
                request,
                f"Not forked (more than {compaction_config().MAX_FORK_DEPTH} forks deep): "
                + ", ".join(f"“{c}”" for c in refused)
                + ".",
                messages.WARNING,
            )

    @admin.action(permissions=["fork"], description="Branch from a message…")
    def branch_from_message(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """In the shape of Django's delete_selected: the first POST shows the
        conversation's user messages; the confirming POST forks at the one chosen."""
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one conversation to branch.", messages.ERROR)
            return None
        conversation = queryset.get()
        if request.POST.get("post") == "yes":
            result = services.fork_from_message(conversation, request.POST.get("message_id"))
            if result is not None:
                fork, text = result
                self.message_user(
                    request,
                    f"Branched “{conversation}” into “{fork}” (#{fork.pk}). "
                    f"Message to edit and resend: {Truncator(text).chars(200)}",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(
                    reverse("admin:assistant_conversation_change", args=[fork.pk])
                )
            self.message_user(
                request,
                "Could not branch: choose one of this conversation's user messages "
                f"(and forks stop at {compaction_config().MAX_FORK_DEPTH} levels).",
                messages.ERROR,
            )
        user_messages = Message.objects.filter(
            conversation=conversation, role=Message.Role.USER
        ).model_view()
        context = {
            **self.admin_site.each_context(request),
            "title": "Branch from a message",
            "subtitle": str(conversation),
            "conversation": conversation,
            "user_messages": user_messages,
            "queryset": queryset,
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "admin/assistant/conversation/branch_from_message.html", context
        )

    @admin.action(permissions=["compact"], description="Emergency compact, level 1")
    def emergency_compact_level_1(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._emergency(request, queryset, 1)

    @admin.action(permissions=["compact"], description="Emergency compact, level 2")
    def emergency_compact_level_2(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._emergency(request, queryset, 2)

    def _emergency(self, request: HttpRequest, queryset: QuerySet, level: int) -> None:
        shrank = [c for c in queryset if services.emergency_compact(c, level=level)]
        self.message_user(
            request,
            f"Emergency compaction level {level}: the context shrank for {len(shrank)} of "
            f"{len(queryset)} conversation(s).",
            messages.SUCCESS if shrank else messages.WARNING,
        )

    @admin.action(permissions=["compact"], description="Compact tool results now")
    def compact_tool_results_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = sum(services.compact_tool_results(c) for c in queryset)
        self.message_user(
            request, f"Compacted or stubbed {count} tool result(s).", messages.SUCCESS
        )

    @admin.action(permissions=["compact"], description="Regenerate window summary")
    def regenerate_window_summary(self, request: HttpRequest, queryset: QuerySet) -> None:
        from assistant.summaries import regenerate_window_summary

        stored = [c for c in queryset if regenerate_window_summary(c)]
        self.message_user(
            request,
            f"Regenerated the window summary of {len(stored)} of {len(queryset)} conversation(s).",
            messages.SUCCESS if stored else messages.WARNING,
        )


def context_inspector(conversation: Conversation) -> dict[str, Any]:
    """What the model receives next, for the change page: the messages with
    their ids, the summaries, a token breakdown as bar segments, the events."""
    context = services.build_context(conversation)
    tokens = context.tokens
    parts = [
        ("system", "System prompt", tokens.system),
        ("summaries", "Summaries", tokens.summaries),
        ("messages", "Kept messages", tokens.messages),
        ("tools", "Tool results", tokens.tool_results),
    ]
    drawn = sum(value for _, _, value in parts) or 1
    threshold = compaction_config().CONTEXT_TOKEN_THRESHOLD
    ids = list(context.message_ids)
    rows = []
    for index, message in enumerate(context.messages):
        extra = {k: v for k, v in message.items() if k not in ("role", "content")}
        rows.append(
            {
                "id": ids[index] if index < len(ids) else None,
                "role": message.get("role", ""),
                "content": message.get("content", ""),
                "extra": json.dumps(extra, indent=2, ensure_ascii=False) if extra else "",
            }
        )
    try:
        request_json = json.dumps(context.to_anthropic(), indent=2, ensure_ascii=False)
    except Exception:  # the inspector never breaks the page
        request_json = ""
    return {
        "system": context.system,
        "parent_summary": context.parent_summary,
        "window_summary": context.window_summary,
        "cutoff_id": context.cutoff_id,
        "messages": rows,
        "total": tokens.total,
        "threshold": threshold,
        "share_of_threshold": round(100 * tokens.total / threshold, 1) if threshold else None,
        "segments": [
            {"key": key, "label": label, "tokens": value, "percent": round(100 * value / drawn, 2)}
            for key, label, value in parts
        ],
        "request_json": request_json,
        "events": list(
            conversation.compaction_events.order_by("-created_at", "-id")[:EVENTS_SHOWN]
        ),
    }


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("id", "conversation", "role", "tool_name", "compaction", "token_estimate")
    list_filter = ("role", "compaction")
    search_fields = ("=conversation__id", "tool_name", "tool_call_id")
    list_select_related = ("conversation",)
    raw_id_fields = ("conversation",)


@admin.register(CompactionEvent)
class CompactionEventAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "conversation",
        "kind",
        "tokens_before",
        "tokens_after",
        "messages_affected",
        "summarizer_model",
        "duration_ms",
    )
    list_filter = ("kind", "created_at")
    search_fields = ("=conversation__id", "summarizer_model")
    list_select_related = ("conversation",)
    raw_id_fields = ("conversation",)
