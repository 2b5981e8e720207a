"""TODO docstring."""

from assistant.post_exchange.exchanges import finish_exchange
from assistant.post_exchange.pipeline import process_exchange

__all__ = ["finish_exchange", "process_exchange"]
