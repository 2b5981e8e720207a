"""A tool result cut to what a model needs once it has read it: the head, a
marker giving the original size, and the key statements of the rest. Pure
text; compaction stores it, the summarizer reads it."""

from __future__ import annotations

from assistant.settings.conf import CompactionConfig, compaction_config
from assistant.text.fact_statements import key_statements
from assistant.text.names import names_within

# Message metadata key: staff restored this result's original, so it is never
# compacted or cut again, for the model or for the summarizer.
KEEP_VERBATIM = "keep_verbatim"


def truncate_tool_result(
    content: str,
    config: CompactionConfig | None = None,
    *,
    handle_ref: str = "",
    scan_chars: int | None = None,
) -> str:
    """The head of the result, a marker giving the original size, and the key
    statements of the rest: the sentences, rows or lines holding its most specific
    identifiers (ids, paths, URLs, emails, amounts, errors, names, secrets) with
    markup stripped, so a fact deep in a page is not cut off. `handle_ref` ("ref m4182")
    names the stored original in the marker. `scan_chars`: the key statements and names
    are looked for in that many first characters only (the scan takes about a second
    per 100,000 characters), and the text says so."""
    config = config or compaction_config()
    head = content[: config.TRUNCATION_KEEP_CHARS]
    if len(content) > len(head):
        # End the head at a word boundary: a cut identifier misleads the model.
        boundary = max(head.rfind(" "), head.rfind("\n"), head.rfind(">") + 1)
        if boundary > len(head) * 3 // 4:
            head = head[:boundary]
    marker = (
        f"[Tool result compacted: showing the first {len(head):,} of {len(content):,} "
        f"characters. The full original is stored and can be restored{_named(handle_ref)}.]"
    )
    scanned = content if scan_chars is None else content[:scan_chars]
    where = (
        "the original" if len(scanned) == len(content) else f"its first {len(scanned):,} characters"
    )
    # From the whole result, so a sentence cut by the head is kept whole.
    details = key_statements(scanned, config.TRUNCATION_DETAILS_MAX_CHARS, exclude=head)
    text = f"{marker}\n{head}"
    if details:
        text += f"\n[Key details further in {where}:\n" + "\n".join(details) + "\n]"
    names = names_within(scanned, config.TRUNCATION_NAMES_MAX_CHARS, shown=text)
    if names:
        text += f"\n[Names further in {where}: " + ", ".join(names) + "]"
    return text


def _named(handle_ref: str) -> str:
    return f" ({handle_ref})" if handle_ref else ""
