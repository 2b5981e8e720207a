"""The offline summarizer: deterministic, no network; the demo's provider and the
fallback when a summarizer call fails.

A folder of assistant.providers, under its contract.
"""
