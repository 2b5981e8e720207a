"""Pure functions over text and content blocks: token estimates, content blocks,
truncation of a tool result, fact statements, the names and exact values a
text holds, and the language a user writes in. No database, no provider.

May import: settings.
See docs/architecture.rst.
"""

from assistant.text.blocks import (
    MEDIA_TYPES,
    THINKING_TYPES,
    MediaRates,
    attachments_line,
    blocks_tokens,
    compacted_blocks,
    current_turn_start,
    describe,
    has_media,
    sniff_media_type,
    validate_blocks,
)
from assistant.text.fact_statements import (
    MAX_STATEMENT_CHARS,
    OUR_MARKERS,
    Statement,
    message_facts,
    plain_text,
    statements,
)
from assistant.text.language import detect_language
from assistant.text.names import PATH, names_within
from assistant.text.tokens import (
    MAX_TOKEN_RATIO,
    MIN_JUDGED_ESTIMATE,
    MIN_TOKEN_RATIO,
    estimate_message_tokens,
    estimate_tokens,
)
from assistant.text.truncation import KEEP_VERBATIM, truncate_tool_result
from assistant.text.verbatim import extract_identifiers

__all__ = [
    "KEEP_VERBATIM",
    "MAX_STATEMENT_CHARS",
    "MAX_TOKEN_RATIO",
    "MEDIA_TYPES",
    "MIN_JUDGED_ESTIMATE",
    "MIN_TOKEN_RATIO",
    "OUR_MARKERS",
    "PATH",
    "THINKING_TYPES",
    "MediaRates",
    "Statement",
    "attachments_line",
    "blocks_tokens",
    "compacted_blocks",
    "current_turn_start",
    "describe",
    "detect_language",
    "estimate_message_tokens",
    "estimate_tokens",
    "extract_identifiers",
    "has_media",
    "measures",
    "message_facts",
    "names_within",
    "plain_text",
    "share",
    "sniff_media_type",
    "statements",
    "token_change",
    "token_count",
    "truncate_tool_result",
    "validate_blocks",
]
