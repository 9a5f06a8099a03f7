"""The backend contract: rows as data, one transaction protocol, no policy.

The store (``cenotaph.store``) decides what to read, write, hide and destroy; a backend only
moves rows. ``Backend.write()`` opens a serialised write transaction (SQLite ``BEGIN
IMMEDIATE``); ``Backend.read()`` a consistent read snapshot. Both yield a :class:`Txn`.
Side effects that must follow a commit are registered with ``Txn.after_commit``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..model import LayerState

if TYPE_CHECKING:
    from .physical import Physical

__all__ = [
    "Backend",
    "ErasureRow",
    "LayerEntry",
    "LineageRow",
    "RecordRow",
    "ScopeKeyRow",
    "Txn",
    "dump_layers",
    "parse_layers",
]


class RecordRow(NamedTuple):  # a tuple: built per row on every read, so it must be cheap
    id: str
    scope_token: bytes
    key_token: bytes
    version: int
    expires_at: float | None
    hidden_version: int | None
    wrapped: bytes | None
    epoch: int | None
    ciphertext: bytes | None
    vector: bytes | None = None


class LineageRow(NamedTuple):
    record_id: str
    scope_token: bytes
    key_token: bytes
    version: int
    wrapped: bytes | None
    epoch: int | None
    subject_tokens: bytes
    subjects: bytes | None
    sources: tuple[str, ...]
    destroyed_version: int | None = None
    forgotten_version: int | None = None  # set by any forget (operational too)


@dataclass(frozen=True, slots=True)
class ScopeKeyRow:
    token: bytes
    parent: bytes | None
    wrapped: bytes | None
    epoch: int | None


@dataclass(frozen=True, slots=True)
class LayerEntry:
    """One layer of an erasure request as its row keeps it: a state and content-free evidence.
    The state is the word the row holds (a row altered to hold another is reported as it is)."""

    state: LayerState
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.state == LayerState.DONE

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "evidence": dict(self.evidence)}


def parse_layers(text: str) -> dict[str, LayerEntry]:
    """A request's ``layers`` column, by layer name."""
    return {name: LayerEntry(v["state"], v.get("evidence", {})) for name, v in json.loads(text).items()}


def dump_layers(layers: Mapping[str, LayerEntry]) -> str:
    """The ``layers`` column of ``layers`` (the text :func:`parse_layers` reads)."""
    return json.dumps({name: entry.to_json() for name, entry in layers.items()})


@dataclass(frozen=True)
class ErasureRow:
    """A request's row as the backend stores it: its JSON columns (``layers``, ``plan``, ``scan``)
    as text, each parsed once, where first used, into :attr:`layer_entries`, :attr:`plan_entry`
    and :attr:`scan_evidence` (a row read for its state alone never parses its plan, which lists
    every record id of a large forget; and a column altered into invalid JSON fails where it is
    read, as it always did)."""

    id: str
    mode: str
    target_kind: str
    target: bytes
    version: int
    requested_at: str
    state: str
    layers: str
    plan: str
    probes: bytes | None
    horizon: str | None
    horizon_reason: str | None
    verified_at: str | None
    scan: str | None
    applied: int | None = None  # plan ids hidden/destroyed so far; None once the plan is applied whole

    @cached_property
    def layer_entries(self) -> Mapping[str, LayerEntry]:
        return parse_layers(self.layers)

    @cached_property
    def plan_entry(self) -> Mapping[str, Any]:
        """The plan as the ledger entry holds it (``ForgetPlan.from_entry`` builds the plan)."""
        entry: dict[str, Any] = json.loads(self.plan)
        return entry

    @cached_property
    def scan_evidence(self) -> Mapping[str, Any]:
        """The ``scan`` column: the evidence of the request's last verifying scan, if any."""
        evidence: dict[str, Any] = json.loads(self.scan or "{}")
        return evidence

    def evidence(self, layer: str) -> Mapping[str, Any]:
        """The evidence of one layer (empty if the row has no such layer)."""
        entry = self.layer_entries.get(layer)
        return {} if entry is None else entry.evidence


