"""The store's search index: an embedder, an in-memory exact vector index, and its upkeep.

Vectors live on disk only sealed, one cell per record under a key derived from that record's keys
(:mod:`cenotaph.index.atrest`; S1). In memory, the index is built lazily on the first search, from those
cells where they exist and by decrypting and embedding the other records, caught up with other
processes' writes by version; a forget removes its records' vectors at once (in this process) or drops
the whole index (when another process forgot), before anything else is served. Vectors this process
embedded are sealed at once and written later, in batches (:meth:`SearchIndex.flush`), outside any
write a caller waits for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..backends import ops
from ..backends.base import RecordRow, Txn
from ..errors import InvalidValueError
from ..limits import MAX_K, MAX_QUERY_CHARS
from ..model import Record
from ..records import RecordCrypto
from ..validation import echo
from .atrest import VectorCells
from .embedder import Embedder, embedder_id, l2_normalise, memory_text, min_score
from .vectors import VectorIndex

__all__ = [
    "FLUSH_MIN",
    "SearchIndex",
    "check_filter",
    "check_query",
    "matches_filter",
    "MAX_K",
    "MAX_QUERY_CHARS",
]

_EMBED_BATCH = 4096
FLUSH_MIN = 256  # sealed cells queued before a search writes them (a close writes any)
_FLUSH_BATCH = 2048  # cells per write transaction: a writer waits for at most one batch
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
    """The store's in-memory index and the vectors it keeps at rest (see :mod:`cenotaph.index.atrest`)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.min_score = min_score(embedder)
        self._ident = embedder_id(embedder)
        self._vectors = VectorIndex(embedder.dim)
        self._lock = threading.RLock()
        self.ready = False
        self.indexed_version = 0
        self._codes: dict[bytes, int] = {}  # scope token -> group code in the vector index
        # sealed cells of vectors this process embedded, not yet written: record id -> (version, cell)
        self._pending: dict[str, tuple[int, bytes]] = {}
        self.embedded = 0  # records embedded (not read back from a cell) since this index was made

    def _code(self, scope_token: bytes) -> int:
        code = self._codes.get(scope_token)
        if code is None:
            code = self._codes[scope_token] = len(self._codes)
        return code

    @property
    def dim(self) -> int:
        return self.embedder.dim

    def embed_records(self, records: Sequence[Record]) -> NDArray[np.float32]:
        """The vectors of these records: their key, metadata and value (:func:`memory_text`)."""
        return self.embedder.embed([memory_text(r.key, r.value, r.metadata) for r in records])

    def embed_query(self, query: str) -> NDArray[np.float32]:
        vector: NDArray[np.float32] = self.embedder.embed([query])[0]
        return vector

    def add(self, ids: Sequence[str], vectors: NDArray[np.float32], scope_tokens: Sequence[bytes]) -> None:
        with self._lock:
            if self.ready and ids:
                self._vectors.add(ids, vectors, [self._code(t) for t in scope_tokens])

    def remove(self, ids: Iterable[str]) -> int:
        with self._lock:
            ids = list(ids)
            for id_ in ids:
                self._pending.pop(id_, None)
            return self._vectors.remove(ids)

    def count_of(self, ids: Collection[str]) -> int:
        with self._lock:
            return sum(1 for i in ids if i in self._vectors)

    def reset(self) -> int:
        """Forget every vector in memory (zeroed); the next search rebuilds from the database."""
        with self._lock:
            count = len(self._vectors)
            self._vectors.clear()
            self._pending.clear()
            self.ready = False
            self.indexed_version = 0
            clear = getattr(self.embedder, "clear_cache", None)
            if callable(clear):
                clear()
            return count

    def ensure(self, txn: Txn, crypto: RecordCrypto, clock: int | None = None) -> None:
        """Build or catch up with the live records written after what is indexed, inside ``txn``'s snapshot.

        A record's vector is read back from its sealed cell when it has one from this embedder; the others
        are decrypted and embedded here, in memory, and their sealed cells queued for :meth:`flush`.
        ``clock``: the write clock as ``txn`` reads it, if the caller read it already."""
        with self._lock:
            if clock is None:  # else the caller read it in this snapshot
                clock = txn.run(ops.Count("clock"))
            if self.ready and clock <= self.indexed_version:
                return
            after = self.indexed_version if self.ready else 0
            entries = txn.run(ops.LiveVectors(after))
            cells = None if self._ident is None else VectorCells(crypto, self._ident, self.dim)
            opened: list[int] = []
            if cells is not None and entries:

                def fill(rows: NDArray[np.float32]) -> tuple[list[str], list[int]]:
                    opened.extend(cells.open(txn, entries, rows))
                    code = self._code
                    return [entries[i][0] for i in opened], [code(entries[i][2]) for i in opened]

                self._vectors.load(len(entries), fill)
            if len(opened) == len(entries):
                missing: list[str] = []
            else:
                taken = set(opened)
                missing = [e[0] for i, e in enumerate(entries) if i not in taken]
            rows = self._rows_of(txn, missing, after, len(entries))
            for start in range(0, len(rows), _EMBED_BATCH):
                self._embed_missing(txn, crypto, cells, rows[start : start + _EMBED_BATCH])
            self.ready = True
            self.indexed_version = max(self.indexed_version, clock)

    @staticmethod
    def _rows_of(txn: Txn, ids: list[str], after: int, live: int) -> list[RecordRow]:
        """The full rows of these live records: one scan when they are most of them, else one lookup each."""
        if 2 * len(ids) > live:
            wanted = set(ids)
            return [row for row in txn.run(ops.LiveRecords(after)) if row.id in wanted]
        found = (txn.run(ops.Record(i)) for i in ids)
        return [row for row in found if row is not None]

    def _embed_missing(
        self, txn: Txn, crypto: RecordCrypto, cells: VectorCells | None, rows: Sequence[RecordRow]
    ) -> None:
        lineage = txn.run(ops.Lineage([r.id for r in rows]))
        opened: list[RecordRow] = []
        records: list[Record] = []
        for row in rows:
            record = crypto.open(txn, row, lineage.get(row.id))
            if record is not None:
                opened.append(row)
                records.append(record.record())
        if not opened:
            return
        matrix = l2_normalise(self.embed_records(records))  # sealed as the index keeps it: unit-norm
        try:
            self._vectors.add([r.id for r in opened], matrix, [self._code(r.scope_token) for r in opened])
            self.embedded += len(opened)
            if cells is not None:  # checked by add(): shaped and finite
                for row, cell in zip(opened, cells.seal_many(txn, opened, lineage, matrix), strict=True):
                    if cell is not None:
                        self._pending[row.id] = (row.version, cell)
        finally:
            matrix.fill(0)

    def flush(self, write: Callable[[list[tuple[bytes, str, int]]], None], *, force: bool = False) -> int:
        """Hand the queued cells to ``write`` (``(cell, record id, version)`` triples, in batches): when at
        least :data:`FLUSH_MIN` are queued, or any with ``force``. Returns how many were handed over."""
        with self._lock:
            if not self._pending or (len(self._pending) < FLUSH_MIN and not force):
                return 0
            batch = [(cell, id_, version) for id_, (version, cell) in self._pending.items()]
            self._pending.clear()
        for start in range(0, len(batch), _FLUSH_BATCH):
            write(batch[start : start + _FLUSH_BATCH])
        return len(batch)

    def search(
        self,
        query: NDArray[np.float32],
        k: int,
        scope_tokens: Collection[bytes],
        allow: Callable[[str], bool],
        ahead: Callable[[list[str]], None] | None = None,
    ) -> list[tuple[str, float]]:
        """Top ``k`` among vectors of these scopes that score above the relevance floor and pass ``allow``
        (the final-step check; ``ahead`` hears each batch of candidates first, see ``Vectors.search``)."""
        with self._lock:
            groups = [self._codes[t] for t in scope_tokens if t in self._codes]
        if not groups:
            return []
        return self._vectors.search(
            query, k, groups=groups, allow=allow, min_score=self.min_score, ahead=ahead
        )
