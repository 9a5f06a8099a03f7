"""Session taint (W6): what a session reads becomes ``derived_from`` of what it writes."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .errors import InvalidValueError
from .model import JSONValue, Record, SearchHit
from .scope import Scope
from .validation import check_record_ids

if TYPE_CHECKING:
    from .store import Store

__all__ = ["StoreSession"]


class StoreSession:
    """Session taint (W6): whatever this session reads becomes ``derived_from`` of what it writes.

    A session does not confine reads; the interfaces (HTTP, MCP) do that.
    """

    def __init__(self, store: Store, scope: Scope) -> None:
        self.store = store
        self.scope = scope
        self._read_set: dict[str, None] = {}
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """End the session (its ``with`` block does): every later call is refused."""
        self._closed = True

    def _store(self) -> Store:
        if self._closed:
            raise InvalidValueError(
                "this session has ended (its with-block exited); start a new one with store.session(scope)"
            )
        return self.store

    @property
    def read_set(self) -> tuple[str, ...]:
        return tuple(self._read_set)

    def _taint(self, records: Iterable[Record]) -> None:
        with self._lock:
            for record in records:
                self._read_set[record.id] = None

    def read(self, scope: str, key: str, *, fallthrough: bool = True) -> Record | None:
        record = self._store().read(scope, key, fallthrough=fallthrough)
        if record is not None:
            self._taint([record])
        return record

    def get(self, record_id: str) -> Record | None:
        record = self._store().get(record_id)
        if record is not None:
            self._taint([record])
        return record

    def list(self, scope: str, *, include_descendants: bool = False) -> list[Record]:
        records = self._store().list(scope, include_descendants=include_descendants)
        self._taint(records)
        return records

    def search(self, scope: str, query: str, **options: Any) -> builtins.list[SearchHit]:
        hits = self._store().search(scope, query, **options)
        self._taint(h.record for h in hits)
        return hits

    def write(self, scope: str, key: str, value: JSONValue, **options: Any) -> Record:
        explicit = check_record_ids(options.pop("derived_from", ()))
        with self._lock:
            derived = tuple(dict.fromkeys([*self._read_set, *explicit]))
        return self._store().write(scope, key, value, derived_from=derived, **options)
