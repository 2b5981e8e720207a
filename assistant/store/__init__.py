"""The rows: history, state, metadata (a message's), leases, deletion, events, queues, deliveries.

What is written, read and locked; no decision about the window. May import
window/ (appending a message keeps the window's stored size), llm/, text/,
settings/, ops/ and models. See docs/architecture.rst.
"""
