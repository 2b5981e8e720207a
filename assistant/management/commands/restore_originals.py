from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from assistant.management.commands._common import get_conversation
from assistant.models import Message
from assistant.services import context_tokens, restore_originals, restore_preview
from assistant.window import current_limits


class Command(BaseCommand):
    help = (
        "Show the model the verbatim originals of a conversation's compacted messages "
        "again (all of them, or those given with --message), and keep them verbatim. "
        "Prints what the next request will then be. Originals dropped by retention "
        "stay compacted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation_id")
        parser.add_argument(
            "--message",
            type=int,
            action="append",
            dest="message_ids",
            metavar="ID",
            help="Restore only this message (repeatable).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would be restored; change nothing."
        )
        parser.add_argument(
            "--user", help="Username the compaction event is recorded for (default: nobody)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        conversation = get_conversation(options["conversation_id"])
        if conversation.deleted_at is not None:
            raise CommandError(
                f"Conversation {conversation.pk} is deleted; restore it from deleted first."
            )
        message_ids = options["message_ids"]
        if message_ids:
            found = set(
                Message.objects.filter(conversation=conversation, pk__in=message_ids).values_list(
                    "pk", flat=True
                )
            )
            missing = sorted(set(message_ids) - found)
            if missing:
                raise CommandError(
                    f"Not messages of conversation {conversation.pk}: "
                    + ", ".join(str(i) for i in missing)
                )
        user = None
        if options["user"]:
            user = get_user_model().objects.filter(username=options["user"]).first()
            if user is None:
                raise CommandError(f"No user named {options['user']!r}.")
        if options["dry_run"]:
            preview = restore_preview(conversation)
            if not preview.changes:
                self.stdout.write(f"Conversation {conversation.pk}: {preview.nothing_because}.")
                return
            self.stdout.write(
                f"Conversation {conversation.pk}: would restore {preview.messages} original(s) "
                f"({preview.tokens_now} -> {preview.tokens_restored} tokens); "
                + self._next_request(preview.next_request_tokens)
            )
            return
        before = context_tokens(conversation)
        restored = restore_originals(conversation, message_ids, acting_user=user)
        after = context_tokens(conversation)
        if not restored:
            because = restore_preview(conversation).nothing_because or (
                "the messages given are not compacted"
            )
            self.stdout.write(f"Conversation {conversation.pk}: nothing restored: {because}.")
            return
        self.stdout.write(
            f"Conversation {conversation.pk}: restored {restored} original(s); context "
            f"{before} -> {after} tokens; " + self._next_request(after)
        )

    def _next_request(self, tokens: int) -> str:
        limits = current_limits()
        return (
            f"the next request will be {tokens} tokens "
            f"({round(100 * tokens / limits.trigger)}% of the {limits.trigger}-token trigger, "
            f"{round(100 * tokens / limits.window)}% of {limits.model}'s "
            f"{limits.window}-token window)."
        )
