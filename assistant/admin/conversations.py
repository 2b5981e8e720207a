"""The conversation list (danger at a glance) and the conversation page
(inspector first, light however long the conversation)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from assistant import services
from assistant.admin import actions
from assistant.admin.cost_chart import cost_money, cost_section
from assistant.admin.filters import ContextFilter, DeletedFilter, ForkFilter, SummaryFilter
from assistant.admin.inspector import WireJSONEncoder, context_inspector, request_body
from assistant.admin.listing import FittingMedia, date_and_time, with_list_figures
from assistant.metadata_keys import held_state
from assistant.models import Conversation, Message
from assistant.store.deletion import purge_date
from assistant.window.cost import Cost, costs_since
from assistant.window.cost_figures import conversation_costs
from assistant.window.limits import current_limits


class Listed(Protocol):
    """A row of the list, with the figures admin.listing annotates (and
    changelist_view sets) beside its columns."""

    _fork_depth: int
    _message_count: int
    _cost: Cost
    _last_compaction: datetime | None


FORK_PERMISSION = "assistant.fork_conversation"
COMPACT_PERMISSION = "assistant.compact_conversation"
LEVEL_COLOURS = {
    "ok": "inherit",
    "near": "#b45309",
    "past-trigger": "#dc2626",
    "over-window": "#7f1d1d",
}


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "__str__",
        "user",
        "status",
        "parent_link",
        "fork_depth",
        "message_count",
        "context_size",
        "cost",
        "last_compaction",
    )
    list_display_links = ("id", "__str__")
    list_filter = (DeletedFilter, ContextFilter, ForkFilter, SummaryFilter, "updated_at")
    search_fields = ("title", "user__username", "user__email", "=id")
    list_select_related = ("user", "parent_conversation")
    raw_id_fields = ("user", "parent_conversation")
    list_per_page = 50
    readonly_fields = (
        "deleted_at",
        "metadata_pretty",
        "state_pretty",
        "created_at",
        "updated_at",
        "last_exchange_at",
        "post_exchange_done_at",
        "recall_count",
        "summary_lease_token",
        "summary_lease_expires_at",
    )
    fieldsets = (
        (None, {"fields": ("title", "user", "parent_conversation", "system_prompt")}),
        ("Bookkeeping", {"classes": ("collapse",), "fields": readonly_fields}),
    )
    change_form_template = "admin/assistant/conversation/change_form.html"
    Media = FittingMedia
    change_list_template = "admin/assistant/conversation/change_list.html"
    delete_confirmation_template = "admin/assistant/conversation/delete_confirmation.html"
    # Our delete_selected (a soft delete) replaces Django's site-wide one of that name.
    actions = (
        actions.continue_in_new_conversation,
        actions.branch_from_message,
        actions.compact_tool_results_now,
        actions.emergency_compact_level_1,
        actions.emergency_compact_level_2,
        actions.regenerate_window_summary,
        actions.restore_compacted_originals,
        actions.delete_selected,
        actions.restore_deleted_conversations,
    )

    # --- permissions --------------------------------------------------------

    def has_fork_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(FORK_PERMISSION)

    def has_compact_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(COMPACT_PERMISSION)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A deleted conversation is read-only until restored.
        if obj is not None and obj.deleted_at is not None:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.deleted_at is not None:
            return False
        return super().has_delete_permission(request, obj)

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None):
        # Django would answer a posted action the user may not run with
        # "No action selected"; refuse it outright instead.
        if request.method == "POST" and "action" in request.POST:
            self._check_action_permission(request, request.POST["action"])
        extra_context = {**(extra_context or {}), "limits": current_limits()}
        return super().changelist_view(request, extra_context)

    def response_action(self, request: HttpRequest, queryset: QuerySet):
        # Django filters on the posted ids as they come: one that is not an id is a 500.
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        if not all(value.isascii() and value.isdigit() for value in selected):
            self.message_user(
                request,
                "Items must be selected by their ids in order to perform actions on them. "
                "No items have been changed.",
                messages.WARNING,
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset)

    def _check_action_permission(self, request: HttpRequest, name: str) -> None:
        # Every declared action, before Django filters out those the user lacks.
        # A private ModelAdmin method the stubs do not declare.
        base = self._get_base_actions()  # type: ignore[attr-defined]
        found = [func for func, action_name, _ in base if action_name == name]
        for permission in getattr(found[0], "allowed_permissions", ()) if found else ():
            if not getattr(self, f"has_{permission}_permission")(request):
                raise PermissionDenied

    # --- delete: soft ---------------------------------------------------------

    def delete_model(self, request: HttpRequest, obj: Conversation) -> None:
        services.mark_deleted([obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        services.mark_deleted(queryset.values_list("pk", flat=True))

    def log_deletions(self, request: HttpRequest, queryset) -> Any:
        return actions.log(
            request, list(queryset), f"Marked deleted ({actions.retention_words()})."
        )

    def get_deleted_objects(self, objs, request: HttpRequest):
        # Nothing is removed now: list the conversations, not every message.
        return [str(obj) for obj in objs], {"conversations": len(objs)}, set(), []

    def response_delete(self, request, obj_display, obj_id):
        response = super().response_delete(request, obj_display, obj_id)
        self.message_user(request, f"It is marked deleted: {actions.retention_words()}.")
        return response

    # --- list ---------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        return with_list_figures(super().get_queryset(request))

    def get_changelist(self, request: HttpRequest, **kwargs):
        return CostChangeList

    @admin.display(description="deleted", ordering="deleted_at")
    def status(self, obj: Conversation) -> str:
        if obj.deleted_at is None:
            return "—"
        return format_html(
            '<span style="color:#dc2626;white-space:nowrap">deleted {}</span>',
            obj.deleted_at.strftime("%Y-%m-%d"),
        )

    @admin.display(description="parent", ordering="parent_conversation")
    def parent_link(self, obj: Conversation) -> str:
        if obj.parent_conversation_id is None:
            return "—"
        url = reverse("admin:assistant_conversation_change", args=[obj.parent_conversation_id])
        at = obj.fork_message_id
        return format_html(
            '<a href="{}">#{}</a>{}',
            url,
            obj.parent_conversation_id,
            f" at message #{at}" if at else " (continued)",
        )

    @admin.display(description="fork depth", ordering="_fork_depth")
    def fork_depth(self, obj: Listed) -> int:
        return obj._fork_depth

    @admin.display(description="messages", ordering="_message_count")
    def message_count(self, obj: Listed) -> int:
        return obj._message_count

    @admin.display(description="context · % trigger · % window", ordering="context_tokens")
    def context_size(self, obj: Conversation) -> str:
        limits = current_limits()
        tokens = obj.context_tokens
        if tokens is None:
            return "not measured yet (manage.py migrate measures it)"
        level = limits.level(tokens)
        return format_html(
            '<span class="context-{}" style="color:{};{}"><span class="two-lines">{}</span>'
            '<span class="two-lines">{}% · {}%</span></span>',
            level,
            LEVEL_COLOURS[level],
            "font-weight:bold" if level != "ok" else "",
            f"{tokens:,}",
            round(100 * tokens / limits.trigger),
            round(100 * tokens / limits.window),
        )

    @admin.display(description="cost · saved")
    def cost(self, obj: Listed) -> str:
        cost: Cost = obj._cost
        if not cost.calls and not cost.summarizer:
            return "—"
        figures = cost_money(cost)
        return format_html(
            '<span class="cost" title="chat {} + summarizer {}; sending everything {}{}">'
            '<span class="two-lines">{} ·</span><span class="two-lines">{}</span></span>',
            figures["chat"],
            figures["summarizer"],
            figures["everything"],
            f"; {figures['estimated']}" if cost.estimated else "",
            figures["total"],
            figures["saved"],
        )

    @admin.display(description="last compaction", ordering="_last_compaction")
    def last_compaction(self, obj: Listed) -> str:
        if obj._last_compaction is None:
            return "—"
        return date_and_time(obj._last_compaction)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Conversation) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.metadata, indent=2, ensure_ascii=False))

    @admin.display(description="window state")
    def state_pretty(self, obj: Conversation) -> str:
        """The window's own state columns that hold something (assistant.metadata_keys)."""
        state = json.dumps(held_state(obj), indent=2, ensure_ascii=False)
        return format_html("<pre>{}</pre>", state)

    # --- change page ----------------------------------------------------------

    def get_urls(self):
        return [
            path(
                "costs/",
                self.admin_site.admin_view(self.costs_view),
                name="assistant_conversation_costs",
            ),
            path(
                "<path:object_id>/request.json",
                self.admin_site.admin_view(self.request_json_view),
                name="assistant_conversation_request",
            ),
            *super().get_urls(),
        ]

    def request_json_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        obj = self.get_object(request, object_id)
        if obj is None or not self.has_view_permission(request, obj):
            raise PermissionDenied
        body = request_body(obj, shape=request.GET.get("shape", ""))
        return JsonResponse(
            body, encoder=WireJSONEncoder, json_dumps_params={"indent": 2, "ensure_ascii": False}
        )

    def costs_view(self, request: HttpRequest) -> TemplateResponse:
        """Every conversation's cost, by period, the summarizer's apart."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        now = timezone.now()
        periods = {label: now - age for label, age in PERIODS.items()}
        totals = costs_since({**periods, "All time": None})
        rows = [
            {
                "label": label,
                "cost": cost,
                "money": cost_money(cost),
            }
            for label, cost in totals.items()
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "What compaction cost and saved",
            "rows": rows,
            "unpriced": sorted(set().union(*(cost.unpriced for cost in totals.values()))),
        }
        return TemplateResponse(request, "admin/assistant/conversation/costs.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        obj = self.get_object(request, object_id)
        if obj is not None:
            extra_context.update(
                inspector=context_inspector(obj),
                costs=cost_section(obj),
                can_fork=self.has_fork_permission(request) and obj.deleted_at is None,
                can_restore=self.has_delete_permission(request) and obj.deleted_at is not None,
                purge_date=purge_date(obj),
                fork_origin=fork_origin(obj),
                message_total=Message.objects.filter(conversation=obj).count(),
                summary_versions=obj.summary_versions.count(),
                action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
            )
        return super().change_view(request, object_id, form_url, extra_context)


PERIODS = {
    "Last 24 hours": timedelta(hours=24),
    "Last 7 days": timedelta(days=7),
    "Last 30 days": timedelta(days=30),
}


class CostChangeList(ChangeList):
    """The list, with each shown conversation's cost (three queries a page)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        costs = conversation_costs(obj.pk for obj in self.result_list)
        for obj in self.result_list:
            obj._cost = costs[obj.pk]


def fork_origin(conversation: Conversation) -> dict[str, Any] | None:
    """For a branch: the parent's message it was branched at, in full (the
    text to edit and resend)."""
    message_id = conversation.fork_message_id
    if message_id is None:
        return None
    message = Message.objects.filter(pk=message_id).only("id", "content").first()
    return {"message_id": message_id, "text": message.content if message else None}
