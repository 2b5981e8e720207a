"""The rows: history, metadata, leases, deletion, events, queues, deliveries.

What is written, read and locked; no decision about the window. May import
text/, settings/, ops/ and models. See docs/architecture.rst.
"""
