"""What every summary of a conversation is told beyond the rules: the language
to write in (SUMMARY_LANGUAGE, "auto": the language of the conversation's user
messages) and the instructions (SUMMARY_INSTRUCTIONS, then those of the call,
`assistant.providers.summary_prompt.call_instructions`). docs/compaction.rst, "What
summaries are told"."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db.models.functions import Substr

from assistant.models import Message
from assistant.providers import Guidance, current_call_instructions, summary_guidance
from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.text import detect_language

# The language is read from the newest user messages, the start of each: enough text
# to tell, and one small query however long the conversation.
LANGUAGE_SAMPLE_MESSAGES = 12
LANGUAGE_SAMPLE_CHARS = 600


def conversation_language(conversation_id: int, config: CompactionConfig) -> str | None:
    """The language summaries of this conversation are written in (None: unknown)."""
    if config.SUMMARY_LANGUAGE.strip().lower() != "auto":
        return config.SUMMARY_LANGUAGE.strip() or None
    heads = (
        Message.objects.filter(conversation_id=conversation_id, role=Message.Role.USER)
        .order_by("-id")
        .annotate(head=Substr("content", 1, LANGUAGE_SAMPLE_CHARS))
        .values_list("head", flat=True)[:LANGUAGE_SAMPLE_MESSAGES]
    )
    return detect_language(heads)


def guidance_for(conversation_id: int, config: CompactionConfig | None = None) -> Guidance:
    config = config or compaction_config()
    deployment = config.SUMMARY_INSTRUCTIONS.strip()
    instructions = ((deployment,) if deployment else ()) + current_call_instructions()
    return Guidance(conversation_language(conversation_id, config), instructions)


@contextmanager
def guided_by(conversation_id: int, config: CompactionConfig | None = None) -> Iterator[Guidance]:
    """Every summarizer prompt built inside follows this conversation's guidance."""
    with summary_guidance(guidance_for(conversation_id, config)) as guidance:
        yield guidance
