"""TODO docstring."""

from assistant.pins.pinning import pin_message

__all__ = ["pin_message"]
