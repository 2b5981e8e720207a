"""The pre-call hook, one of the two entry points: run before every model call,
it loads the window once, asks the window's decision what the next request
sends, and runs the plan's steps (a results batch, a window shift, an
emergency level), each through the package that owns it. Short by design: the
rules live in the packages it calls.

- hook: `prepare_context` (the hook), `next_request` (what it would send now,
  for the inspector), `ensure_context_summary`;
- steps: the plan's steps that change the window, run in order.

May import: emergency, history, models, ops, settings, summary, text, tool_results,
window.
See docs/architecture.rst.
"""

from assistant.precall.hook import (
    NextRequest,
    ensure_context_summary,
    next_request,
    prepare_context,
)

__all__ = ["NextRequest", "ensure_context_summary", "next_request", "prepare_context"]
