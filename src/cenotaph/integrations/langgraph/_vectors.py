"""Semantic search as LangGraph's stores do it: which texts of an item are embedded, and scores.

Texts come from the index config's ``fields`` (SqliteStore's ``text_fields`` too; default
``["$"]``, the whole value) or a put's own ``index=[...]``, through LangGraph's own path helpers
(``tokenize_path`` / ``get_text_at_path``), so JSON paths such as ``"items[*].text"`` mean exactly
what they mean there; a path yielding several texts gets one vector per text (``path.0``,
``path.1``...). An item's score is the best cosine similarity of any of its vectors (max pooling).

Vectors are kept inside the item's own record, sealed with its value (float32, base64): they are
destroyed with it by a forget, and never reach a file in the clear (embeddings are personal data).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from langgraph.store.base import IndexConfig, ensure_embeddings, get_text_at_path, tokenize_path

__all__ = ["Index", "decode_vectors", "encode_vectors", "pooled_scores"]

TokenizedPath = tuple[str, Literal["$"] | list[str]]


def _tokenized(paths: Sequence[str]) -> list[TokenizedPath]:
    return [(p, "$") if p == "$" else (p, tokenize_path(p)) for p in paths]


@dataclass(frozen=True)
class Index:
    """A store's IndexConfig, ready to use."""

    config: dict[str, Any]
    embeddings: Any  # langchain_core Embeddings
    dims: int
    fields: list[TokenizedPath]

    @classmethod
    def build(cls, config: IndexConfig | Mapping[str, Any] | None) -> Index | None:
        if not config:
            return None
        settings = dict(config)
        dims = settings.get("dims")
        if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
            raise ValueError("index config needs 'dims', the embedding size (a positive integer)")
        fields = settings.get("fields") or settings.get("text_fields") or ["$"]
        if isinstance(fields, str):
            fields = [fields]
        settings["__tokenized_fields"] = _tokenized(fields)
        embeddings = ensure_embeddings(settings.get("embed"))
        return cls(settings, embeddings, dims, settings["__tokenized_fields"])

    def texts(
        self, value: Mapping[str, Any], index: Literal[False] | list[str] | None
    ) -> list[tuple[str, str]]:
        """``(vector name, text)`` pairs to embed for a put of ``value``."""
        if index is False:
            return []
        paths = self.fields if index is None else _tokenized(index)
        found: list[tuple[str, str]] = []
        for path, tokens in paths:
            texts = get_text_at_path(value, tokens)
            if len(texts) > 1:
                found.extend((f"{path}.{i}", text) for i, text in enumerate(texts))
            elif texts:
                found.append((path, texts[0]))
        return found

    def checked(self, vectors: Sequence[Sequence[float]], count: int) -> list[Sequence[float]]:
        if len(vectors) != count:
            raise ValueError(f"the embedding function returned {len(vectors)} vectors for {count} texts")
        for vector in vectors:
            if len(vector) != self.dims:
                raise ValueError(
                    f"the embedding function returned a vector of {len(vector)} numbers; the index config "
                    f"says dims={self.dims}"
                )
        return list(vectors)


def encode_vectors(names: Sequence[str], vectors: Sequence[Sequence[float]]) -> dict[str, str]:
    return {
        name: base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")
        for name, vector in zip(names, vectors, strict=True)
    }


def decode_vectors(encoded: Mapping[str, str]) -> list[bytes]:
    return [base64.b64decode(v) for v in encoded.values()]


def pooled_scores(query: Sequence[float], items: Sequence[list[bytes]]) -> list[float | None]:
    """For each item, the best cosine similarity between ``query`` and any of its vectors (None for
    an item without vectors); a zero vector scores 0, as in LangGraph's InMemoryStore."""
    owners = [i for i, vectors in enumerate(items) for _ in vectors]
    if not owners:
        return [None] * len(items)
    matrix = np.frombuffer(b"".join(v for vectors in items for v in vectors), dtype=np.float32)
    matrix = matrix.reshape(len(owners), -1).astype(np.float64)
    q = np.asarray(query, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(q)
    dots = matrix @ q
    scores = np.divide(dots, norms, out=np.zeros_like(dots), where=norms != 0)
    best = np.full(len(items), -np.inf)
    np.maximum.at(best, np.asarray(owners), scores)
    return [float(best[i]) if items[i] else None for i in range(len(items))]
