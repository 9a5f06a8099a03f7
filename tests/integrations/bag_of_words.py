"""A deterministic embedding for the integration tests: one dimension per hashed word."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def embed(texts: Sequence[str], dims: int = 256) -> list[list[float]]:
    """Texts sharing words are close; texts sharing none are orthogonal (barring a hash collision)."""
    vectors = []
    for text in texts:
        vector = [0.0] * dims
        for word in text.lower().split():
            vector[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % dims] += 1.0
        vectors.append(vector)
    return vectors
