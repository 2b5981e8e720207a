"""The public service API (DESIGN section 5). Other code, the admin, tasks
and tests call these names; the work is done in the modules behind them."""

from assistant.exchanges import process_exchange
from assistant.history import add_message, finish_exchange

__all__ = [
    "add_message",
    "finish_exchange",
    "process_exchange",
]
