"""The backend contract's operations: one frozen record per thing a transaction can do.

The store speaks to storage only by running operations in a transaction::

    with backend.read() as txn:
        rows = txn.run(ops.ScopeRows(tokens))  # -> dict[bytes, ScopeKeyRow]

Each operation is data (its fields are what the backend needs, in the order its handler takes
them) and is generic in its result, so ``txn.run`` is typed per operation. ``writes`` says
whether it changes rows: a read transaction refuses one that does. A backend's transaction
class takes :class:`OpRunner` and implements one handler per operation, named after it
(``ScopeRows`` -> ``scope_rows(tokens)``); ``run`` dispatches through a table built once, when
the class is defined, which also checks that every operation has a handler taking its fields.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, fields
from operator import attrgetter
from typing import Any, ClassVar, Generic, Literal, TypeVar

from .base import ErasureRow, LineageRow, RecordRow, ScopeKeyRow

__all__ = ["OPS", "Counter", "Op", "OpRunner", "handler_name"]  # and every operation class (see OPS)

R = TypeVar("R", covariant=True)


class Op(Generic[R]):
    """An operation whose result is an ``R``."""

    __slots__ = ()
    writes: ClassVar[bool]


# change marker, counters and meta values


@dataclass(frozen=True, slots=True)
class Marker(Op[Hashable]):
    """The backend's change marker as of this transaction's snapshot (see ``Backend.marker``)."""

    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class ClockMarker(Op[tuple[int, Hashable]]):
    """The write clock (``Count("clock")``) and the change marker (``Marker``), of one snapshot."""

    writes: ClassVar[bool] = False


# the counters, always present: the write clock (the last version given out) and the forget
# epoch (moved by every forget, so other processes drop the keys they cached)
Counter = Literal["clock", "forget_epoch"]


@dataclass(frozen=True, slots=True)
class Count(Op[int]):
    """A counter's value."""

    writes: ClassVar[bool] = False
    name: Counter


@dataclass(frozen=True, slots=True)
class Advance(Op[None]):
    """Move a counter forward: to ``to`` if that is past it (a clock never goes back), else
    (``to`` None) by one."""

    writes: ClassVar[bool] = True
    name: Counter
    to: int | None = None


@dataclass(frozen=True, slots=True)
class Reserve(Op[int]):
    """Versions for one transaction: returns ``last``, and ``last + 1 .. last + count`` are this
    transaction's, with ``last`` never below ``floor`` (the ledger's newest version). Where
    writers are serialised it is the clock (moved by ``Advance`` as before); where they are not
    (PostgreSQL) a block no other transaction gets, whatever order they commit in."""

    writes: ClassVar[bool] = True
    count: int
    floor: int = 0


@dataclass(frozen=True, slots=True)
class Meta(Op[int | None]):
    writes: ClassVar[bool] = False
    name: str


@dataclass(frozen=True, slots=True)
class MetaAll(Op[dict[str, int]]):
    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class SetMeta(Op[None]):
    writes: ClassVar[bool] = True
    name: str
    value: int


# tombstones, lifts and reauthorization


@dataclass(frozen=True, slots=True)
class TombstoneVersions(Op[dict[bytes, int]]):
    writes: ClassVar[bool] = False
    targets: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class LiftVersions(Op[dict[bytes, int]]):
    writes: ClassVar[bool] = False
    targets: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class AllLifts(Op[list[tuple[bytes, int]]]):
    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class AllReauths(Op[list[tuple[bytes, str, bytes, int, int | None, bytes | None]]]):
    """(digest, kind, target, issued_version, consumed_version, subject) of every token row."""

    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class InsertTombstones(Op[None]):
    writes: ClassVar[bool] = True
    rows: Iterable[tuple[bytes, int, str, str]]


@dataclass(frozen=True, slots=True)
class InsertLift(Op[None]):
    writes: ClassVar[bool] = True
    target: bytes
    version: int


@dataclass(frozen=True, slots=True)
class InsertReauth(Op[None]):
    writes: ClassVar[bool] = True
    digest: bytes
    kind: str
    target: bytes
    version: int
    subject: bytes | None = None


