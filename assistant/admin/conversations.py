"""The conversation list (danger at a glance) and the conversation page
(inspector first, light however long the conversation)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import LogEntry
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from assistant import services
from assistant.admin import actions
from assistant.admin.cost_chart import cost_money, cost_section
from assistant.admin.filters import ContextFilter, DeletedFilter, ForkFilter, SummaryFilter
from assistant.admin.inspector import WireJSONEncoder, context_inspector, request_body
from assistant.admin.listing import (
    ConversationModelAdmin,
    FittingMedia,
    date_and_time,
    with_list_figures,
)
from assistant.cleanup import purge_date
from assistant.cost import Cost, costs_since, list_figures
from assistant.history import share, token_count
from assistant.metadata_keys import held_state
from assistant.models import Conversation, Message
from assistant.ops.health import live_worker_check
from assistant.settings.app import app_setting
from assistant.staff import undo_words
from assistant.window import current_limits, limits_for


class Listed(Protocol):
    """A row of the list, with the figures admin.listing annotates (and
    changelist_view sets) beside its columns."""

    _fork_depth: int
    _message_count: int
    _answer_provider: str | None
    _answer_model: str | None
    context_tokens: int | None
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


def action_func_and_name(action: Any) -> tuple[Callable[..., Any], str]:
    """A declared admin action's function and name: Django 5.2 lists each as a
    (function, name, description) tuple, Django 6.1 as an Action, whose
    unpacking is deprecated."""
    if isinstance(action, tuple):
        return action[0], action[1]
    return action.func, action.name


@admin.register(Conversation)
class ConversationAdmin(ConversationModelAdmin):
    list_display = (
        "id",
        "__str__",
        "user",
        "status",
        "parent_shown",
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
        actions.summarize_before_message,
        actions.summarize_after_message,
        actions.undo_last_compaction,
        actions.delete_selected,
        actions.restore_deleted_conversations,
    )

    # --- permissions --------------------------------------------------------

    def has_fork_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(FORK_PERMISSION)

    def has_compact_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(COMPACT_PERMISSION)

    def has_change_permission(self, request: HttpRequest, obj: Conversation | None = None) -> bool:
        # A deleted conversation is read-only until restored.
        if obj is not None and obj.deleted_at is not None:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Conversation | None = None) -> bool:
        if obj is not None and obj.deleted_at is not None:
            return False
        return super().has_delete_permission(request, obj)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django would answer a posted action the user may not run with
        # "No action selected"; refuse it outright instead.
        if request.method == "POST" and "action" in request.POST:
            self._check_action_permission(request, request.POST["action"])
        extra_context = {
            **(extra_context or {}),
            "limits": current_limits(),
            "no_worker": no_worker_banner(),
        }
        return super().changelist_view(request, extra_context)

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Conversation], **kwargs: Any
    ) -> HttpResponse | None:
        # Django filters on the posted ids as they come: one that is not an id is a 500.
        # kwargs: Django 6.1's action_location (the change list's or the change form's).
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        if not all(value.isascii() and value.isdigit() for value in selected):
            self.message_user(
                request,
                "Items must be selected by their ids in order to perform actions on them. "
                "No items have been changed.",
                messages.WARNING,
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset, **kwargs)

    def _check_action_permission(self, request: HttpRequest, name: str) -> None:
        # Every declared action, before Django filters out those the user lacks.
        base = self._get_base_actions()  # type: ignore[attr-defined]  # private, not in the stubs
        found = [
            func for func, action_name in map(action_func_and_name, base) if action_name == name
        ]
        for permission in getattr(found[0], "allowed_permissions", ()) if found else ():
            if not getattr(self, f"has_{permission}_permission")(request):
                raise PermissionDenied

    # --- delete: soft ---------------------------------------------------------

    def delete_model(self, request: HttpRequest, obj: Conversation) -> None:
        services.mark_deleted([obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> None:
        services.mark_deleted(queryset.values_list("pk", flat=True))

    def log_deletions(
        self, request: HttpRequest, queryset: QuerySet[Conversation]
    ) -> list[LogEntry] | LogEntry:
        return actions.log(
            request, list(queryset), f"Marked deleted ({actions.retention_words()})."
        )

    def get_deleted_objects(
        self, objs: Sequence[Conversation] | QuerySet[Conversation], request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        # Nothing is removed now: list the conversations, not every message.
        return [str(obj) for obj in objs], {"conversations": len(objs)}, set(), []

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: int) -> HttpResponse:
        response = super().response_delete(request, obj_display, obj_id)
        self.message_user(request, f"It is marked deleted: {actions.retention_words()}.")
        return response

    # --- list ---------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        return with_list_figures(super().get_queryset(request))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
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
    def parent_shown(self, obj: Conversation) -> str:
        # Not named parent_link: the model's field of that name (how it is linked)
        # would win over this column in list_display.
        if obj.parent_conversation_id is None:
            return "—"
        url = reverse("admin:assistant_conversation_change", args=[obj.parent_conversation_id])
        at = obj.fork_message_id
        how = " (new session)" if obj.parent_link == Conversation.Link.SESSION else " (continued)"
        return format_html(
            '<a href="{}">#{}</a>{}',
            url,
            obj.parent_conversation_id,
            f" at message #{at}" if at else how,
        )

    @admin.display(description="fork depth", ordering="_fork_depth")
    def fork_depth(self, obj: Listed) -> int:
        return obj._fork_depth

    @admin.display(description="messages", ordering="_message_count")
    def message_count(self, obj: Listed) -> int:
        return obj._message_count

    @admin.display(description="context · % trigger · % window", ordering="context_tokens")
    def context_size(self, obj: Listed) -> str:
        # The window of the model that reads the next request, as on the conversation page.
        limits = limits_for(obj._answer_provider or "", obj._answer_model or "")
        tokens = obj.context_tokens
        if tokens is None:
            return "not measured yet (manage.py migrate measures it)"
        level = limits.level(tokens)
        return format_html(
            '<span class="context-{}" style="color:{};{}" title="shares of the trigger ({}) '
            'and of {}\'s window ({})"><span class="two-lines">{}</span>'
            '<span class="two-lines">{} · {}</span></span>',
            level,
            LEVEL_COLOURS[level],
            "font-weight:bold" if level != "ok" else "",
            token_count(limits.trigger),
            limits.model,
            token_count(limits.window),
            f"{tokens:,}",
            share(tokens, limits.trigger),
            share(tokens, limits.window),
        )

    @admin.display(description="cost · saved")
    def cost(self, obj: Listed) -> str:
        cost: Cost = obj._cost
        if not cost.calls and not cost.summarizer and not cost.embedding:
            return "—"
        figures = cost_money(cost)
        return format_html(
            '<span class="cost" title="chat {} + summarizer {} + embeddings {}; '
            'sending everything {}{}">'
            '<span class="two-lines">{} ·</span><span class="two-lines">{}</span></span>',
            figures["chat"],
            figures["summarizer"],
            figures["embedding"],
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

    def get_urls(self) -> list[URLPattern]:
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
        try:
            body = request_body(obj, shape=request.GET.get("shape", ""))
        except ValidationError as error:
            return JsonResponse({"error": " ".join(error.messages), "code": error.code}, status=400)
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

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra_context = dict(extra_context or {})
        obj = self.get_object(request, object_id)
        if obj is not None:
            extra_context.update(
                inspector=context_inspector(obj),
                costs=cost_section(obj),
                can_fork=self.has_fork_permission(request) and obj.deleted_at is None,
                can_restore=self.has_delete_permission(request) and obj.deleted_at is not None,
                undo=(
                    undo_words(obj)
                    if self.has_compact_permission(request) and obj.deleted_at is None
                    else None
                ),
                purge_date=purge_date(obj),
                fork_origin=fork_origin(obj),
                # The tree holds live conversations only (a deleted one is not in it).
                tree=tree_rows(obj) if obj.deleted_at is None else None,
                message_total=Message.objects.filter(conversation=obj).count(),
                summary_versions=obj.summary_versions.count(),
                action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
                no_worker=no_worker_banner(),
            )
        return super().change_view(request, object_id, form_url, extra_context)


NO_WORKER = (
    "No Celery worker is alive ({detail}): exchanges are not compacted and window "
    "summaries are not built ahead until one runs. Start one (docs: operations, Health)."
)


def no_worker_banner() -> str:
    """The banner of the conversation pages while no worker's heartbeat is live
    (the check /readyz makes, cached; none where that check is turned off), or ""."""
    if not app_setting("ASSISTANT_HEALTHZ_CHECK_WORKER"):
        return ""
    check = live_worker_check()
    return "" if check.ok else NO_WORKER.format(detail=check.detail)


PERIODS = {
    "Last 24 hours": timedelta(hours=24),
    "Last 7 days": timedelta(days=7),
    "Last 30 days": timedelta(days=30),
}


class CostChangeList(ChangeList):
    """The list, with each shown conversation's cost and message count, from the
    stored figures (one query a page while they cover what the rows hold)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        figures = list_figures(obj.pk for obj in self.result_list)
        for obj in self.result_list:
            obj._cost = figures[obj.pk].cost
            obj._message_count = figures[obj.pk].messages


