"""TODO docstring."""

from assistant.precall.hook import (
    NextRequest,
    ensure_context_summary,
    next_request,
    prepare_context,
)

__all__ = ["NextRequest", "ensure_context_summary", "next_request", "prepare_context"]
