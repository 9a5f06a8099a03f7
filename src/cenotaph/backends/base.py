"""The backend contract: rows as data, one transaction protocol, no policy.

The store (``cenotaph.store``) decides what to read, write, hide and destroy; a backend only
moves rows. ``Backend.write()`` opens a serialised write transaction (SQLite ``BEGIN
IMMEDIATE``); ``Backend.read()`` a consistent read snapshot. Both yield a :class:`Txn`, which
runs the operations of :mod:`cenotaph.backends.ops` (``txn.run(ops.ScopeRows(tokens))``).
Side effects that must follow a commit are registered with ``Txn.after_commit``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

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
    "RecordRow",
    "ScopeKeyRow",
    "Txn",
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
        json.dumps(list(row.sources)),
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

    def after_commit(self, action: Callable[[], None]) -> None: ...

    # one savepoint at a time inside a write: a group commit undoes a refused write alone
    def savepoint(self) -> None: ...
    def release_savepoint(self) -> None: ...
    def rollback_to_savepoint(self) -> None: ...


class Backend(Protocol):
    """Transactions over one store's rows. A backend protects only its own connections; the store
    serialises its threads itself (``cenotaph.locking``)."""

    @property
    def location(self) -> Path | None: ...

    def describe(self) -> dict[str, str]:
        """``{"backend", "location"}``: the engine and where its database is, for a certificate
        (never a password)."""
        ...

    def write(self) -> AbstractContextManager[Txn]: ...
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