def fork_origin(conversation: Conversation) -> dict[str, Any] | None:
    """For a branch: the parent's message it was branched at, in full (the
    text to edit and resend)."""
    message_id = conversation.fork_message_id
    if message_id is None:
        return None
    message = Message.objects.filter(pk=message_id).only("id", "content").first()
    return {"message_id": message_id, "text": message.content if message else None}


# The tree section shows at most this many conversations (a chat of thousands of
# sessions stays a page, not a wall; the rest are counted).
TREE_ROWS_SHOWN = 200
LINK_NAMES: dict[str, str] = {
    Conversation.Link.SESSION: "session",
    Conversation.Link.CONTINUATION: "continuation",
    Conversation.Link.BRANCH: "branch",
}


def tree_rows(conversation: Conversation) -> dict[str, Any] | None:
    """The tree the conversation belongs to (services.conversation_tree), as the rows
    of its page's tree section, parents first, each indented by its depth: how it
    leaves its parent (at which message, and for a branch its place among the
    siblings there, "2/3"), whether it is the shown one, its size and last activity.
    None for a conversation with no parent and no children. Two queries, whatever
    the tree's size."""
    root = services.conversation_tree(conversation)
    if not root.children:
        return None
    rows: list[dict[str, Any]] = []
    total = 0
    places: dict[int, str] = {}  # a branch's place among the siblings where it leaves
    stack: list[tuple[services.TreeNode, int, services.TreeNode | None]] = [(root, 0, None)]
    while stack:
        node, depth, parent = stack.pop()
        total += 1
        stack.extend((child, depth + 1, node) for child in reversed(node.children))
        for departs_at in {child.departs_at for child in node.children if child.departs_at}:
            siblings = node.siblings_at(departs_at)
            for index, sibling in enumerate(siblings[1:], start=2):
                places[sibling.conversation.pk] = f"{index}/{len(siblings)}"
        if len(rows) >= TREE_ROWS_SHOWN:
            continue
        place = places.get(node.conversation.pk, "") if parent is not None else ""
        rows.append(
            {
                "id": node.conversation.pk,
                "title": node.conversation.title,
                "indent": depth * 20,
                "link": LINK_NAMES.get(node.link, "root"),
                "departs_at": node.departs_at,
                "place": place,
                "active": node.active,
                "current": node.conversation.pk == conversation.pk,
                "size": node.size,
                "last_activity": node.last_activity,
            }
        )
    return {"rows": rows, "total": total, "hidden": total - len(rows)}
