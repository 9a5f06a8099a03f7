"""The store's search index: an embedder, an in-memory exact vector index, and its upkeep.

Vectors live on disk only sealed under each record's content key (S1). In memory, the index is
built lazily on the first search from the decrypted vectors, caught up with other processes'
writes by version, and a forget removes its records' vectors at once (in this process) or drops
the whole index (when another process forgot), before anything else is served.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import InvalidValueError
from ..validation import echo
from .embedder import Embedder, value_text
from .vectors import VectorIndex

__all__ = ["SearchIndex", "check_filter", "check_query", "matches_filter", "MAX_K", "MAX_QUERY_CHARS"]

MAX_K = 1000
_EMBED_BATCH = 4096
MAX_QUERY_CHARS = 10_000
_OPERATORS = ("$eq", "$ne", "$in", "$nin", "$exists")


def check_query(query: object, k: object) -> tuple[str, int]:
    if not isinstance(query, str) or not query.strip():
        raise InvalidValueError("query must be a non-empty string of text to search for")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidValueError(f"query is longer than {MAX_QUERY_CHARS} characters; shorten it")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidValueError(f"k must be an integer from 1 to {MAX_K}")
    return query, k


def check_filter(filter: object) -> dict[str, Any]:
    """A metadata filter: ``{"field": value}`` (equality) or ``{"field": {"$op": operand}}``."""
    if filter is None:
        return {}
    if not isinstance(filter, Mapping) or not all(isinstance(k, str) for k in filter):
        raise InvalidValueError('filter must be a dict of metadata field -> value, e.g. {"topic": "health"}')
    for condition in filter.values():
        if isinstance(condition, Mapping):
            unknown = [op for op in condition if op not in _OPERATORS]
            if unknown or not condition:
                raise InvalidValueError(
                    f"unknown filter operator(s) {', '.join(echo(op) for op in unknown[:5])}; "
                    f"use one of {', '.join(_OPERATORS)}"
                )
            for op in ("$in", "$nin"):
                if op in condition and not isinstance(condition[op], list):
                    raise InvalidValueError(f"filter operator {op} takes a list")
    return dict(filter)


def matches_filter(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    for name, condition in filter.items():
        present = name in metadata
        value = metadata.get(name)
        if not isinstance(condition, Mapping):
            if not present or value != condition:
                return False
            continue
        for op, operand in condition.items():
            if not _holds(op, operand, present, value):
                return False
    return True


def _holds(op: str, operand: Any, present: bool, value: Any) -> bool:
    if op == "$exists":
        return present == bool(operand)
    if op == "$eq":
        return present and value == operand
    if op == "$ne":
        return not present or value != operand
    if op == "$in":
        return present and value in operand
    return not present or value not in operand  # $nin


class SearchIndex:
    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._vectors = VectorIndex(embedder.dim)
        self._lock = threading.RLock()
        self.ready = False
        self.indexed_version = 0
        self._codes: dict[bytes, int] = {}  # scope token -> group code in the vector index

    def _code(self, scope_token: bytes) -> int:
        code = self._codes.get(scope_token)
        if code is None:
            code = self._codes[scope_token] = len(self._codes)
        return code

    @property
    def dim(self) -> int:
        return self.embedder.dim

    def embed_values(self, values: Sequence[object]) -> NDArray[np.float32]:
        return self.embedder.embed([value_text(v) for v in values])

    def embed_query(self, query: str) -> NDArray[np.float32]:
        vector: NDArray[np.float32] = self.embedder.embed([query])[0]
        return vector

    def add(self, ids: Sequence[str], vectors: NDArray[np.float32], scope_tokens: Sequence[bytes]) -> None:
        with self._lock:
            if self.ready and ids:
                self._vectors.add(ids, vectors, [self._code(t) for t in scope_tokens])

    def remove(self, ids: Iterable[str]) -> int:
        with self._lock:
            return self._vectors.remove(ids)

    def count_of(self, ids: Collection[str]) -> int:
        with self._lock:
            return sum(1 for i in ids if i in self._vectors)

    def reset(self) -> int:
        """Forget every vector in memory (zeroed); the next search rebuilds from the database."""
        with self._lock:
            count = len(self._vectors)
            self._vectors.clear()
            self.ready = False
            self.indexed_version = 0
            clear = getattr(self.embedder, "clear_cache", None)
            if callable(clear):
                clear()
            return count

    def ensure(self, clock: int, load: Callable[[int], tuple[list[str], list[Any], list[bytes]]]) -> None:
        """Build or catch up: ``load(after_version)`` returns ids, decrypted values and scope
        tokens of the live records written after that version; they are embedded here, in memory
        (embeddings never reach disk)."""
        with self._lock:
            if self.ready and clock <= self.indexed_version:
                return
            ids, values, scopes = load(self.indexed_version if self.ready else 0)
            for start in range(0, len(ids), _EMBED_BATCH):
                part = slice(start, start + _EMBED_BATCH)
                matrix = self.embed_values(values[part])
                self._vectors.add(ids[part], matrix, [self._code(t) for t in scopes[part]])
                matrix.fill(0)
            self.ready = True
            self.indexed_version = max(self.indexed_version, clock)

    def search(
        self,
        query: NDArray[np.float32],
        k: int,
        scope_tokens: Collection[bytes],
        allow: Callable[[str], bool],
    ) -> list[tuple[str, float]]:
        """Top ``k`` among vectors of these scopes that pass ``allow`` (the final-step check)."""
        with self._lock:
            groups = [self._codes[t] for t in scope_tokens if t in self._codes]
        if not groups:
            return []
        return self._vectors.search(query, k, groups=groups, allow=allow)
