from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from assistant import services
from assistant.management.commands._common import get_conversation, refused_as_command_error
from assistant.models import Conversation
from assistant.providers import MAX_INSTRUCTIONS_CHARS, check_instructions

LEVELS = (0, 1, 2)


class Command(BaseCommand):
    help = (
        "Compact one conversation now. Level 0 (default): compact tool results of "
        "completed exchanges and bring the window summary up to date, as the "
        "post-exchange task would. Levels 1 and 2: emergency compaction (1 compacts "
        "every tool result and tightens the window; 2 summarizes all but the last "
        "2 messages). Originals are kept and restorable."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation_id")
        parser.add_argument("--level", type=int, default=0, help="0 (default), 1 or 2")
        parser.add_argument(
            "--instructions",
            default="",
            help="Added to the prompt of every summary this run makes (after "
            f"SUMMARY_INSTRUCTIONS), e.g. what to keep; at most {MAX_INSTRUCTIONS_CHARS} "
            "characters.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Report what would be compacted, change nothing, call no model.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        level = options["level"]
        if level not in LEVELS:
            raise CommandError(f"--level must be 0, 1 or 2, got {level}.")
        refused_as_command_error(check_instructions, options["instructions"])
        conversation = get_conversation(options["conversation_id"])
        if conversation.deleted_at is not None:
            raise CommandError(f"Conversation {conversation.pk} is deleted.")
        before = services.context_tokens(conversation)
        if options["dry_run"]:
            self._report_plan(conversation, level)
            return
        instructions = options["instructions"]
        if level == 0:
            changed = services.compact_tool_results(conversation, instructions=instructions)
            with services.call_instructions(instructions):
                services.ensure_context_summary(conversation)
            what = f"{changed} tool result(s) compacted or stubbed"
        else:
            shrank = services.emergency_compact(
                conversation, level=level, instructions=instructions
            )
            what = f"emergency level {level} {'shrank' if shrank else 'did not shrink'} the context"
        after = services.context_tokens(conversation)
        self.stdout.write(
            f"Conversation {conversation.pk}: {what}; context {before} -> {after} tokens."
        )

    def _report_plan(self, conversation: Conversation, level: int) -> None:
        self.stdout.write(services.plan_run(conversation, level).describe(conversation.pk))
