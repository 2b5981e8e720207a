"""The window summary's history (docs/admin.rst, "Summary history"): every
version, with its split, model, cost, author and review; the text of each and
what its compaction dropped (a diff of the request before and after); a form
to correct the current summary; one button to revert to a version or mark it
reviewed. Each view calls one service and reports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from assistant import services
from assistant.admin.listing import FittingMedia, SummaryVersionModelAdmin, date_and_time
from assistant.cost import SummarizerCall, summarizer_cost
from assistant.models import Conversation, SummaryVersion
from assistant.providers import price_of
from assistant.summary import compaction_diff, current_version
from assistant.window import load_window

COMPACT_PERMISSION = "assistant.compact_conversation"


def history_url(conversation_id: int) -> str:
    changelist = reverse("admin:assistant_summaryversion_changelist")
    return f"{changelist}?conversation__id__exact={conversation_id}"


@admin.register(SummaryVersion)
class SummaryVersionAdmin(SummaryVersionModelAdmin):
    list_display = (
        "created",
        "conversation_link",
        "kind",
        "current",
        "split",
        "model_and_tokens",
        "cost",
        "created_by",
        "reviewed",
        "buttons",
    )
    list_display_links = ("created",)
    list_filter = ("kind", "created_at")
    search_fields = ("=conversation__id", "model")
    list_select_related = ("conversation", "created_by", "reviewed_by")
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False
    fields = ("conversation", "kind", "split", "model", "created_by", "reviewed", "text_shown")
    readonly_fields = fields
    change_form_template = "admin/assistant/summaryversion/change_form.html"
    Media = FittingMedia

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: SummaryVersion | None = None
    ) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: SummaryVersion | None = None
    ) -> bool:
        return False  # nothing is lost: every version stays with its conversation

    def get_list_display(self, request: HttpRequest) -> Any:
        """One conversation's history (the conversation page's link) names it in its
        title, not in a column: the row, its three controls included, fits 1280 px."""
        shown = super().get_list_display(request)
        if "conversation__id__exact" in request.GET:
            return [name for name in shown if name != "conversation_link"]
        return shown

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        pk = _int(request.GET.get("conversation__id__exact"))
        conversation = Conversation.objects.filter(pk=pk).first() if pk is not None else None
        if conversation is not None:
            title = f"Summary history of “{conversation}” (#{conversation.pk})"
            extra_context = {**(extra_context or {}), "title": title}
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[SummaryVersion]:
        # Every summary write keeps a version: the newest of a conversation is the one sent.
        newer = SummaryVersion.objects.filter(
            conversation=OuterRef("conversation"), id__gt=OuterRef("id")
        )
        return super().get_queryset(request).annotate(_superseded=Exists(newer))

    @admin.display(description="sent now", boolean=True)
    def current(self, obj: SummaryVersion) -> bool:
        return not getattr(obj, "_superseded", True)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: SummaryVersion) -> str:
        return date_and_time(obj.created_at)

    @admin.display(description="conversation", ordering="conversation_id")
    def conversation_link(self, obj: SummaryVersion) -> str:
        url = reverse("admin:assistant_conversation_change", args=[obj.conversation_id])
        return format_html('<a href="{}">#{} {}</a>', url, obj.conversation_id, obj.conversation)

    @admin.display(description="split: summarizes up to", ordering="through_message_id")
    def split(self, obj: SummaryVersion) -> str:
        return f"message {obj.through_message_id}" if obj.through_message_id else "—"

    @admin.display(description="model · tokens in / out", ordering="model")
    def model_and_tokens(self, obj: SummaryVersion) -> str:
        if not obj.model:
            return "—"
        return format_html(
            '<span class="figures">{} ·</span><span class="figures">{} / {}</span>',
            obj.model,
            f"{obj.input_tokens:,}",
            f"{obj.output_tokens:,}",
        )

    @admin.display(description="cost")
    def cost(self, obj: SummaryVersion) -> str:
        price = price_of(obj.model) if obj.model else None
        if price is None:
            return "—"
        call = SummarizerCall(obj.created_at, obj.model, obj.input_tokens, obj.output_tokens)
        return f"${summarizer_cost(call, price):.4f}"

    @admin.display(description="reviewed")
    def reviewed(self, obj: SummaryVersion) -> str:
        if obj.reviewed_at is None:
            return "not yet"
        return format_html(
            '<span class="figures">by {},</span>{}',
            obj.reviewed_by or "a deleted user",
            date_and_time(obj.reviewed_at),
        )

    @admin.display(description="text")
    def text_shown(self, obj: SummaryVersion) -> str:
        return format_html('<pre class="summary-text">{}</pre>', obj.text)

    @admin.display(description="")
    def buttons(self, obj: SummaryVersion) -> str:
        """One click each, posted with the list's own form (its CSRF token)."""
        view = reverse("admin:assistant_summaryversion_change", args=[obj.pk])
        revert = reverse("admin:assistant_summary_revert", args=[obj.pk])
        review = reverse("admin:assistant_summary_review", args=[obj.pk])
        # One control a line: the row fits its box at 1280 px (docs/admin.rst).
        return format_html(
            '<span class="controls"><a href="{}">text and diff</a>'
            '<button type="submit" class="button summary-revert" formaction="{}" '
            'formmethod="post">Revert to this</button>'
            '<button type="submit" class="button summary-review" formaction="{}" '
            'formmethod="post">Mark reviewed</button></span>',
            view,
            revert,
            review,
        )

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<int:version_id>/revert/",
                self.admin_site.admin_view(require_POST(self.revert_view)),
                name="assistant_summary_revert",
            ),
            path(
                "<int:version_id>/review/",
                self.admin_site.admin_view(require_POST(self.review_view)),
                name="assistant_summary_review",
            ),
            path(
                "correct/<int:conversation_id>/",
                self.admin_site.admin_view(self.correct_view),
                name="assistant_summary_correct",
            ),
            *super().get_urls(),
        ]

    def _may_compact(self, request: HttpRequest) -> None:
        if not request.user.has_perm(COMPACT_PERMISSION):
            raise PermissionDenied

    def _done(
        self, request: HttpRequest, conversation: Conversation, run: Callable[[], str]
    ) -> HttpResponseRedirect:
        """Run one service call, say what it did (or why not), and write it into the
        conversation's History."""
        try:
            message = run()
            self.message_user(request, message, messages.SUCCESS)
            user_id = request.user.pk
            assert user_id is not None  # the admin serves signed-in staff only
            LogEntry.objects.log_actions(user_id, [conversation], CHANGE, message)
        except ValidationError as error:
            self.message_user(request, " ".join(error.messages), messages.ERROR)
        return HttpResponseRedirect(history_url(conversation.pk))

    def revert_view(self, request: HttpRequest, version_id: int) -> HttpResponseRedirect:
        self._may_compact(request)
        version = get_object_or_404(SummaryVersion, pk=version_id)
        conversation = version.conversation

        def run() -> str:
            made = services.revert_summary(conversation, version.pk, acting_user=request.user)
            return f"Version {version.pk} is the current summary again (as version {made.pk})."

        return self._done(request, conversation, run)

    def review_view(self, request: HttpRequest, version_id: int) -> HttpResponseRedirect:
        self._may_compact(request)
        version = get_object_or_404(SummaryVersion, pk=version_id)

        def run() -> str:
            services.review_summary(version.conversation, version.pk, acting_user=request.user)
            return f"Version {version.pk} marked reviewed."

        return self._done(request, version.conversation, run)

    def correct_view(self, request: HttpRequest, conversation_id: int) -> HttpResponse:
        self._may_compact(request)
        conversation = get_object_or_404(Conversation, pk=conversation_id)
        if request.method == "POST":

            def run() -> str:
                made = services.correct_summary(
                    conversation, request.POST.get("text", ""), acting_user=request.user
                )
                return (
                    f"The corrected summary is version {made.pk}: the next request carries it. "
                    "The earlier version is below, one click from coming back."
                )

            return self._done(request, conversation, run)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Correct the window summary of “{conversation}”",
            "conversation": conversation,
            "summary": load_window(conversation.pk).summary,
            "current": current_version(conversation.pk),
            "history_url": history_url(conversation.pk),
        }
        return TemplateResponse(request, "admin/assistant/summaryversion/correct.html", context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra_context = dict(extra_context or {})
        version = self.get_object(request, object_id)
        if version is not None:
            diff = compaction_diff(version)
            extra_context.update(
                diff_lines=format_html_join("\n", '<span class="{}">{}</span>', _classed(diff)),
                history_url=history_url(version.conversation_id),
            )
        return super().change_view(request, object_id, form_url, extra_context)


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isascii() and value.isdigit() else None


def _classed(diff: list[str]) -> Iterator[tuple[str, str]]:
    for line in diff:
        kind = "diff-add" if line.startswith("+") else "diff-del" if line.startswith("-") else ""
        yield kind, line
