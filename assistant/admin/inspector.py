"""The context inspector on a conversation's page: what the model receives
next (summaries, the newest messages sent verbatim, tool calls still waiting
for results), a token breakdown, and the latest compaction events. The page
stays light however long the conversation: long texts are cut with a link
to the whole message, and the full request body is a separate download."""

from __future__ import annotations

import base64
import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from assistant.history import measures, share, token_change
from assistant.models import Conversation
from assistant.providers import wire_of
from assistant.services import next_request
from assistant.window import current_limits, request_shape

MESSAGES_SHOWN = 30
CHARS_SHOWN = 2000
EVENTS_SHOWN = 20


def _cut(text: str) -> tuple[str, int]:
    """The text shown, and how many characters were left out."""
    if len(text) <= CHARS_SHOWN:
        return text, 0
    return text[:CHARS_SHOWN], len(text) - CHARS_SHOWN


def context_inspector(conversation: Conversation) -> dict[str, Any]:
    # The next request by the pre-call hook's own plan: a pending summary it adopts
    # first is the one shown (docs/admin.rst, "The conversation page").
    upcoming = next_request(conversation)
    context, total = upcoming.context, upcoming.tokens
    # The bar draws the header's figure: the estimated parts scaled to it.
    tokens = context.tokens.scaled_to(total)
    limits = current_limits(conversation.pk)
    parts = [
        ("system", "System prompt", tokens.system),
        ("summaries", "Summaries", tokens.summaries),
        ("messages", "Kept messages", tokens.messages),
        ("tools", "Tool results", tokens.tool_results),
    ]
    drawn = total or 1
    pending = {call["id"] for call in context.pending_calls}
    ids = list(context.message_ids)
    first_shown = max(len(context.messages) - MESSAGES_SHOWN, 0)
    rows = []
    for index in range(first_shown, len(context.messages)):
        message = context.messages[index]
        content, cut = _cut(str(message.get("content") or ""))
        extra = {k: v for k, v in message.items() if k not in ("role", "content")}
        extra_text, extra_cut = _cut(
            json.dumps(extra, indent=2, ensure_ascii=False) if extra else ""
        )
        calls = message.get("tool_calls") or ()
        rows.append(
            {
                "id": ids[index] if index < len(ids) else None,
                "role": message.get("role", ""),
                "content": content,
                "cut": cut + extra_cut,
                "extra": extra_text,
                "pending": [call for call in calls if call["id"] in pending],
            }
        )
    events = conversation.compaction_events.select_related("acting_user").order_by(
        "-created_at", "-id"
    )
    return {
        **_header(total, limits),
        **_listed(conversation.context_tokens, limits),
        "system": _cut(context.system)[0],
        "parent_summary": context.parent_summary,
        "window_summary": context.window_summary,
        "pinned": context.pinned,
        "cutoff_id": context.cutoff_id,
        "messages": rows,
        "messages_in_context": len(context.messages),
        "messages_hidden": first_shown,
        "pending_calls": context.pending_calls,
        "first": upcoming.first,
        "segments": [
            {"key": key, "label": label, "tokens": value, "percent": round(100 * value / drawn, 2)}
            for key, label, value in parts
        ],
        "events": _with_figures(events[:EVENTS_SHOWN]),
        "events_total": events.count(),
    }


def _with_figures(events: Any) -> list[tuple[Any, str]]:
    """Each event with its figures, named for what they measure (docs/admin.rst)."""
    return [
        (event, token_change(event.tokens_before, event.tokens_after, measures(event)))
        for event in events
    ]


def _header(total: int, limits: Any) -> dict[str, Any]:
    """The header's figures: the size, its level and its shares of the limits."""
    return {
        "total": total,
        "level": limits.level(total),
        "limits": limits,
        "share_of_trigger": share(total, limits.trigger),
        "share_of_window": share(total, limits.window),
    }


def _listed(listed: int | None, limits: Any) -> dict[str, Any]:
    """The list's figure (`store_size`: the size the previous call left) and its shares,
    which the page names when the next request differs."""
    if listed is None:  # not measured yet
        return {"listed": None, "listed_shares": ""}
    shares = f"{share(listed, limits.trigger)} · {share(listed, limits.window)}"
    return {"listed": listed, "listed_shares": shares}


def request_body(conversation: Conversation, shape: str = "") -> dict[str, Any]:
    """The next request's body in a provider's shape (the inspector's download): the
    named one, else that of the provider of the conversation's newest answer, else the
    configured summarizer's (Anthropic's when offline)."""
    context = next_request(conversation).context
    return context.request(wire_of(shape or request_shape(conversation.pk)))


class WireJSONEncoder(DjangoJSONEncoder):
    """JSON as the provider's wire has it: bytes (Gemini's inline_data) as base64 text."""

    def default(self, o: Any) -> Any:
        if isinstance(o, bytes):
            return base64.b64encode(o).decode("ascii")
        return super().default(o)
