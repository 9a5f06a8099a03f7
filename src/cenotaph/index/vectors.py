"""An exact in-memory vector index whose removals really remove.

    >>> index = VectorIndex(dim=2)
    >>> index.add(["a", "b"], np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    >>> index.search(np.array([1.0, 0.1], dtype=np.float32), k=1)[0][0]
    'a'
    >>> index.remove(["a"])
    1
    >>> "a" in index
    False

Vectors are personal data. They live in one float32 matrix and nowhere else: nothing is written to disk,
a removed row is overwritten with zeros at once and the hole is filled by moving the last row into it, rows
past the live ones are always zero, and a buffer outgrown or cleared is zeroed before it is let go. Search is
a brute-force matrix-vector product (exact, recall 1.0), which over 100k x 384 float32 takes milliseconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cenotaph.errors import InvalidValueError
from cenotaph.index.embedder import l2_normalise

__all__ = ["VectorIndex"]

_MIN_CAPACITY = 64


class VectorIndex:
    """Exact cosine-similarity search over unit vectors keyed by string ids; thread-safe.

    Vectors are L2-normalised on the way in (an all-zero vector stays zero and scores 0 against everything),
    so scores are cosine similarities in ``[-1, 1]``.
    """

    def __init__(self, dim: int) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidValueError(f"dim must be a positive integer, got {dim!r}")
        self._dim = dim
        self._lock = threading.Lock()
        self._matrix: NDArray[np.float32] = np.zeros((_MIN_CAPACITY, dim), dtype=np.float32)
        self._ids: list[str] = []  # row i holds the vector of _ids[i]
        self._rows: dict[str, int] = {}
        self._groups: NDArray[np.int64] = np.zeros(_MIN_CAPACITY, dtype=np.int64)  # row -> group code

    @property
    def dim(self) -> int:
        return self._dim

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, id_: object) -> bool:
        return id_ in self._rows

    def add(
        self, ids: Sequence[str], vectors: NDArray[np.floating[Any]], groups: Sequence[int] | None = None
    ) -> None:
        """Add or replace one vector per id; a replaced vector is overwritten in place.

        Row ``i`` of ``vectors`` belongs to ``ids[i]``; an id repeated in one call keeps its last row.
        ``groups`` (e.g. a scope code per id) lets :meth:`search` restrict to some groups in numpy.
        """
        if isinstance(ids, str):
            raise InvalidValueError("add() takes a sequence of ids, not one string")
        ids = list(ids)
        batch = self._check_vectors(vectors, len(ids))
        try:
            last_row_of: dict[str, int] = {}
            for i, id_ in enumerate(ids):
                if not isinstance(id_, str):
                    raise InvalidValueError(f"vector ids must be strings, got {type(id_).__name__}")
                last_row_of[id_] = i
            with self._lock:
                new = [id_ for id_ in last_row_of if id_ not in self._rows]
                self._reserve(len(self._ids) + len(new))
                for id_ in new:
                    self._rows[id_] = len(self._ids)
                    self._ids.append(id_)
                targets = np.fromiter((self._rows[id_] for id_ in last_row_of), dtype=np.intp)
                if groups is not None:
                    codes = np.asarray(groups, dtype=np.int64)
                    self._groups[targets] = codes[np.fromiter(last_row_of.values(), dtype=np.intp)]
                if len(last_row_of) == len(ids):
                    self._matrix[targets] = batch
                else:  # repeated ids: keep each one's last row
                    picked = batch[np.fromiter(last_row_of.values(), dtype=np.intp)]
                    self._matrix[targets] = picked
                    picked.fill(0)
        finally:
            batch.fill(0)  # our normalised copy is personal data too

    def load(self, count: int, fill: Callable[[NDArray[np.float32]], tuple[list[str], list[int]]]) -> int:
        """Append up to ``count`` vectors that ``fill`` writes straight into the matrix (a bulk load with no
        copy on the way); returns how many were appended.

        ``fill(rows)`` gets a writable ``(count, dim)`` view of the free rows, writes unit-norm finite vectors
        into its first rows and returns their ids and groups, in order. Ids must be new to the index and
        distinct; if not, nothing is appended (and the rows are zeroed again)."""
        with self._lock:
            start = len(self._ids)
            self._reserve(start + count)
            rows = self._matrix[start : start + count]
            ids, groups = fill(rows)
            n = len(ids)
            if n > count or len(groups) != n or len(set(ids)) != n or not self._rows.keys().isdisjoint(ids):
                rows.fill(0.0)
                raise InvalidValueError("a bulk load must bring new, distinct ids")
            self._groups[start : start + n] = groups
            self._rows.update(zip(ids, range(start, start + n), strict=True))
            self._ids.extend(ids)
            return n

    def remove(self, ids: Iterable[str]) -> int:
        """Remove these ids (unknown ones are ignored) and return how many were removed.

        Each removed row is zeroed immediately, then the last row is moved into it so the live rows stay
        dense.
        """
        if isinstance(ids, str):
            raise InvalidValueError("remove() takes an iterable of ids, not one string")
        removed = 0
        with self._lock:
            matrix = self._matrix
            for id_ in ids:
                row = self._rows.pop(id_, None)
                if row is None:
                    continue
                matrix[row] = 0.0
                last = len(self._ids) - 1
                if row != last:
                    moved = self._ids[last]
                    matrix[row] = matrix[last]
                    matrix[last] = 0.0
                    self._groups[row] = self._groups[last]
                    self._ids[row] = moved
                    self._rows[moved] = row
                self._ids.pop()
                removed += 1
            if len(self._ids) <= len(matrix) // 4 and len(matrix) > _MIN_CAPACITY:
                self._resize(max(_MIN_CAPACITY, 2 * len(self._ids)))
        return removed

    def clear(self) -> None:
        """Remove every vector; the whole buffer is zeroed before it is let go."""
        with self._lock:
            self._matrix.fill(0.0)
            self._matrix = np.zeros((_MIN_CAPACITY, self._dim), dtype=np.float32)
            self._groups = np.zeros(_MIN_CAPACITY, dtype=np.int64)
            self._ids.clear()
            self._rows.clear()

    def search(
        self,
        query: NDArray[np.floating[Any]],
        k: int,
        *,
        allow: Callable[[str], bool] | None = None,
        candidates: Collection[str] | None = None,
        groups: Collection[int] | None = None,
        min_score: float | None = None,
        ahead: Callable[[list[str]], None] | None = None,
    ) -> list[tuple[str, float]]:
        """The ``k`` ids most similar to ``query``, best first, as ``(id, cosine score)`` pairs.

        ``min_score`` is a relevance floor: only ids scoring above it are returned (or asked about).
        ``candidates`` restricts the search to those ids (unknown ones are ignored). ``allow`` is a
        final-step filter: it is called lazily, in descending score order, until ``k`` ids pass, so an
        expensive recheck runs only on the ids that may be returned. It runs without the index lock held (it
        may call back into the index); ids removed while it runs can still be returned, so a recheck belongs
        inside ``allow``. ``ahead``, if given, hears each batch of ids before ``allow`` is asked
        about any of them, in one call: a recheck that reads a database fetches the batch at once.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidValueError(f"k must be a non-negative integer, got {k!r}")
        query = np.asarray(query)
        if query.shape != (self._dim,):
            raise InvalidValueError(f"expected a query vector of shape ({self._dim},), got {query.shape}")
        q = self._check_vectors(query[np.newaxis, :], 1)[0]
        try:
            hits = self._search(q, k, allow, candidates, groups, min_score, ahead)
        finally:
            q.fill(0)  # the query embedding is personal data too
        return hits

    def _search(
        self,
        q: NDArray[np.float32],
        k: int,
        allow: Callable[[str], bool] | None,
        candidates: Collection[str] | None,
        groups: Collection[int] | None = None,
        min_score: float | None = None,
        ahead: Callable[[list[str]], None] | None = None,
    ) -> list[tuple[str, float]]:
        if k == 0:
            return []
        floor = -np.inf if min_score is None else min_score
        with self._lock:
            n = len(self._ids)
            if n == 0:
                return []
            scores = self._matrix[:n] @ q
            rows: NDArray[np.intp] | None = None
            if candidates is not None:
                rows = self._candidate_rows(candidates)
            if groups is not None:
                in_groups = np.flatnonzero(np.isin(self._groups[:n], np.fromiter(groups, dtype=np.int64)))
                rows = in_groups if rows is None else np.intersect1d(rows, in_groups)
            if rows is not None:
                scores = scores[rows]
            if allow is None:
                order = _top(scores, k)
                picked = order if rows is None else rows[order]
                return [
                    (self._ids[r], float(s))
                    for r, s in zip(picked.tolist(), scores[order].tolist(), strict=True)
                    if s > floor
                ]
            # A snapshot, so that allow() runs without the lock while rows may move.
            snapshot = self._ids.copy()
        if rows is None:
            return _filtered_top(scores, snapshot.__getitem__, k, allow, floor, ahead)
        picked_rows = rows
        return _filtered_top(scores, lambda pos: snapshot[int(picked_rows[pos])], k, allow, floor, ahead)

    def _candidate_rows(self, candidates: Collection[str]) -> NDArray[np.intp]:
        found = {self._rows[c] for c in candidates if c in self._rows}
        rows = np.fromiter(found, dtype=np.intp, count=len(found))
        rows.sort()  # ties then go by row, as in the unrestricted search
        return rows

    def _check_vectors(self, vectors: NDArray[np.floating[Any]], n: int) -> NDArray[np.float32]:
        """A normalised float32 copy of ``vectors``, which must be ``(n, dim)`` and finite."""
        shape = getattr(vectors, "shape", None)
        if shape != (n, self._dim):
            raise InvalidValueError(f"expected vectors of shape ({n}, {self._dim}), got {shape}")
        batch = l2_normalise(vectors)
        if not np.isfinite(batch).all():
            batch.fill(0)
            raise InvalidValueError("vectors contain NaN or infinite values")
        return batch

    def _reserve(self, size: int) -> None:
        """Grow the buffer geometrically so that ``size`` rows fit (amortised O(1) per added row)."""
        capacity = len(self._matrix)
        if size > capacity:
            while capacity < size:
                capacity *= 2
            self._resize(capacity)

    def _resize(self, capacity: int) -> None:
        old = self._matrix
        new = np.zeros((capacity, self._dim), dtype=np.float32)
        n = len(self._ids)
        new[:n] = old[:n]
        groups = np.zeros(capacity, dtype=np.int64)
        groups[:n] = self._groups[:n]
        self._groups = groups
        old.fill(0.0)  # the old buffer goes back to the allocator: leave no vector in it
        self._matrix = new


