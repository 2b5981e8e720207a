"""Gemini through google-genai's `generate_content`: its wire and its summarizer
client (provider).

A folder of assistant.providers, under its contract.
"""
