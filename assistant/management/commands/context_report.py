from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count, Q

from assistant import services
from assistant.history import MAX_INT, measures, token_change
from assistant.management.commands._common import get_conversation
from assistant.models import CompactionEvent, Conversation, Message


class Command(BaseCommand):
    help = (
        "What the model sees next for one conversation: its size (the one the pre-call "
        "hook decides on, the admin list and the inspector show) and its breakdown "
        "(system, summaries, messages, tool results), the cached summary's split, "
        "message counts, and the compaction history (newest first)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation_id")
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")
        parser.add_argument(
            "--events", type=int, default=20, help="How many compaction events (default 20)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        conversation = get_conversation(options["conversation_id"])
        if options["events"] < 0:
            raise CommandError(f"--events must be 0 or more, got {options['events']}.")
        if options["events"] > MAX_INT:
            raise CommandError(f"--events must be at most {MAX_INT}, got {options['events']}.")
        report = context_report(conversation, events=options["events"])
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, default=str))
            return
        self.stdout.write(format_report(report))


def context_report(conversation: Conversation, *, events: int = 20) -> dict[str, Any]:
    context = services.build_context(conversation, allow_pending=True)
    total = services.context_tokens(conversation)
    # Our estimates of the parts, scaled to the one size (as the inspector's bar).
    tokens = context.tokens.scaled_to(total)
    counts = Message.objects.filter(conversation=conversation).aggregate(
        total=Count("id"),
        compacted=Count("id", filter=~Q(compaction="")),
        originals_dropped=Count("id", filter=Q(original_dropped_at__isnull=False)),
    )
    history = CompactionEvent.objects.filter(conversation=conversation).order_by(
        "-created_at", "-id"
    )[:events]
    return {
        "conversation": conversation.pk,
        "title": conversation.title,
        "deleted_at": conversation.deleted_at,
        "tokens": {
            "system": tokens.system,
            "summaries": tokens.summaries,
            "messages": tokens.messages,
            "tool_results": tokens.tool_results,
            "total": total,
        },
        "summary_through_message_id": context.cutoff_id,
        "messages_in_context": len(context.message_ids),
        # Calls of the last assistant turn still waiting for their results.
        "pending_tool_calls": [
            {"id": call["id"], "name": call["name"]} for call in context.pending_calls
        ],
        "messages": counts,
        "events": [
            {
                "at": event.created_at,
                "kind": event.kind,
                "measures": measures(event),
                "tokens_before": event.tokens_before,
                "tokens_after": event.tokens_after,
                "messages_affected": event.messages_affected,
                "summarizer_model": event.summarizer_model,
                "duration_ms": event.duration_ms,
            }
            for event in history
        ],
    }


def format_report(report: dict[str, Any]) -> str:
    tokens = report["tokens"]
    counts = report["messages"]
    lines = [
        f"Conversation {report['conversation']}: {report['title']}"
        + (" (deleted)" if report["deleted_at"] else ""),
        "Context tokens:",
        *(f"  {name:<13}{tokens[name]:>9}" for name in tokens),
        f"Summary covers messages through id: {report['summary_through_message_id'] or '-'}",
        f"Messages: {counts['total']} stored, {report['messages_in_context']} in the context, "
        f"{counts['compacted']} compacted, {counts['originals_dropped']} originals dropped",
    ]
    if report["pending_tool_calls"]:
        waiting = ", ".join(f"{c['id']} ({c['name']})" for c in report["pending_tool_calls"])
        lines.append(f"Waiting for tool results: {waiting}")
    lines.append(f"Compaction history ({len(report['events'])} shown, newest first):")
    if not report["events"]:
        lines.append("  none")
    for event in report["events"]:
        model = f" model={event['summarizer_model']}" if event["summarizer_model"] else ""
        lines.append(
            f"  {event['at']:%Y-%m-%d %H:%M:%S} {event['kind']:<15} "
            f"{token_change(event['tokens_before'], event['tokens_after'], event['measures'])}, "
            f"{event['messages_affected']} messages, {event['duration_ms']} ms{model}"
        )
    return "\n".join(lines)
