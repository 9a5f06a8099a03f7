"""The backend contract: rows as data, one transaction protocol, no policy.

The store (``cenotaph.store``) decides what to read, write, hide and destroy; a backend only
moves rows. ``Backend.write()`` opens a write transaction (SQLite ``BEGIN IMMEDIATE``: one
writer; PostgreSQL: the locks its ``WriteLocks`` name); ``Backend.read()`` a consistent read snapshot. Both yield a :class:`Txn`, which
runs the operations of :mod:`cenotaph.backends.ops` (``txn.run(ops.ScopeRows(tokens))``).
Side effects that must follow a commit are registered with ``Txn.after_commit``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from ..errors import StorageError
from ..model import LayerState

if TYPE_CHECKING:
    from .ops import Op
    from .physical import Physical

__all__ = [
    "BUSY_TIMEOUT_ENV",
    "Backend",
    "ErasureRow",
    "LayerEntry",
    "LineageRow",
    "LostRace",
    "NeedsSnapshot",
    "OneStatement",
    "RecordRow",
    "ScopeKeyRow",
    "Txn",
    "WriteLocks",
    "busy_timeout_ms",
    "dump_layers",
    "lineage_values",
    "parse_layers",
    "run_after_commit",
]

T = TypeVar("T")

# settings every backend shares

BUSY_TIMEOUT_ENV = "CENOTAPH_BUSY_TIMEOUT_MS"


def busy_timeout_ms() -> int:
    """How long a write waits for another process's write transaction (default 30 s): SQLite's
    busy timeout, PostgreSQL's lock and pool waits, a purge's wait for a blocking reader."""
    try:
        return max(0, int(os.environ.get(BUSY_TIMEOUT_ENV, "30000")))
    except ValueError:
        return 30_000


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


def lineage_values(row: LineageRow) -> tuple[Any, ...]:
    """A lineage row's column values in ``LineageRow`` order, as every backend stores them (its
    sources as a JSON list)."""
    return (
        row.record_id,
        row.scope_token,
        row.key_token,
        row.version,
        row.wrapped,
        row.epoch,
        row.subject_tokens,
        row.subjects,
        json.dumps(list(row.sources)) if row.sources else "[]",  # most records derive from none
        row.destroyed_version,
        row.forgotten_version,
    )


def run_after_commit(actions: Iterable[Callable[[], None]]) -> None:
    """Run a committed transaction's ``after_commit`` actions: every one runs even if one fails
    (the commit happened), and the first failure is raised afterwards."""
    failure: BaseException | None = None
    for action in actions:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the others ran
            failure = failure or exc
    if failure is not None:
        raise failure


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
    """A transaction: run operations (``backends.ops``) in it, and register what must follow its commit."""

    def run(self, op: Op[T]) -> T: ...
    def run_last(self, op: Op[T]) -> T:
        """``op`` as a read's last statement (see ``ops.OpRunner.run_last``)."""
        ...

    def clock_marker_then(self, op: Op[T]) -> tuple[int, Hashable, T]:
        """The settled clock and the change marker of a read's snapshot, then ``op`` as its last
        statement (see ``ops.OpRunner.clock_marker_then``)."""
        ...

    def after_commit(self, action: Callable[[], None]) -> None: ...

    # one savepoint at a time inside a write: a group commit undoes a refused write alone
    def savepoint(self) -> None: ...
    def release_savepoint(self) -> None: ...
    def rollback_to_savepoint(self) -> None: ...


class LostRace(StorageError):
    """A write transaction made a key row another transaction, not excluded by its locks, made
    first (two writes of different targets creating one parent scope's key, say): it rolls back
    whole, and run again it finds the other's row. Only where writers run at once (PostgreSQL)."""


@dataclass(frozen=True, slots=True)
class WriteLocks:
    """What a write transaction that is not store-wide locks (``Backend.write(locks)``), on a
    backend whose writers are not serialised (PostgreSQL; SQLite has one writer and ignores it).

    ``shared`` and ``exclusive`` are tombstone targets (``WriteTargets.tombstone_targets``): a
    record write holds those covering its records shared, a forget those its tombstones name
    exclusive, so exactly the transactions that could dominate one another exclude each other.
    ``serial``: the transaction also excludes every other ``serial`` one (forgets among
    themselves: the audit chain, the forget epoch). Every such transaction holds the store's
    lock shared; ``write(None)``, store-wide, holds it exclusive (every other write excluded)."""

    shared: frozenset[bytes] = frozenset()
    exclusive: frozenset[bytes] = frozenset()
    serial: bool = False


class NeedsSnapshot(Exception):
    """A :class:`OneStatement` read was asked for a second operation: the caller reads again in a
    transaction of its own. Control flow inside the store, never raised to a caller."""


class OneStatement:
    """A read of exactly one operation, outside any transaction: in SQLite's WAL mode one
    statement in autocommit is its own snapshot, so a read that needs one statement needs no
    ``BEGIN``/``COMMIT``. A second operation (the read found it needs more rows than the one
    statement gives: a key not cached yet) would see another snapshot, so it raises
    :class:`NeedsSnapshot` instead, before running anything."""

    __slots__ = ("_inner", "_used")

    def __init__(self, inner: Txn) -> None:
        self._inner = inner
        self._used = False

    def run(self, op: Op[T]) -> T:
        if self._used:
            raise NeedsSnapshot
        self._used = True
        return self._inner.run(op)

    def run_last(self, op: Op[T]) -> T:
        return self.run(op)  # one statement, no transaction: nothing to close

    def clock_marker_then(self, op: Op[T]) -> tuple[int, Hashable, T]:
        raise NeedsSnapshot  # two operations

    def after_commit(self, action: Callable[[], None]) -> None:
        raise NeedsSnapshot

    def savepoint(self) -> None:
        raise NeedsSnapshot

    def release_savepoint(self) -> None:
        raise NeedsSnapshot

    def rollback_to_savepoint(self) -> None:
        raise NeedsSnapshot


class Backend(Protocol):
    """Transactions over one store's rows. A backend protects only its own connections; the store
    serialises its threads itself (``cenotaph.locking``)."""

    # do write transactions of different targets run at once (then a write names its
    # ``WriteLocks``, which cost a few HMACs to compute)?
    concurrent_writers: bool

    @property
    def location(self) -> Path | None: ...

    def describe(self) -> dict[str, str]:
        """``{"backend", "location"}``: the engine and where its database is, for a certificate
        (never a password)."""
        ...

    def write(
        self, locks: WriteLocks | None = None, ahead: Sequence[Op[Any]] = ()
    ) -> AbstractContextManager[Txn]:
        """A write transaction: store-wide (``locks`` None: no other write meanwhile) or holding
        ``locks`` only. ``ahead``: operations the transaction will run first, which a backend
        may send with its BEGIN (PostgreSQL: one round trip); their results are returned when
        the transaction runs them (unchanged by nothing it wrote before: a backend drops each
        when the transaction runs a write that could change it)."""
        ...

    def read(self) -> AbstractContextManager[Txn]: ...
    def marker(self) -> Hashable:
        """The change marker, read outside any transaction (cheap): it differs from the last one
        read if another connection committed since; one's own commits leave it alone (SQLite's
        ``data_version``). ``ops.Marker`` reads it as of a transaction's snapshot."""
        ...

    @property
    def physical(self) -> Physical:
        """What this backend does to bytes after rows are deleted (``backends.physical``)."""
        ...

    def close(self) -> None: ...
