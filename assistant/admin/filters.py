"""The conversation list's and the compaction event list's filters."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from assistant.models import CompactionEvent, Conversation, OfflineFallback
from assistant.window import current_limits


class DeletedFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("live", "Live"), ("deleted", "Deleted (kept until the purge)")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[Conversation]
    ) -> QuerySet[Conversation]:
        if self.value() == "live":
            return queryset.filter(deleted_at__isnull=True)
        if self.value() == "deleted":
            return queryset.filter(deleted_at__isnull=False)
        return queryset


class ContextFilter(admin.SimpleListFilter):
    """From the same figure as the "context" column (Conversation.context_tokens)."""

    title = "context size"
    parameter_name = "context"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        limits = current_limits()
        return [
            ("near", f"Near the limit (≥ {limits.soft:,} tokens, the soft watermark)"),
            ("past", f"Past the trigger (≥ {limits.trigger:,} tokens)"),
            ("over", f"Over the model's window (≥ {limits.window:,} tokens)"),
        ]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[Conversation]
    ) -> QuerySet[Conversation]:
        limits = current_limits()
        floor = {"near": limits.soft, "past": limits.trigger, "over": limits.window}.get(
            self.value() or ""
        )
        if floor is None:
            return queryset
        return queryset.filter(context_tokens__gte=floor)


class ForkFilter(admin.SimpleListFilter):
    title = "origin"
    parameter_name = "origin"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("root", "Started fresh"), ("fork", "Fork or continuation")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[Conversation]
    ) -> QuerySet[Conversation]:
        if self.value() == "root":
            return queryset.filter(parent_conversation__isnull=True)
        if self.value() == "fork":
            return queryset.filter(parent_conversation__isnull=False)
        return queryset


class SummaryFilter(admin.SimpleListFilter):
    title = "window summary"
    parameter_name = "summarized"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("yes", "Has a window summary"), ("no", "No window summary")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[Conversation]
    ) -> QuerySet[Conversation]:
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

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("any", "Any"), *OfflineFallback.choices]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[CompactionEvent]
    ) -> QuerySet[CompactionEvent]:
        if self.value() == "any":
            return queryset.filter(details__has_key="offline_fallback")
        if self.value() in OfflineFallback.values:
            return queryset.filter(details__offline_fallback=self.value())
        return queryset