class Txn(Protocol):
    def after_commit(self, action: Callable[[], None]) -> None: ...

    # one savepoint at a time inside a write: a group commit undoes a refused write alone
    def savepoint(self) -> None: ...
    def release_savepoint(self) -> None: ...
    def rollback_to_savepoint(self) -> None: ...

    # clock and change detection
    def clock(self) -> int: ...
    def set_clock(self, version: int) -> None: ...
    def forget_epoch(self) -> int: ...
    def meta(self, name: str) -> int | None: ...
    def meta_all(self) -> dict[str, int]: ...
    def set_meta(self, name: str, value: int) -> None: ...
    def bump_forget_epoch(self) -> None: ...

    # tombstones, lifts and reauthorization
    def tombstone_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]: ...
    def lift_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]: ...
    def all_lifts(self) -> list[tuple[bytes, int]]: ...
    def all_reauths(self) -> list[tuple[bytes, str, bytes, int, int | None, bytes | None]]:
        """(digest, kind, target, issued_version, consumed_version, subject) of every token row."""
        ...

    def insert_tombstones(self, rows: Iterable[tuple[bytes, int, str, str]]) -> None: ...
    def insert_lift(self, target: bytes, version: int) -> None: ...
    def insert_reauth(
        self, digest: bytes, kind: str, target: bytes, version: int, subject: bytes | None = None
    ) -> None: ...
    def reauth(self, digest: bytes) -> tuple[str, bytes, int, int | None, bytes | None] | None:
        """(kind, target, issued_version, consumed_version, subject) of a stored token."""
        ...

    def consume_reauth(self, digest: bytes, version: int) -> None: ...

    # what the ledger decided, as the database caches it (integrity checks, S9)
    def unhidden(self, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` whose record row exists and carries no hidden mark."""
        ...

    def keyed(self, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` whose record or lineage row still holds a wrapped key."""
        ...

    # keys
    def scope_rows(self, tokens: Sequence[bytes]) -> dict[bytes, ScopeKeyRow]: ...
    def insert_scopes(self, rows: Iterable[ScopeKeyRow]) -> None: ...
    def subject_rows(self, tokens: Sequence[bytes]) -> dict[bytes, tuple[bytes | None, int | None]]: ...
    def insert_subjects(self, rows: Iterable[tuple[bytes, bytes, int]]) -> None: ...
    def subtree_tokens(self, token: bytes) -> list[bytes]: ...
    def replace_scope_key(self, token: bytes, wrapped: bytes, epoch: int) -> None: ...
    def replace_subject_key(self, token: bytes, wrapped: bytes, epoch: int) -> None: ...

    # records and lineage
    def records_in_slots(self, slots: Sequence[tuple[bytes, bytes]]) -> list[RecordRow]: ...
    def key_records(
        self, scope_tokens: Sequence[bytes], key_token: bytes
    ) -> tuple[int, list[tuple[RecordRow, LineageRow | None]]]:
        """The rows of ``key`` in each of a few scopes, and the data version they were read at."""
        ...

    def record(self, record_id: str) -> RecordRow | None: ...
    def records_in_scopes(self, scope_tokens: Sequence[bytes]) -> list[RecordRow]: ...
    def live_records(self, after_version: int = 0) -> Iterator[RecordRow]: ...
    def insert_records(self, rows: Sequence[RecordRow], lineage: Sequence[LineageRow]) -> None: ...
    # the search index's sealed vectors (index.atrest), keyed by record version; a cell dies with its record
    def store_vectors(self, cells: Sequence[tuple[bytes, str, int]]) -> int:
        """Keep each ``(cell, record id, version)`` whose record is still live at that version."""
        ...

    def live_vectors(self, after_version: int = 0) -> list[tuple[str, int, bytes, bytes, int, bytes | None]]:
        """``(id, version, scope_token, wrapped, epoch, cell or None)`` of each live record after that version."""
        ...

    def vector_cell(self, version: int) -> bytes | None: ...

    def delete_records(self, ids: Sequence[str]) -> None: ...
    def lineage(self, ids: Sequence[str]) -> dict[str, LineageRow]: ...
    def lineage_tokens(self, ids: Sequence[str]) -> list[tuple[bytes, bytes]]:
        """(scope token, subject tokens) of each of ``ids`` that has a lineage row: what
        :meth:`lineage` gives, without building rows (a large forget reads every one)."""
        ...

    def lineage_keyed(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` whose lineage key is not destroyed."""
        ...

    def lineage_ids(
        self, scope_tokens: Sequence[bytes], key_token: bytes | None, *, unforgotten: bool = False
    ) -> list[str]: ...
    def lineage_ids_for_subject(self, subject_token: bytes) -> list[str]: ...
    def derived_closure(self, ids: Sequence[str]) -> list[str]: ...
    def written_since(self, version: int) -> list[LineageRow]:
        """Lineage rows of records written after ``version`` (live, or replaced since by a newer
        write to the same slot): what a forget planned outside the write lock may have missed."""
        ...

    def unforgotten_in_scopes(
        self, scope_tokens: Sequence[bytes], key_token: bytes | None, before: int, *, compliance: bool
    ) -> list[str]:
        """Ids of records written in these scopes (with this key) before version ``before`` that
        are not yet forgotten: a row unhidden, or (compliance) a key or lineage seed not destroyed;
        (operational) a lineage row no forget marked."""
        ...

    def unforgotten_for_subject(self, subject_token: bytes, before: int, *, compliance: bool) -> list[str]:
        """The same, for records carrying a subject."""
        ...

    # forgetting
    def hide_records(self, ids: Sequence[str], version: int, mode: str) -> int: ...
    def destroy_record_keys(self, ids: Sequence[str], version: int) -> None: ...
    def destroy_scope_keys(self, tokens: Sequence[bytes], version: int) -> None: ...
    def destroy_subject_keys(self, tokens: Sequence[bytes], version: int) -> None: ...

    # what only a forget's records use (lazily: callers stop at the first that says no), and
    # what of a target remains after its purge
    def child_scopes(self, token: bytes) -> Iterator[bytes]: ...
    def scope_lineage(self, token: bytes) -> Iterator[tuple[str, int, bool]]:
        """(record id, version, keys live) of every record ever written in exactly this scope."""
        ...

    def subject_lineage(self, token: bytes) -> Iterator[tuple[str, int, bool]]:
        """(record id, version, keys live) of every record ever written carrying the subject."""
        ...

    def existing_records(self, ids: Sequence[str]) -> set[str]: ...
    def plaintext_holds(self, needle: bytes) -> bool:
        """Does ``needle`` occur in a column the store keeps in plain (content-free bookkeeping)?"""
        ...

    # purge, rotation
    def purge_erased(
        self, ids: Sequence[str], scopes: Sequence[bytes], subjects: Sequence[bytes], version: int
    ) -> int: ...
    def erased_version(self, record_id: str) -> int | None: ...
    def delete_hidden(self, ids: Sequence[str]) -> int: ...
    def sweep_expired(self, now: float, limit: int) -> int: ...
    def wrapped_keys(self) -> list[tuple[str, Any, bytes, int]]: ...
    def rewrap(self, rows: Iterable[tuple[str, Any, bytes, int]]) -> None: ...
    def epochs_in_use(self) -> set[int]: ...
    def insert_probe_key(self, request_id: str, wrapped: bytes, epoch: int) -> None: ...
    def probe_key(self, request_id: str) -> tuple[bytes, int] | None: ...
    def delete_probe_key(self, request_id: str) -> None: ...
    def probe_key_epochs(self) -> set[int]:
        """Epochs wrapping a pending request's probe key: rotation keeps them (never rewraps)."""
        ...

    # erasure requests and the audit log
    def insert_erasure(self, row: ErasureRow, *, replace: bool = False) -> None: ...
    def erasure(self, request_id: str) -> ErasureRow | None: ...
    def erasure_layers(self, request_id: str) -> str | None:
        """A request's layers alone (its row holds its whole plan: reading all of it is slow)."""
        ...

    def erasures(self, states: Sequence[str] | None = None) -> list[ErasureRow]: ...
    def update_erasure(self, request_id: str, **fields: Any) -> None: ...
    def erasure_ids(self) -> set[str]: ...
    def unapplied_erasures(self) -> list[ErasureRow]:
        """Requests whose plan is not yet applied whole (``applied`` is set), oldest first."""
        ...

    def apply_cursor(self, request_id: str) -> int | None:
        """How many of a large request's plan ids are applied; None once all are (or no such request)."""
        ...

    def set_applied(self, request_id: str, applied: int | None) -> None:
        """A large request's apply cursor (None: applied whole)."""
        ...

    def purge_progress(self, request_id: str) -> tuple[int, int]:
        """(records done, rows removed) of a purge removing a request's rows in chunks."""
        ...

    def set_purge_progress(self, request_id: str, done: int | None, removed: int = 0) -> None:
        """Record a chunked purge's progress (``done`` None: finished, forget the cursor)."""
        ...

    def audit_tail(self) -> tuple[int, str] | None: ...
    def append_audit(self, seq: int, entry: str) -> None: ...
    def audit_entries(self) -> list[str]: ...


class Backend(Protocol):
    @property
    def location(self) -> Path | None: ...

    def write(self) -> AbstractContextManager[Txn]: ...
    def read(self) -> AbstractContextManager[Txn]: ...
    def changed(self) -> bool:
        """True if another connection committed since the last call (cheap)."""
        ...

    def saw_data_version(self, current: int) -> bool:
        """:meth:`changed` for a data version read by the caller (see ``Txn.key_records``)."""
        ...

    def in_transaction(self) -> bool:
        """True while this thread is inside one of this backend's transactions (a callback)."""
        ...

    def held_here(self) -> bool:
        """True while the calling thread holds this backend's lock (a transaction, ``serial``)."""
        ...

    def serial(self) -> AbstractContextManager[Any]:
        """Hold this backend's own lock (re-entrant) across several calls: the one lock a caller
        may take around backend calls without a lock-order deadlock."""
        ...

    @property
    def physical(self) -> Physical:
        """What this backend does to bytes after rows are deleted (``backends.physical``)."""
        ...

    def close(self) -> None: ...
