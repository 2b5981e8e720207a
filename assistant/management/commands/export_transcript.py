from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Protocol

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from assistant.management.commands._common import get_conversation
from assistant.metadata_keys import held_state
from assistant.models import Conversation, Message

_FIELDS = (
    "id",
    "role",
    "content",
    "compacted_content",
    "compaction",
    "compacted_at",
    "original_dropped_at",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "tool_arguments",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "metadata",
    "created_at",
)


class Writable(Protocol):
    """Where a transcript goes: a file, or the command's stdout (an OutputWrapper)."""

    def write(self, text: str, /) -> object: ...


class Command(BaseCommand):
    help = (
        "Export one conversation's full, uncompacted history as JSON Lines: a first "
        "line describing the conversation, then one line per message in order, "
        "with the verbatim original in `content` and the model-facing text in "
        "`compacted_content` (null when verbatim)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation_id")
        parser.add_argument("--output", "-o", help="Write to this file instead of stdout.")
        parser.add_argument("--force", action="store_true", help="Overwrite --output if it exists.")

    def handle(self, *args: Any, **options: Any) -> None:
        conversation = get_conversation(options["conversation_id"])
        output = options["output"]
        if not output:
            export_transcript(conversation, self.stdout, progress=False)
            return
        path = Path(output)
        if path.is_dir():
            raise CommandError(
                f"{path} is a directory; give a file name, for example {path}/c.jsonl."
            )
        if path.exists() and not options["force"]:
            raise CommandError(f"{path} exists; pass --force to overwrite it.")
        if not path.parent.is_dir():
            raise CommandError(f"Directory {path.parent} does not exist.")
        with path.open("w", encoding="utf-8") as stream:
            count = export_transcript(conversation, stream, progress=True)
        self.stderr.write(f"Wrote {count} messages of conversation {conversation.pk} to {path}.")


def _line(record: dict[str, Any]) -> str:
    # ASCII-only: U+2028 and friends would split a line for splitlines() readers.
    return json.dumps(record, default=str) + "\n"


def export_transcript(conversation: Conversation, stream: Writable, *, progress: bool) -> int:
    messages = Message.objects.filter(conversation=conversation).order_by("id")
    total = messages.count()
    stream.write(
        _line(
            {
                "type": "conversation",
                "id": conversation.pk,
                "title": conversation.title,
                "system_prompt": conversation.system_prompt,
                "parent_conversation": conversation.parent_conversation_id,
                "metadata": conversation.metadata,
                "state": held_state(conversation),
                "created_at": conversation.created_at,
                "messages": total,
            }
        )
    )
    written = 0
    rows = messages.values(*_FIELDS).iterator(chunk_size=500)
    bar = tqdm(rows, total=total, unit="msg", disable=not progress or None, file=sys.stderr)
    for row in bar:
        stream.write(_line({"type": "message", **row}))
        written += 1
    return written