@dataclass(frozen=True, slots=True)
class Reauth(Op[tuple[str, bytes, int, int | None, bytes | None] | None]):
    """(kind, target, issued_version, consumed_version, subject) of a stored token."""

    writes: ClassVar[bool] = False
    digest: bytes


@dataclass(frozen=True, slots=True)
class ConsumeReauth(Op[None]):
    writes: ClassVar[bool] = True
    digest: bytes
    version: int


# what the ledger decided, as the database caches it (integrity checks, S9)


@dataclass(frozen=True, slots=True)
class Unhidden(Op[list[str]]):
    """Those of ``ids`` whose record row exists and carries no hidden mark."""

    writes: ClassVar[bool] = False
    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class Keyed(Op[list[str]]):
    """Those of ``ids`` whose record or lineage row still holds a wrapped key."""

    writes: ClassVar[bool] = False
    ids: Sequence[str]


# keys


@dataclass(frozen=True, slots=True)
class ScopeRows(Op[dict[bytes, ScopeKeyRow]]):
    writes: ClassVar[bool] = False
    tokens: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class ScopeChainRows(Op[dict[bytes, ScopeKeyRow]]):
    """The scopes rows of ``token`` and of every ancestor its parent column leads to, at once."""

    writes: ClassVar[bool] = False
    token: bytes


@dataclass(frozen=True, slots=True)
class InsertScopes(Op[None]):
    writes: ClassVar[bool] = True
    rows: Iterable[ScopeKeyRow]


@dataclass(frozen=True, slots=True)
class SubjectRows(Op[dict[bytes, tuple[bytes | None, int | None]]]):
    writes: ClassVar[bool] = False
    tokens: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class InsertSubjects(Op[None]):
    writes: ClassVar[bool] = True
    rows: Iterable[tuple[bytes, bytes, int]]


@dataclass(frozen=True, slots=True)
class SubtreeTokens(Op[list[bytes]]):
    writes: ClassVar[bool] = False
    token: bytes


@dataclass(frozen=True, slots=True)
class SubtreeRows(Op[dict[bytes, ScopeKeyRow]]):
    """The scopes rows of ``token`` and of every scope below it, at once."""

    writes: ClassVar[bool] = False
    token: bytes


@dataclass(frozen=True, slots=True)
class ReplaceScopeKey(Op[None]):
    writes: ClassVar[bool] = True
    token: bytes
    wrapped: bytes
    epoch: int


@dataclass(frozen=True, slots=True)
class ReplaceSubjectKey(Op[None]):
    writes: ClassVar[bool] = True
    token: bytes
    wrapped: bytes
    epoch: int


# records and lineage


