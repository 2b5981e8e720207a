"""What conversations cost at the providers' cache prices, against sending
everything, and the admin's stored figures (`Conversation.cost_figures`), kept
current as messages and events are written. Prices are each provider's
(assistant.providers.catalog).

- pricing: the cost of a conversation's calls and summaries;
- stored_figures: the figures the admin list shows, stored per conversation.

May import: models, providers, settings, text, window.
See docs/architecture.rst.
"""

from assistant.cost.pricing import (
    Call,
    Cost,
    SummarizerCall,
    conversation_cost,
    costs_since,
    summarizer_cost,
)
from assistant.cost.stored_figures import (
    MESSAGES_KEY,
    conversation_costs,
    list_figures,
    store_costs,
)

__all__ = [
    "MESSAGES_KEY",
    "Call",
    "Cost",
    "SummarizerCall",
    "conversation_cost",
    "conversation_costs",
    "costs_since",
    "list_figures",
    "store_costs",
    "summarizer_cost",
]
