"""The search layer's building blocks.

- :mod:`cenotaph.index.embedder`: the :class:`~cenotaph.index.embedder.Embedder` protocol, the default
  offline :class:`~cenotaph.index.embedder.HashingEmbedder`, adapters for any callable or a local
  sentence-transformers model, and :func:`~cenotaph.index.embedder.value_text` (the text embedded for a JSON
  value).
- :mod:`cenotaph.index.vectors`: :class:`~cenotaph.index.vectors.VectorIndex`, an exact in-memory index whose
  ``remove`` overwrites the vector's bytes at once and whose ``search`` applies a lazy final-step filter.

Embeddings are personal data: nothing here writes them to disk.
"""
