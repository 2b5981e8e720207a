"""Token estimates, for messages the provider has not counted yet."""

import json
import math
from typing import Any

from assistant.settings.conf import compaction_config

# Bounds of the provider's count over our estimate: tokenizers differ by less;
# a ratio beyond them comes from a bad report, not from the text.
MIN_TOKEN_RATIO, MAX_TOKEN_RATIO = 0.5, 3.0
# Below this estimate a low count is not set aside when sizing the context
# (fixed per-request overhead dominates it, and an error there is too small
# to matter); it is still never learnt from as a token ratio.
MIN_JUDGED_ESTIMATE = 1_000


def estimate_tokens(text: str | None, chars_per_token: int | None = None) -> int:
    if not text:
        return 0
    per_token = chars_per_token or compaction_config().CHARS_PER_TOKEN
    return math.ceil(len(text) / per_token)


def estimate_message_tokens(content: str, tool_calls: list[dict[str, Any]] | None = None) -> int:
    """Content plus the serialized tool calls, which the model also reads."""
    extra = json.dumps(tool_calls, ensure_ascii=False) if tool_calls else ""
    return estimate_tokens(content + extra)
