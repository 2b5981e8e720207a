"""Messages and compaction events: read-only lists, filterable by conversation
(the conversation page links to both, newest first)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from assistant import services
from assistant.admin.filters import OfflineFallbackFilter
from assistant.admin.listing import FittingMedia, date_and_time
from assistant.history import measures, token_change
from assistant.models import CompactionEvent, Message, OfflineFallback


class ReadOnlyAdmin(admin.ModelAdmin):
    list_per_page = 50
    Media = FittingMedia

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Message | CompactionEvent) -> str:
        return date_and_time(obj.created_at)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _pin(
    modeladmin: admin.ModelAdmin[Message],
    request: HttpRequest,
    queryset: QuerySet[Message],
    pinned: bool,
) -> None:
    """Pin or unpin each selected message through the service; each refusal is said,
    and the count only when something changed or nothing was refused."""
    changed = refused = 0
    for message in queryset.select_related("conversation").order_by("id"):
        try:
            if message.pinned != pinned:
                services.pin_message(
                    message.conversation, message.pk, pinned, acting_user=request.user
                )
                changed += 1
        except ValidationError as error:
            refused += 1
            modeladmin.message_user(
                request, f"Message {message.pk}: {' '.join(error.messages)}", messages.ERROR
            )
    if changed or not refused:
        verb = "pinned" if pinned else "unpinned"
        modeladmin.message_user(request, f"{changed} message(s) {verb}.", messages.SUCCESS)


@admin.action(permissions=["compact"], description="Pin: always send verbatim")
def pin_messages(
    modeladmin: admin.ModelAdmin[Message], request: HttpRequest, queryset: QuerySet[Message]
) -> None:
    _pin(modeladmin, request, queryset, True)


@admin.action(permissions=["compact"], description="Unpin")
def unpin_messages(
    modeladmin: admin.ModelAdmin[Message], request: HttpRequest, queryset: QuerySet[Message]
) -> None:
    _pin(modeladmin, request, queryset, False)


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "conversation",
        "role",
        "tool_name",
        "compaction",
        "pinned",
        "tokens",
        "created",
    )
    list_filter = ("role", "compaction", "pinned")
    actions = (pin_messages, unpin_messages)

    def has_compact_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("assistant.compact_conversation")

    search_fields = ("=conversation__id", "tool_name", "tool_call_id")
    exclude = ("search_vector",)  # search_history's document of the content shown
    list_select_related = ("conversation",)
    raw_id_fields = ("conversation",)
    ordering = ("-id",)

    @admin.display(description="token estimate", ordering="token_estimate")
    def tokens(self, obj: Message) -> str:
        return f"{obj.token_estimate:,}"

    # Counting every message of a large table on each page costs more than it tells.
    show_full_result_count = False


@admin.register(CompactionEvent)
class CompactionEventAdmin(ReadOnlyAdmin):
    list_display = (
        "created",
        "conversation_link",
        "kind_and_fallback",
        "tokens",
        "messages_affected",
        "summarizer",
        "duration",
        "acting_user",
    )
    list_filter = ("kind", OfflineFallbackFilter, "created_at")
    search_fields = ("=conversation__id", "summarizer_model", "acting_user__username")
    list_select_related = ("conversation", "acting_user")
    raw_id_fields = ("conversation", "acting_user")
    ordering = ("-created_at", "-id")
    show_full_result_count = False

    @admin.display(description="conversation", ordering="conversation_id")
    def conversation_link(self, obj: CompactionEvent) -> str:
        # Titles repeat ("newcomer 6 turns"): the id tells them apart.
        url = reverse("admin:assistant_conversation_change", args=[obj.conversation_id])
        return format_html('<a href="{}">#{} {}</a>', url, obj.conversation_id, obj.conversation)

    @admin.display(description="kind · offline fallback", ordering="kind")
    def kind_and_fallback(self, obj: CompactionEvent) -> str:
        """The kind, and for a shift the offline summarizer wrote, why (one column:
        the list fits its box at 1280 px)."""
        reason = (obj.details or {}).get("offline_fallback")
        if reason not in OfflineFallback.values:
            return obj.get_kind_display()
        return format_html(
            '<span class="two-lines">{}</span><span class="two-lines">offline: {}</span>',
            obj.get_kind_display(),
            OfflineFallback(reason).label,
        )

    @admin.display(description="summarizer · tokens in / out", ordering="summarizer_model")
    def summarizer(self, obj: CompactionEvent) -> str:
        if not obj.summarizer_model:
            return "—"
        return format_html(
            '<span class="two-lines">{}</span><span class="two-lines">{} / {}</span>',
            obj.summarizer_model,
            f"{obj.summarizer_input_tokens:,}",
            f"{obj.summarizer_output_tokens:,}",
        )

    @admin.display(description="tokens before → after, of what", ordering="tokens_before")
    def tokens(self, obj: CompactionEvent) -> str:
        """The figures and what they measure (docs/admin.rst, "Token figures")."""
        # Wraps between words: the list fits its box at 1280 px.
        return format_html(
            '<span class="figures">{}</span>',
            token_change(obj.tokens_before, obj.tokens_after, measures(obj)),
        )

    @admin.display(description="duration ms", ordering="duration_ms")
    def duration(self, obj: CompactionEvent) -> str:
        return f"{obj.duration_ms:,}"
