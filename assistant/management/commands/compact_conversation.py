from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db.models.functions import Length

from assistant.conf import compaction_config
from assistant.management.commands._common import get_conversation
from assistant.models import Message

LEVELS = (0, 1, 2)


class Command(BaseCommand):
    help = (
        "Compact one conversation now. Level 0 (default): compact tool results of "
        "completed exchanges and bring the window summary up to date, as the "
        "post-exchange task would. Levels 1 and 2: emergency compaction (1 compacts "
        "every tool result and tightens the window; 2 summarizes all but the last "
        "2 messages). Originals are kept and restorable."
    )

    def add_arguments(self, parser):
        parser.add_argument("conversation_id")
        parser.add_argument("--level", type=int, default=0, help="0 (default), 1 or 2")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Report what would be compacted, change nothing, call no model.",
        )

    def handle(self, *args, **options):
        level = options["level"]
        if level not in LEVELS:
            raise CommandError(f"--level must be 0, 1 or 2, got {level}.")
        conversation = get_conversation(options["conversation_id"])
        if conversation.deleted_at is not None:
            raise CommandError(f"Conversation {conversation.pk} is deleted.")
        from assistant.context import context_tokens

        before = context_tokens(conversation)
        if options["dry_run"]:
            self._report_plan(conversation, level, before)
            return
        if level == 0:
            from assistant.compaction import compact_tool_results
            from assistant.summaries import ensure_context_summary

            changed = compact_tool_results(conversation)
            ensure_context_summary(conversation)
            what = f"{changed} tool result(s) compacted or stubbed"
        else:
            from assistant.emergency import emergency_compact

            shrank = emergency_compact(conversation, level=level)
            what = f"emergency level {level} {'shrank' if shrank else 'did not shrink'} the context"
        after = context_tokens(conversation)
        self.stdout.write(
            f"Conversation {conversation.pk}: {what}; context {before} -> {after} tokens."
        )

    def _report_plan(self, conversation, level: int, tokens: int) -> None:
        config = compaction_config()
        tool_results = Message.objects.filter(
            conversation=conversation, role=Message.Role.TOOL, compaction=""
        )
        threshold = 1 if level else config.TOOL_RESULT_CHAR_THRESHOLD
        large = tool_results.annotate(length=Length("content")).filter(length__gte=threshold)
        messages = Message.objects.filter(conversation=conversation).count()
        summary_due = level > 0 or (
            tokens >= config.CONTEXT_TOKEN_THRESHOLD
            or messages >= config.MAX_MESSAGES_BEFORE_SUMMARY
        )
        self.stdout.write(
            f"Dry run, conversation {conversation.pk} (level {level}): context {tokens} tokens, "
            f"{messages} messages; {large.count()} uncompacted tool result(s) of at least "
            f"{threshold} chars; window summary {'due' if summary_due else 'not due'}. "
            "Nothing was changed."
        )
