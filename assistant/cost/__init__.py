"""TODO docstring."""

from assistant.cost.pricing import (
    Call,
    Cost,
    SummarizerCall,
    conversation_cost,
    costs_since,
    price_of,
    summarizer_cost,
)
from assistant.cost.stored_figures import conversation_costs, store_costs

__all__ = [
    "Call",
    "Cost",
    "SummarizerCall",
    "conversation_cost",
    "conversation_costs",
    "costs_since",
    "price_of",
    "store_costs",
    "summarizer_cost",
]
