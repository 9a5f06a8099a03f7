"""Sessions: session taint (W6) and "rewrite after my own forget", the one place both live.

Every surface that keeps a session -- the HTTP server's sessions, an MCP connection, the LangGraph
store, the Anthropic memory tool -- holds one of these; none keeps a read set or a list of its
own forgets of its own.

- **Taint.** Every record a session returns (read, get, list, search) joins its read set; every
  write from it records the read set as ``derived_from`` (plus explicit sources).
- **Own forgets.** A session with an ``owner`` forgets with that owner. A write it issues after
  one of its owner's forgets returned may re-create what was forgotten: the session asks the store
  for a token with ``reauthorize(..., owner=..., through=...)``, which is issued only if *every*
  forget blocking the write is that owner's and none came after the write was issued. Another
  writer's forget and a subject erasure are never reopened (ForgottenError), nor a stale write
  (StaleWriteError).
- **Replacing.** A write that reopens a slot the session itself forgot replaces what the session
  had read there; it does not derive from it (so it is not refused as derived from the forgotten
  copy). An *operational* forget of the session's own drops what it covers from the read set: it
  is housekeeping (stop recalling), and blocks no later write.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import DerivedFromForgottenError, ForgottenError, InvalidValueError
from .model import ErasureRequest, JSONValue, Mode, Record, SearchHit
from .scope import Scope
from .validation import check_owner, check_record_ids

if TYPE_CHECKING:
    from .store import Store

__all__ = ["StoreSession"]

Slot = tuple[str, str]  # (scope path, key)


@dataclass(frozen=True, slots=True)
class _OwnForget:
    """A forget this session made and that has returned: of ``key`` (None: the whole subtree)."""

    scope: Scope
    key: str | None
    exact: bool

    def covers(self, slot: Slot) -> bool:
        scope = Scope.parse(slot[0])
        inside = scope == self.scope if self.exact else scope.is_within(self.scope)
        return inside and (self.key is None or self.key == slot[1])


class StoreSession:
    """Session taint (W6) and rewrites after the session owner's own forgets.

    >>> import cenotaph, tempfile
    >>> with cenotaph.open(tempfile.mkdtemp()) as store:
    ...     note = store.write("tenant:acme/user:alice", "note", "cardiology Tuesday")
    ...     with store.session("tenant:acme/user:alice") as s:
    ...         _ = s.read("tenant:acme/user:alice", "note")
    ...         s.write("tenant:acme/user:alice", "summary", "a medical appointment").derived_from == (note.id,)
    True

    A session does not confine reads; the interfaces (HTTP, MCP) do that. Use it in a ``with``
    block, or call :meth:`close` when done: every call after that is refused.
    """

    def __init__(self, store: Store, scope: Scope, *, owner: str | None = None) -> None:
        self.store = store
        self.scope = scope
        self.owner = check_owner(owner)
        self._read: dict[str, Slot] = {}  # record id -> the slot it was read from, in read order
        self._own: list[_OwnForget] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """End the session: every later call is refused."""
        self._closed = True

    def __enter__(self) -> StoreSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _store(self) -> Store:
        if self._closed:
            raise InvalidValueError(
                "this session has ended (its with-block exited); start a new one with store.session(scope)"
            )
        return self.store

    # -- taint -------------------------------------------------------------------------
    @property
    def read_set(self) -> tuple[str, ...]:
        """The ids of every record this session returned, in the order it first returned them."""
        with self._lock:
            return tuple(self._read)

    def taint(self, records: Iterable[Record]) -> None:
        """Add records the caller obtained for this session some other way to its read set."""
        with self._lock:
            for record in records:
                self._read.setdefault(record.id, (record.scope, record.key))

    def read(self, scope: str, key: str, *, fallthrough: bool = True) -> Record | None:
        record = self._store().read(scope, key, fallthrough=fallthrough)
        if record is not None:
            self.taint([record])
        return record

    def get(self, record_id: str) -> Record | None:
        record = self._store().get(record_id)
        if record is not None:
            self.taint([record])
        return record

    def list(self, scope: str, *, include_descendants: bool = False) -> builtins.list[Record]:
        """A listing taints too: a name seen in it and copied into a note derives from it."""
        records = self._store().list(scope, include_descendants=include_descendants)
        self.taint(records)
        return records

    def search(self, scope: str, query: str, **options: Any) -> builtins.list[SearchHit]:
        hits = self._store().search(scope, query, **options)
        self.taint(h.record for h in hits)
        return hits

    # -- forgets -----------------------------------------------------------------------
    def forget(
        self,
        scope: str,
        key: str | None = None,
        *,
        mode: str = "compliance",
        include_ancestors: bool = False,
        exact: bool = False,
        reason: str | None = None,
    ) -> ErasureRequest:
        """:meth:`Store.forget` with this session's owner; a later write of this session may
        re-create what it forgot (see the module's docstring)."""
        request = self._store().forget(
            scope,
            key,
            mode=mode,
            include_ancestors=include_ancestors,
            exact=exact,
            reason=reason,
            owner=self.owner,
        )
        own = _OwnForget(Scope.parse(scope), key, exact)
        with self._lock:
            self._own.append(own)
            if request.mode == Mode.OPERATIONAL:  # housekeeping: it blocks no later write
                self._read = {i: slot for i, slot in self._read.items() if not own.covers(slot)}
        return request

    # -- writes ------------------------------------------------------------------------
    def write(self, scope: str, key: str, value: JSONValue, **options: Any) -> Record:
        """:meth:`Store.write`, with the read set as ``derived_from`` (W6)."""
        return self.reopening_write(scope, key, value, **options)[0]

    def reopening_write(self, scope: str, key: str, value: JSONValue, **options: Any) -> tuple[Record, bool]:
        """:meth:`write`, and whether it re-opened a forget of the session owner's own."""
        records, reopened = self._write([{"scope": scope, "key": key, "value": value, **options}])
        return records[0], reopened

    def write_many(
        self, items: Iterable[Mapping[str, Any]], *, issued: int | None = None
    ) -> builtins.list[Record]:
        """:meth:`Store.write_many` (one transaction), each item deriving from the read set; an
        item the owner's own forget blocks is reopened (once) as the module's docstring says.
        ``issued``: the store's :meth:`~Store.known_version` when the caller issued these writes,
        if earlier than this call (a forget returned after it is not reopened)."""
        return self._write(items, issued)[0]

    def _write(
        self, items: Iterable[Mapping[str, Any]], issued: int | None = None
    ) -> tuple[builtins.list[Record], bool]:
        store = self._store()
        if issued is not None and (type(issued) is not int or issued < 0):
            raise InvalidValueError(
                "issued must be a version (a non-negative int): the store's known version when the "
                "writes were issued"
            )
        through = None if self.owner is None else store.known_version() if issued is None else issued
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise InvalidValueError("write_many takes a list of dicts, each with scope, key and value")
        batch = [self._with_sources(item) for item in items]
        try:
            return store.write_many(batch), False
        except DerivedFromForgottenError:
            raise
        except ForgottenError:
            if through is None or not self._reopen(store, batch, through):
                raise
        return store.write_many(batch), True

    def _with_sources(self, given: object) -> dict[str, Any]:
        if not isinstance(given, Mapping):
            raise InvalidValueError("write_many takes a list of dicts, each with scope, key and value")
        item = dict(given)
        explicit = check_record_ids(item.pop("derived_from", ()))
        scope, key = item.get("scope"), item.get("key")
        replacing = False
        if isinstance(scope, str) and isinstance(key, str):
            slot = (scope, key)
            with self._lock:
                replacing = any(f.covers(slot) for f in self._own)
        with self._lock:
            read = [i for i, s in self._read.items() if not (replacing and s == (scope, key))]
        item["derived_from"] = tuple(dict.fromkeys([*read, *explicit]))
        return item

    def _reopen(self, store: Store, batch: builtins.list[dict[str, Any]], through: int) -> bool:
        """Give each blocked item without a token one for the owner's own forgets; raises the
        store's refusal when a forget in the way is not the owner's or came after ``through``."""
        reopened = False
        for item in batch:
            if item.get("reauthorization") is None and store.forgets_blocking(item["scope"], item["key"]):
                item["reauthorization"] = store.reauthorize(
                    item["scope"], item["key"], owner=self.owner, through=through
                )
                reopened = True
        return reopened
