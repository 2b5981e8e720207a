"""Pinned messages: a pinned message stays verbatim in every request, whatever
the window shifts or compacts (`pin_message`).

May import: models, settings, tool_results, window.
See docs/architecture.rst.
"""

from assistant.pins.pinning import pin_message

__all__ = ["pin_message"]