@dataclass(frozen=True, slots=True)
class RecordsInSlots(Op[list[RecordRow]]):
    writes: ClassVar[bool] = False
    slots: Sequence[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class KeyRecords(Op[tuple[Hashable, list[tuple[RecordRow, LineageRow | None]]]]):
    """The rows of ``key`` in each of a few scopes, and the change marker (``Marker``) of the
    snapshot they were read in."""

    writes: ClassVar[bool] = False
    scope_tokens: Sequence[bytes]
    key_token: bytes


@dataclass(frozen=True, slots=True)
class Record(Op[RecordRow | None]):
    writes: ClassVar[bool] = False
    record_id: str


@dataclass(frozen=True, slots=True)
class RecordsOfIds(Op[dict[str, tuple[RecordRow, LineageRow]]]):
    """The record rows of these ids with their lineage rows, by id (a search's hits, checked
    all at once)."""

    writes: ClassVar[bool] = False
    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class RecordsInScopes(Op[list[RecordRow]]):
    writes: ClassVar[bool] = False
    scope_tokens: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class LiveRecords(Op[Iterator[RecordRow]]):
    writes: ClassVar[bool] = False
    after_version: int = 0


@dataclass(frozen=True, slots=True)
class InsertRecords(Op[None]):
    """Insert records' rows and their lineage rows, after deleting the record rows of the ids
    ``replaced`` names (the slots' old records: a write replaces the row it finds)."""

    writes: ClassVar[bool] = True
    rows: Sequence[RecordRow]
    lineage: Sequence[LineageRow]
    replaced: Sequence[str] = ()


# the search index's sealed vectors (index.atrest), keyed by record version; a cell dies with its record


@dataclass(frozen=True, slots=True)
class StoreVectors(Op[int]):
    """Keep each ``(cell, record id, version)`` whose record is still live at that version."""

    writes: ClassVar[bool] = True
    cells: Sequence[tuple[bytes, str, int]]


@dataclass(frozen=True, slots=True)
class LiveVectors(Op[list[tuple[str, int, bytes, bytes, int, bytes | None]]]):
    """``(id, version, scope_token, wrapped, epoch, cell or None)`` of each live record after that version."""

    writes: ClassVar[bool] = False
    after_version: int = 0


@dataclass(frozen=True, slots=True)
class VectorCell(Op[bytes | None]):
    writes: ClassVar[bool] = False
    version: int


@dataclass(frozen=True, slots=True)
class Lineage(Op[dict[str, LineageRow]]):
    writes: ClassVar[bool] = False
    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class LineageTokens(Op[list[tuple[bytes, bytes]]]):
    """(scope token, subject tokens) of each of ``ids`` that has a lineage row: what
    :meth:`lineage` gives, without building rows (a large forget reads every one)."""

    writes: ClassVar[bool] = False
    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class LineageKeyed(Op[set[str]]):
    """Those of ``ids`` whose lineage key is not destroyed."""

    writes: ClassVar[bool] = False
    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class LineageIds(Op[list[str]]):
    writes: ClassVar[bool] = False
    scope_tokens: Sequence[bytes]
    key_token: bytes | None
    _: KW_ONLY
    unforgotten: bool = False


@dataclass(frozen=True, slots=True)
class LineageIdsForSubject(Op[list[str]]):
    writes: ClassVar[bool] = False
    subject_token: bytes


@dataclass(frozen=True, slots=True)
class DerivedClosure(Op[list[str]]):
    writes: ClassVar[bool] = False
    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class WrittenSince(Op[list[LineageRow]]):
    """Lineage rows of records written after ``version`` (live, or replaced since by a newer
    write to the same slot): what a forget planned outside the write lock may have missed."""

    writes: ClassVar[bool] = False
    version: int


@dataclass(frozen=True, slots=True)
class UnforgottenInScopes(Op[list[str]]):
    """Ids of records written in these scopes (with this key) before version ``before`` that
    are not yet forgotten: a row unhidden, or (compliance) a key or lineage seed not destroyed;
    (operational) a lineage row no forget marked."""

    writes: ClassVar[bool] = False
    scope_tokens: Sequence[bytes]
    key_token: bytes | None
    before: int
    _: KW_ONLY
    compliance: bool


@dataclass(frozen=True, slots=True)
class SampleRows(Op[dict[str, tuple[LineageRow, RecordRow | None, bytes | None]]]):
    """Every lineage row of ``ids``, with its record row and that row's sealed vector cell where
    they exist, in one statement (a part of ids each, where the dialect sends them in parts)."""

    writes: ClassVar[bool] = False
    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class UnforgottenInSubtree(Op[list[str]]):
    """:class:`UnforgottenInScopes` of ``scope_token``'s subtree (``exact``: of that scope alone)
    in one statement, its subtree walked in it; ``derived``: with every record derived from
    them, transitively, too (a compliance forget's closure). One statement reads one snapshot."""

    writes: ClassVar[bool] = False
    scope_token: bytes
    key_token: bytes | None
    before: int
    _: KW_ONLY
    exact: bool
    compliance: bool
    derived: bool = False


@dataclass(frozen=True, slots=True)
class StillReadable(Op[list[str]]):
    """A forget's postcondition in one statement where the engine takes lists whole
    (PostgreSQL): those of ``hidden`` whose record row exists unhidden, of ``keyed`` whose record
    or lineage row still holds a wrapped key, and (``scope_token`` not None)
    :class:`UnforgottenInSubtree` of the target (without its derived records)."""

    writes: ClassVar[bool] = False
    hidden: Sequence[str]
    keyed: Sequence[str]
    scope_token: bytes | None
    key_token: bytes | None
    before: int
    _: KW_ONLY
    exact: bool
    compliance: bool


@dataclass(frozen=True, slots=True)
class UnforgottenForSubject(Op[list[str]]):
    """The same, for records carrying a subject."""

    writes: ClassVar[bool] = False
    subject_token: bytes
    before: int
    _: KW_ONLY
    compliance: bool


# forgetting


@dataclass(frozen=True, slots=True)
class HideRecords(Op[None]):
    writes: ClassVar[bool] = True
    ids: Sequence[str]
    version: int
    mode: str


@dataclass(frozen=True, slots=True)
class DestroyRecordKeys(Op[None]):
    writes: ClassVar[bool] = True
    ids: Sequence[str]
    version: int


@dataclass(frozen=True, slots=True)
class DestroyKeys(Op[None]):
    """Destroy the keys of these scopes and subjects (a compliance forget shreds both)."""

    writes: ClassVar[bool] = True
    scopes: Sequence[bytes]
    subjects: Sequence[bytes]
    version: int


# what only a forget's records use (lazily: callers stop at the first that says no), and


# what of a target remains after its purge


@dataclass(frozen=True, slots=True)
class LiveInSubtree(Op[list[str]]):
    """Ids of records with live keys anywhere in the subtree of ``token`` (the scope and every
    scope below it), at most ``limit`` of them: one statement, which stops walking the subtree
    once it has found them."""

    writes: ClassVar[bool] = False
    token: bytes
    limit: int


@dataclass(frozen=True, slots=True)
class ScopeLineage(Op[Iterator[tuple[str, int, bool]]]):
    """(record id, version, keys live) of every record ever written in exactly this scope."""

    writes: ClassVar[bool] = False
    token: bytes


@dataclass(frozen=True, slots=True)
class SubjectLineage(Op[Iterator[tuple[str, int, bool]]]):
    """(record id, version, keys live) of every record ever written carrying the subject."""

    writes: ClassVar[bool] = False
    token: bytes


@dataclass(frozen=True, slots=True)
class ExistingRecords(Op[set[str]]):
    writes: ClassVar[bool] = False
    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class PlaintextHolds(Op[bool]):
    """Does ``needle`` occur in a column the store keeps in plain (content-free bookkeeping)?"""

    writes: ClassVar[bool] = False
    needle: bytes


# purge, rotation


@dataclass(frozen=True, slots=True)
class PurgeErased(Op[int]):
    writes: ClassVar[bool] = True
    ids: Sequence[str]
    scopes: Sequence[bytes]
    subjects: Sequence[bytes]
    version: int


@dataclass(frozen=True, slots=True)
class ErasedVersion(Op[int | None]):
    writes: ClassVar[bool] = False
    record_id: str


@dataclass(frozen=True, slots=True)
class DeleteHidden(Op[int]):
    writes: ClassVar[bool] = True
    ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class SweepExpired(Op[int]):
    writes: ClassVar[bool] = True
    now: float
    limit: int


@dataclass(frozen=True, slots=True)
class WrappedKeys(Op[list[tuple[str, Any, bytes, int]]]):
    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Rewrap(Op[None]):
    writes: ClassVar[bool] = True
    rows: Iterable[tuple[str, Any, bytes, int]]


@dataclass(frozen=True, slots=True)
class EpochsInUse(Op[set[int]]):
    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class InsertProbeKey(Op[None]):
    writes: ClassVar[bool] = True
    request_id: str
    wrapped: bytes
    epoch: int


@dataclass(frozen=True, slots=True)
class ProbeKey(Op[tuple[bytes, int] | None]):
    writes: ClassVar[bool] = False
    request_id: str


@dataclass(frozen=True, slots=True)
class DeleteProbeKey(Op[None]):
    writes: ClassVar[bool] = True
    request_id: str


@dataclass(frozen=True, slots=True)
class ProbeEpochs(Op[dict[str, int]]):
    """The KEK epoch wrapping each pending request's probe key, by request id (one query)."""

    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class ProbeKeyEpochs(Op[set[int]]):
    """Epochs wrapping a pending request's probe key: rotation keeps them (never rewraps)."""

    writes: ClassVar[bool] = False


# erasure requests and the audit log


@dataclass(frozen=True, slots=True)
class InsertErasure(Op[None]):
    writes: ClassVar[bool] = True
    row: ErasureRow
    _: KW_ONLY
    replace: bool = False


@dataclass(frozen=True, slots=True)
class Erasure(Op[ErasureRow | None]):
    writes: ClassVar[bool] = False
    request_id: str


@dataclass(frozen=True, slots=True)
class ErasureLayers(Op[str | None]):
    """A request's layers alone (its row holds its whole plan: reading all of it is slow)."""

    writes: ClassVar[bool] = False
    request_id: str


@dataclass(frozen=True, slots=True)
class Erasures(Op[list[ErasureRow]]):
    writes: ClassVar[bool] = False
    states: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class UpdateErasure(Op[None]):
    writes: ClassVar[bool] = True
    request_id: str
    fields: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ErasureIds(Op[set[str]]):
    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class UnappliedErasures(Op[list[ErasureRow]]):
    """Requests whose plan is not yet applied whole (``applied`` is set), oldest first."""

    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class ApplyCursor(Op[int | None]):
    """How many of a large request's plan ids are applied; None once all are (or no such request)."""

    writes: ClassVar[bool] = False
    request_id: str


@dataclass(frozen=True, slots=True)
class SetApplied(Op[None]):
    """A large request's apply cursor (None: applied whole)."""

    writes: ClassVar[bool] = True
    request_id: str
    applied: int | None


@dataclass(frozen=True, slots=True)
class PurgeProgress(Op[tuple[int, int]]):
    """(records done, rows removed) of a purge removing a request's rows in chunks."""

    writes: ClassVar[bool] = False
    request_id: str


@dataclass(frozen=True, slots=True)
class SetPurgeProgress(Op[None]):
    """Record a chunked purge's progress (``done`` None: finished, forget the cursor)."""

    writes: ClassVar[bool] = True
    request_id: str
    done: int | None
    removed: int = 0


@dataclass(frozen=True, slots=True)
class AuditTail(Op[tuple[int, str] | None]):
    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class AppendAudit(Op[None]):
    writes: ClassVar[bool] = True
    seq: int
    entry: str


@dataclass(frozen=True, slots=True)
class AuditEntries(Op[list[str]]):
    writes: ClassVar[bool] = False


# downstream consumers (cenotaph.consumers): content-free (ids, versions, times, their own JSON)


@dataclass(frozen=True, slots=True)
class InsertConsumer(Op[None]):
    writes: ClassVar[bool] = True
    consumer_id: str
    name: str
    ack_days: int
    registered_at: str


@dataclass(frozen=True, slots=True)
class Consumers(Op[list[tuple[str, str, int, str]]]):
    """(id, name, ack_days, registered_at) of every consumer, oldest first."""

    writes: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class InsertTakes(Op[None]):
    """What a consumer took: (record id, version) pairs; a record taken again keeps its first row."""

    writes: ClassVar[bool] = True
    consumer_id: str
    taken: Sequence[tuple[str, int]]
    taken_at: str


@dataclass(frozen=True, slots=True)
class TakersOf(Op[list[tuple[str, str, int]]]):
    """(consumer id, record id, version) of every take of one of ``record_ids``."""

    writes: ClassVar[bool] = False
    record_ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class InsertConsumerEvents(Op[None]):
    """(consumer id, request id, records JSON, created_at, deadline) rows."""

    writes: ClassVar[bool] = True
    rows: Sequence[tuple[str, str, str, str, str]]


@dataclass(frozen=True, slots=True)
class ConsumerEvents(Op[list[tuple[str, str, str, str, str, str | None, str | None]]]):
    """(consumer id, request id, records JSON, created_at, deadline, acknowledged_at, evidence JSON)
    of the events of one consumer and/or one request (None: any), oldest first."""

    writes: ClassVar[bool] = False
    consumer_id: str | None
    request_id: str | None


@dataclass(frozen=True, slots=True)
class AcknowledgeConsumerEvent(Op[None]):
    writes: ClassVar[bool] = True
    consumer_id: str
    request_id: str
    acknowledged_at: str
    evidence: str


# every operation defined above, in the order defined
OPS: tuple[type[Op[Any]], ...] = tuple(
    v for v in list(globals().values()) if isinstance(v, type) and issubclass(v, Op) and v is not Op
)
__all__ += [op.__name__ for op in OPS]

_Call = Callable[[Any, Any], Any]  # (transaction, operation) -> result


def handler_name(op: type[Op[Any]]) -> str:
    """The handler method that runs ``op``: its class name in snake case (``ScopeRows`` -> ``scope_rows``)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in op.__name__).lstrip("_")


def _caller(runner: type, op: type[Op[Any]]) -> _Call:
    """A function calling a transaction's handler of ``op`` with the op's fields: positionally, in
    field order, but for the handler's keyword-only parameters (and a ``**`` one, from a mapping).
    The handler is looked up by name on each call (a test may patch it); its signature is checked
    once, here, on ``runner``."""
    name = handler_name(op)
    params = _handler_params(runner, name, op)
    positional = _tuple_of([p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD])
    keyword = [p.name for p in params if p.kind == p.KEYWORD_ONLY]
    spread = next((p.name for p in params if p.kind == p.VAR_KEYWORD), None)
    if spread is not None:  # the mapping field is spread into keywords (update_erasure's **fields)
        mapping = attrgetter(spread)
        return lambda txn, o: getattr(txn, name)(*positional(o), **mapping(o))
    if keyword:
        return lambda txn, o: getattr(txn, name)(*positional(o), **{k: getattr(o, k) for k in keyword})
    if len(params) == 1:  # the commonest case, and the fastest
        one = attrgetter(params[0].name)
        return lambda txn, o: getattr(txn, name)(one(o))
    return lambda txn, o: getattr(txn, name)(*positional(o))


def _handler_params(runner: type, name: str, op: type[Op[Any]]) -> list[inspect.Parameter]:
    """The parameters (after ``self``) of ``runner``'s handler ``name``, which must be ``op``'s fields."""
    handler = getattr(runner, name, None)
    if not callable(handler):
        raise TypeError(f"{runner.__name__} has no handler {name}() for the operation {op.__name__}")
    params = list(inspect.signature(handler).parameters.values())[1:]
    names = [f.name for f in fields(op)]  # type: ignore[arg-type]
    if names != [p.name for p in params]:
        raise TypeError(f"{runner.__name__}.{name}() must take {op.__name__}'s fields {names} in order")
    return params


def _tuple_of(names: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A getter of these attributes as a tuple (``attrgetter`` returns a lone attribute bare)."""
    if not names:
        return lambda _o: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda o: (one(o),)
    return attrgetter(*names)


def _refuse(op: type[Op[Any]]) -> _Call:
    def call(txn: Any, o: Any) -> Any:
        raise RuntimeError(f"{op.__name__} writes; run it in a write transaction (backend.write())")

    return call


class OpRunner:
    """A transaction's ``run``: dispatch on the operation's type to the handler of its name.

    A subclass calls :meth:`_accept_writes` once (in its ``__init__``) to say whether it is a
    write transaction; a read one refuses every operation that writes."""

    _write_calls: ClassVar[dict[type[Op[Any]], _Call]] = {}
    _read_calls: ClassVar[dict[type[Op[Any]], _Call]] = {}
    _calls: dict[type[Op[Any]], _Call]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._write_calls = {op: _caller(cls, op) for op in OPS}
        cls._read_calls = {op: _refuse(op) if op.writes else call for op, call in cls._write_calls.items()}

    def _accept_writes(self, writes: bool) -> None:
        self._calls = self._write_calls if writes else self._read_calls

    def run(self, op: Op[R]) -> R:
        call = self._calls.get(type(op))
        if call is None:
            raise TypeError(f"{type(op).__name__} is not an operation of the backend contract (backends.ops)")
        result: R = call(self, op)
        return result

    def run_last(self, op: Op[R]) -> R:
        """``op`` as the last statement of a read: a backend that can end the read in the same
        round trip does (PostgreSQL); a statement after it, if any, may read a snapshot of its
        own, no older. Here (SQLite, a write, a read inside another transaction): :meth:`run`."""
        return self.run(op)

    def clock_marker_then(self, op: Op[R]) -> tuple[int, Hashable, R]:
        """:class:`ClockMarker`, then ``op`` as the read's last statement (:meth:`run_last`): a
        backend that can sends all of it at once (PostgreSQL: the settled clock, BEGIN, the marker
        taking the snapshot, ``op``'s one statement and COMMIT, one round trip). A forget's survey
        reads this way."""
        clock, marker = self.run(ClockMarker())
        return clock, marker, self.run_last(op)
