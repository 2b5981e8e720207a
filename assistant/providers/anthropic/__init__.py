"""Anthropic's Messages API, direct or on Amazon Bedrock and Google Vertex AI:
its wire (request shape, answer and stream reading, usage, overflow words, its
compaction blocks) and its summarizer client (provider).

A folder of assistant.providers, under its contract.
"""
