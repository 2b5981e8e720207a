"""Voyage AI (Anthropic's recommendation for embeddings, for hosts that have only Claude):
its embedding models (models) and the embedder over the official `voyageai` SDK
(embeddings), an optional extra: `pip install django-assistant-compaction[voyage]`.

A folder of assistant.providers, under its contract.
"""