def _top(scores: NDArray[np.float32], k: int) -> NDArray[np.intp]:
    """Positions of the ``k`` highest scores, best first; ties by position."""
    n = len(scores)
    if k >= n:
        return np.lexsort((np.arange(n), -scores))
    part = np.argpartition(scores, n - k)[n - k :]
    return part[np.lexsort((part, -scores[part]))]


def _filtered_top(
    scores: NDArray[np.float32],
    ids: Callable[[int], str],
    k: int,
    allow: Callable[[str], bool],
    floor: float = -np.inf,
    ahead: Callable[[list[str]], None] | None = None,
) -> list[tuple[str, float]]:
    """Walk the ids in descending score order, asking ``allow`` about each, until ``k`` pass, the scores
    fall to ``floor`` or none are left.

    Candidates are fetched in geometrically growing batches, so a few rejections cost one more partition, not
    a full sort. Positions already asked about are never asked again. ``ahead`` hears each
    batch's ids (those above the floor not asked about yet) before ``allow`` hears any of them.
    """
    hits: list[tuple[str, float]] = []
    asked = np.zeros(len(scores), dtype=bool)
    fetch = k
    while True:
        fetch = min(len(scores), max(fetch, 2 * k))
        batch = _top(scores, fetch).tolist()
        if ahead is not None:
            fresh = [ids(pos) for pos in batch if not asked[pos] and scores[pos] > floor]
            if fresh:
                ahead(fresh)
        for pos in batch:
            if asked[pos]:
                continue
            if not scores[pos] > floor:
                return hits  # every position after it scores no higher
            asked[pos] = True
            id_ = ids(pos)
            if allow(id_):
                hits.append((id_, float(scores[pos])))
                if len(hits) == k:
                    return hits
        if fetch == len(scores):
            return hits
        fetch *= 2
