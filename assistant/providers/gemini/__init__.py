"""Gemini through google-genai: `generate_content`'s wire, the Interactions API's
(interactions), and the summarizer client (provider).

A folder of assistant.providers, under its contract.
"""
