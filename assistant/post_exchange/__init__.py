"""The post-exchange pipeline, the other entry point: after each exchange a
worker compacts and deduplicates the consumed tool results, records the
provider's own compaction, pre-builds the next window summary, stores the
conversation's cost figures and, when something was compacted, enqueues the
embedding of the new texts, each through the package that owns it.

- exchanges: the end of an exchange, stamped and enqueued (`finish_exchange`);
- pipeline: the worker's run over one conversation (`process_exchange`).

May import: cost, history, models, ops, provider_compaction, settings, summary,
tool_results, window.
See docs/architecture.rst.
"""

from assistant.post_exchange.exchanges import finish_exchange
from assistant.post_exchange.pipeline import process_exchange

__all__ = ["finish_exchange", "process_exchange"]
