"""The conversation list's and the compaction event list's filters."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q

from assistant.models import OfflineFallback
from assistant.window.limits import current_limits


class DeletedFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("live", "Live"), ("deleted", "Deleted (kept until the purge)")]

    def queryset(self, request, queryset):
        if self.value() == "live":
            return queryset.filter(deleted_at__isnull=True)
        if self.value() == "deleted":
            return queryset.filter(deleted_at__isnull=False)
        return queryset


class ContextFilter(admin.SimpleListFilter):
    """From the same figure as the "context" column (Conversation.context_tokens)."""

    title = "context size"
    parameter_name = "context"

    def lookups(self, request, model_admin):
        limits = current_limits()
        return [
            ("near", f"Near the limit (≥ {limits.soft:,} tokens, the soft watermark)"),
            ("past", f"Past the trigger (≥ {limits.trigger:,} tokens)"),
            ("over", f"Over the model's window (≥ {limits.window:,} tokens)"),
        ]

    def queryset(self, request, queryset):
        limits = current_limits()
        floor = {"near": limits.soft, "past": limits.trigger, "over": limits.window}.get(
            self.value()
        )
        if floor is None:
            return queryset
        return queryset.filter(context_tokens__gte=floor)


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
        has_summary = Q(compaction_summary__isnull=False)
        if self.value() == "yes":
            return queryset.filter(has_summary)
        if self.value() == "no":
            return queryset.exclude(has_summary)
        return queryset


class OfflineFallbackFilter(admin.SimpleListFilter):
    """Window shifts the offline summarizer wrote, by why (`OfflineFallback`)."""

    title = "offline fallback"
    parameter_name = "offline_fallback"

    def lookups(self, request, model_admin):
        return [("any", "Any"), *OfflineFallback.choices]

    def queryset(self, request, queryset):
        if self.value() == "any":
            return queryset.filter(details__has_key="offline_fallback")
        if self.value() in OfflineFallback.values:
            return queryset.filter(details__offline_fallback=self.value())
        return queryset
