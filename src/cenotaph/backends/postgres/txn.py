"""The PostgreSQL transaction: the shared handlers of ``backends.sql`` in PostgreSQL's dialect
(lists as arrays, ``ORDER BY`` where a list has an order), and the statements only PostgreSQL
runs: many rows inserted as arrays zipped by ``unnest``, a slot's newest row by a lateral probe,
a transaction begun in the round trip of its first statement. Rows come back as tuples (bytea as
bytes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterable, Sequence
from functools import cache
from typing import Any, TypeVar, cast

import psycopg
from psycopg.sql import SQL, Composed

from .. import ops
from ..base import LineageRow, LostRace, RecordRow, ScopeKeyRow, lineage_values
from ..ops import Op, OpRunner
from ..sql import POSTGRES, SQLHandlers
from ..sql.columns import (
    L_COLS,
    LINEAGE_COLS,
    PLAIN_COLUMNS,
    R_COLS,
    RECORD_COLS,
    WRAPPED_TABLES,
    lineage_row,
    record_row,
)
from ..sql.handlers import (
    AUDIT_TAIL,
    LINEAGE_TOKENS,
    META,
    SAMPLE_ROWS,
    SAMPLE_ROWS_IDS,
    SUBJECT_ROWS,
    TAKERS_OF,
    TAKERS_OF_IDS,
    WRITTEN_SINCE,
    audit_tail_of,
    sample_rows_of,
    scope_chain,
    scope_rows_of,
    subject_rows_of,
    subtree_rows,
    takers_of,
    token_pairs_of,
)
from .marker import BUMP, SUM
from .record_write import (
    BEGIN,
    LINEAGE_TYPES,
    RECORD_TYPES,
    LockKeys,
    begin_answers,
    begin_statement,
    record_statement,
    slot_arrays,
    subject_tokens,
    write_shape,
)

__all__ = ["Connection", "PostgresTxn"]

R = TypeVar("R")
Connection = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]
Query = str | SQL | Composed
Params = Sequence[Any] | dict[str, Any] | None  # None: a statement sent whole (``record_write``)
_RECONNECTS = 4  # a pool's worth of stale connections after a server restart

# records rows of a list of ids, found through their lineage rows (records are keyed by version alone)
_BY_IDS = "version IN (SELECT version FROM lineage WHERE record_id = ANY(%s::text[]))"
# a key's rows in a few scopes with their lineage rows, and the change marker, in one snapshot
# (one row of NULLs beside the marker when no scope holds the key)
_KEY_RECORDS = (
    f"SELECT m.value, {R_COLS}, {L_COLS} FROM ({SUM}) AS m(value) LEFT JOIN ("
    "unnest(%s::bytea[]) AS s(scope_token) CROSS JOIN LATERAL "
    "(SELECT * FROM lineage n WHERE n.scope_token = s.scope_token AND n.key_token = %s "
    "ORDER BY n.version DESC LIMIT 1) AS l JOIN records r ON r.version = l.version) ON true"
)
# the counters with the clock read from its sequence (schema 3: the 'clock' row is not kept)
_META_ALL = "SELECT name, value FROM counters()"
_RESERVE = "SELECT reserve_versions(%s, %s)"
_SETTLED = "SELECT clock_settled()"
# each slot's record row (schema 5's slot_records: a slot's row is its newest version's)
_RECORDS_IN_SLOTS = "SELECT * FROM slot_records(%s::bytea[], %s::bytea[]) ORDER BY version"
# a write transaction's lock_timeout and advisory locks (schema 5's lock_write; keys from
# ``backend.lock_keys``); a record write sends write_begin instead (``record_write``)
_LOCK_WRITE = "SELECT lock_write(%b::bigint[], %b::boolean[], %b::integer)"
_DELETE_RECORDS = f"DELETE FROM records WHERE {_BY_IDS}"
_MISSING = object()
_PK_TYPES = {"records": "bigint", "lineage": "text", "scopes": "bytea", "subjects": "bytea"}
# every column kept in plain, as SQLite's list names them (its schema text has no table here:
# PostgreSQL keeps the schema in its catalogs, which hold no row of ours)
_PLAIN = tuple((t, c) for t, c in PLAIN_COLUMNS if not t.startswith("sqlite_"))
_PLAIN_HOLDS = "SELECT " + " OR ".join(
    f"EXISTS (SELECT 1 FROM {t} WHERE position(%(needle)s::bytea IN convert_to({c}, 'UTF8')) > 0)"
    for t, c in _PLAIN
)


@cache
def _pairs_delete_sql(table: str, first: str, second: str, first_type: str) -> str:
    return (
        f"DELETE FROM {table} WHERE ({first}, {second}) IN "
        f"(SELECT * FROM unnest(%s::{first_type}[], %s::text[]))"
    )


@cache
def _unnest_insert_sql(table: str, columns: str, types: tuple[str, ...], tail: str = "") -> str:
    """One INSERT of many rows: a typed array per column (sent binary), zipped back into rows by ``unnest``."""
    arrays = ", ".join(f"%b::{t}[]" for t in types)  # binary: text arrays of bytea cost more than a row each
    return f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({arrays}){tail}"


@cache
def _row_insert_sql(table: str, columns: str, types: tuple[str, ...], tail: str = "") -> str:
    """One INSERT of one row, each value a typed parameter (sent binary): a lone row's values
    cost the driver far less as scalars than as arrays of one element each."""
    values = ", ".join(f"%b::{t}" for t in types)
    return f"INSERT INTO {table} ({columns}) VALUES ({values}){tail}"


_NOTHING = " ON CONFLICT DO NOTHING"


def _first(cursor: Cursor) -> int:
    row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def _meta_value(cursor: Cursor) -> int | None:
    row = cursor.fetchone()
    return None if row is None else int(row[0])


@cache
def _list_in(text: str, column: str, sql_type: str = "text") -> str:
    """A shared statement of one ``{In}`` list (record ids unless ``sql_type`` says), as one
    array parameter."""
    return POSTGRES.sql(text.format(In=POSTGRES.any_of(column, sql_type, 1)))


def _unchanged_by(read: Op[Any], write: Op[Any]) -> bool:
    """Is ``read``'s result, read ahead, still current after this transaction runs ``write``?
    Only for the reads no other write of the store changes: the audit log's tail (changed only
    by an appended entry), a meta value (only by setting or advancing that name) and the
    consumers' takes (only by a take's registration, store-wide)."""
    if isinstance(read, ops.AuditTail):
        return not isinstance(write, ops.AppendAudit)
    if isinstance(read, ops.TakersOf):
        return not isinstance(write, ops.InsertTakes)
    if isinstance(read, ops.Meta):
        return not (isinstance(write, ops.SetMeta | ops.Advance) and write.name == read.name)
    return False


def _subject_pairs(lineage: Iterable[tuple[bytes, str]]) -> tuple[list[bytes], list[str]]:
    """(subject tokens, record ids): one pair per token of each ``(tokens, record id)``."""
    tokens: list[bytes] = []
    ids: list[str] = []
    for packed, record_id in lineage:
        split = subject_tokens(packed)
        tokens += split
        ids += [record_id] * len(split)
    return tokens, ids


def _sync_without_waiting(pipeline: psycopg.Pipeline) -> None:
    """Queue a Sync in ``pipeline`` (ending the implicit transaction of what was sent before it)
    without waiting for the results so far, so what follows goes in the same round trip.
    ``Pipeline.sync`` also waits; psycopg queues a Sync without waiting only inside (3.1-3.3:
    ``_enqueue_sync``), so this falls back to the waiting one where that is missing: one round
    trip more, never a different answer (``tests/postgres/test_round_trips.py`` counts them)."""
    enqueue = getattr(pipeline, "_enqueue_sync", None)
    if callable(enqueue):
        enqueue()
    else:  # pragma: no cover - a psycopg without it
        pipeline.sync()


class PostgresTxn(SQLHandlers, OpRunner):
    """A transaction on one pooled connection: the shared handlers (``backends.sql``) in
    PostgreSQL's dialect, and the few whose SQL is PostgreSQL's own."""

    _d = POSTGRES

    def __init__(
        self,
        conn: Connection,
        *,
        commits: bool = True,
        begin: str | None = None,
        reconnect: Callable[[Connection], Connection] | None = None,
        marker_of: Callable[[int], int] = int,
        ahead: Sequence[tuple[Op[Any], Any]] = (),
        repeatable: bool = False,
        clock: int | None = None,
        store_wide: bool = True,
        ends: bool = False,
    ) -> None:
        self._c = conn
        self._store_wide = store_wide  # a write excluding every other (else: its target locks)
        # one snapshot for every statement (a read), and the settled clock read before it began
        self._repeatable = repeatable
        self._clock = clock
        # results of operations sent with BEGIN (``Backend.write``'s ``ahead``), until a write
        self._ahead = list(ahead)
        # statements whose result nobody reads, sent with the next statement (or COMMIT)
        self._deferred: list[tuple[Query, Params]] = []
        self._reserved = -1  # the last version this transaction reserved (ops.Reserve)
        self._commits = commits
        self._accept_writes(commits)
        self._after: list[Callable[[], None]] = []
        # a read's BEGIN, sent in one round trip with its first statement (a read that runs
        # none sends nothing); ``reconnect`` swaps a connection found broken then for another
        self._begin = begin
        self._reconnect = reconnect
        self._marker_of = marker_of  # the change marker of a snapshot at a counter value
        # ``clock_marker_then``: the read's first statement sends the settled clock and the
        # marker before it (the marker's counter, as read then)
        self._led = False
        self._led_marker = 0
        # a read of its own (not one inside another transaction) may end itself early: its
        # closing statement (:meth:`run_last`) carries the COMMIT in its round trip
        self._ends = ends and not commits
        self._closing = False
        self._ended = False
        # a write stays in one pipeline from its first statement after BEGIN until its COMMIT
        # (:meth:`_piped`): a statement whose answer nobody reads (an INSERT, an UPDATE whose count
        # is not asked for) waits for none, and its answer comes back with the next statement
        # that is read, or with the COMMIT
        self._pipe: contextlib.AbstractContextManager[psycopg.Pipeline] | None = None
        self._pipeline: psycopg.Pipeline | None = None

    @property
    def connection(self) -> Connection:
        return self._c

    @property
    def commits(self) -> bool:
        """Is this a write transaction (one that commits what it does)?"""
        return self._commits

    @property
    def begun(self) -> bool:
        """Is the transaction open on the server (begun, or begun before this object, and not
        ended by its closing statement)?"""
        return self._begin is None and not self._ended

    def run_last(self, op: Op[R]) -> R:
        """``op`` as this read's closing statement: its COMMIT goes in the same round trip (with
        its BEGIN too, if it is the first), so a read of one statement is one round trip. A
        statement after it (a key no row brought, a second batch of search hits) runs in a
        snapshot of its own, no older: what it finds can only be more forgotten (tombstones and
        destroyed keys are never undone), never less. Inside another transaction, or in a write,
        it is :meth:`run`. Only the operation's first statement closes: give it one of a single
        statement."""
        if not self._ends or self._ended:
            return self.run(op)
        self._closing = True
        try:
            return self.run(op)
        finally:
            self._closing = False

    # -- what is sent ahead, and what is sent later ----------------------------------------
    @staticmethod
    def _begin_write(
        conn: Connection, locks: LockKeys, timeout_ms: int, ahead: Sequence[Op[Any]]
    ) -> list[tuple[Op[Any], Any]]:
        """Begin a write transaction on ``conn`` holding ``locks``, and read ``ahead`` in it: one
        round trip. A record write's is one message (``record_write``: BEGIN and write_begin);
        any other is a pipeline of BEGIN, lock_write and a statement each (:meth:`_send_ahead`)."""
        shape = write_shape(ahead)
        if shape is not None:
            cursor = conn.execute(begin_statement(locks, timeout_ms, shape), prepare=False)
            cursor.nextset()  # past BEGIN's result
            return begin_answers(cursor, ahead)
        with conn.pipeline():
            conn.execute(BEGIN)
            conn.execute(_LOCK_WRITE, (*locks, timeout_ms))
            sent = [(op, PostgresTxn._send_ahead(conn, op)) for op in ahead]
        return [(op, read(cursor)) for op, (cursor, read) in sent if cursor is not None]

    @staticmethod
    def _send_ahead(conn: Connection, op: Op[Any]) -> tuple[Cursor | None, Callable[[Cursor], Any]]:
        """Send ``op``'s statement on ``conn`` (in its pipeline) if it is one a write reads
        first: the cursor and how its result is read; (None, ...) for any other operation."""
        if isinstance(op, ops.Marker):  # the stripes' sum: made a marker when it is used
            return conn.execute(SUM), _first
        if isinstance(op, ops.MetaAll):
            return conn.execute(_META_ALL), lambda c: {str(n): int(v) for n, v in c.fetchall()}
        if isinstance(op, ops.Reserve):
            return conn.execute(_RESERVE, (op.count, op.floor)), _first
        if isinstance(op, ops.RecordsInSlots):
            args = slot_arrays(op.slots)
            return conn.execute(_RECORDS_IN_SLOTS, args), lambda c: [record_row(r) for r in c.fetchall()]
        if isinstance(op, ops.WrittenSince):  # the shared handlers' statements and rows
            cursor = conn.execute(POSTGRES.sql(WRITTEN_SINCE), (op.version, op.version))
            return cursor, lambda c: [lineage_row(r) for r in c.fetchall()]
        if isinstance(op, ops.AuditTail):
            return conn.execute(POSTGRES.sql(AUDIT_TAIL)), lambda c: audit_tail_of(c.fetchone())
        if isinstance(op, ops.Meta):
            return conn.execute(POSTGRES.sql(META), (op.name,)), _meta_value
        if isinstance(op, ops.SampleRows):  # a compliance forget's records, sampled
            ids = list(dict.fromkeys(op.ids))
            return conn.execute(_list_in(SAMPLE_ROWS, SAMPLE_ROWS_IDS), (ids,)), lambda c: sample_rows_of(c)
        if isinstance(op, ops.ScopeChainRows):  # the scope keys opening a forget's sampled records
            return conn.execute(POSTGRES.sql(scope_chain(POSTGRES)), (op.token,)), lambda c: scope_rows_of(c)
        if isinstance(op, ops.SubjectRows):  # the subject keys opening a forget's sampled records
            cursor = conn.execute(_list_in(SUBJECT_ROWS, "token", "bytea"), ([bytes(t) for t in op.tokens],))
            return cursor, lambda c: subject_rows_of(c)
        if isinstance(op, ops.SubtreeRows):  # the scope keys a compliance scope forget destroys
            return conn.execute(POSTGRES.sql(subtree_rows(POSTGRES)), (op.token,)), scope_rows_of
        if isinstance(op, ops.LineageTokens):  # where the keys only a forget's records use are found
            query = _list_in(LINEAGE_TOKENS, "record_id") + POSTGRES.order("version")
            return conn.execute(query, (list(op.ids),)), token_pairs_of
        if isinstance(op, ops.TakersOf):  # the consumers a compliance forget asks
            cursor = conn.execute(_list_in(TAKERS_OF, TAKERS_OF_IDS), (list(op.record_ids),))
            return cursor, lambda c: takers_of(c)
        return None, lambda c: None

    def run(self, op: Op[R]) -> R:
        if self._ahead:
            found = self._from_ahead(op)
            if found is not _MISSING:
                return cast(R, found)
            if op.writes and not isinstance(op, ops.Reserve):
                # rows may change from here on: nothing read ahead is current but what ``op``
                # cannot change (the audit log's tail, a meta value it does not set)
                self._ahead = [(o, r) for o, r in self._ahead if _unchanged_by(o, op)]
        return super().run(op)

    def _from_ahead(self, op: Op[Any]) -> Any:
        """``op``'s result as read with BEGIN, or _MISSING (each is used once; the scopes and
        subjects rows read ahead answer every read of the rows they hold, until the first
        write)."""
        if isinstance(op, ops.ScopeChainRows | ops.ScopeRows | ops.SubtreeTokens):
            return self._from_scope_rows(op)
        for i, (sent, result) in enumerate(self._ahead):
            if type(sent) is not type(op):  # every answer below is one of the same operation
                continue
            if isinstance(op, ops.RecordsInSlots) and isinstance(sent, ops.RecordsInSlots):
                wanted = {(bytes(a), bytes(b)) for a, b in op.slots}
                if wanted <= {(bytes(a), bytes(b)) for a, b in sent.slots}:
                    del self._ahead[i]
                    return [r for r in result if (bytes(r.scope_token), bytes(r.key_token)) in wanted]
            elif isinstance(op, ops.SubjectRows) and isinstance(sent, ops.SubjectRows):
                tokens = {bytes(t) for t in op.tokens}
                if tokens <= {bytes(t) for t in sent.tokens}:  # kept, like the scopes rows
                    return {t: row for t, row in result.items() if t in tokens}
            elif isinstance(op, ops.Reserve) and isinstance(sent, ops.Reserve):
                if op.count == sent.count and result >= op.floor:
                    del self._ahead[i]
                    self._reserved = max(self._reserved, result + op.count)
                    return result
            elif op == sent:
                del self._ahead[i]
                return self._marker_of(result) if isinstance(op, ops.Marker) else result
        return _MISSING

    def _from_scope_rows(self, op: ops.ScopeChainRows | ops.ScopeRows | ops.SubtreeTokens) -> Any:
        """``op``'s answer from the scopes rows read ahead (a scope's chain, a subtree), where
        they hold all of it, or _MISSING. As current as a read now: they were read under the
        transaction's locks, and a scope row changes only by a forget destroying its key or in a
        store-wide transaction (a rotation's rewrap, a reauthorization's new key), both of which
        those locks exclude; a row added since is not among them, so its read goes to the
        server."""
        if isinstance(op, ops.SubtreeTokens):
            subtree = next((r for o, r in self._ahead if o == ops.SubtreeRows(op.token)), None)
            return _MISSING if subtree is None else list(subtree)
        known: dict[bytes, ScopeKeyRow] = {}
        for sent, result in self._ahead:
            if isinstance(sent, ops.ScopeChainRows | ops.SubtreeRows):
                known.update(result)
        if isinstance(op, ops.ScopeRows):
            tokens = [bytes(t) for t in op.tokens]
            return {t: known[t] for t in tokens} if all(t in known for t in tokens) else _MISSING
        chain: dict[bytes, ScopeKeyRow] = {}
        current: bytes | None = bytes(op.token)
        while current is not None and current not in chain:  # a tampered cycle ends
            row = known.get(current)
            if row is None:
                return _MISSING
            chain[current] = row
            current = None if row.parent is None else bytes(row.parent)
        return chain

    def _send(self, sql: Query, args: Params = ()) -> None:
        """``sql``, whose result nobody reads, sent with the next statement of the transaction
        (a write's inserts go with its COMMIT: one round trip)."""
        if not self._commits:
            self._x(sql, args)
            return
        self._deferred.append((sql, args))

    def _flush(self, then: tuple[Query, Params] | None = None) -> Cursor | None:
        """Send the deferred statements, and ``then``, in one pipeline (one round trip)."""
        deferred, self._deferred = self._deferred, []
        cursor = None
        with contextlib.nullcontext() if self._pipe is not None else self._c.pipeline():
            for sql, args in deferred:
                self._c.execute(sql, args)
            if then is not None:
                cursor = self._c.execute(*then)
        return cursor

    def _commit(self) -> None:
        """The deferred statements, the change marker's bump and COMMIT: one round trip. A write
        whose statements all went whole (``record_write``) and none in its pipeline yet sends
        them as one message."""
        if self._commits:
            self._deferred.append((BUMP, None))
            if self._pipe is None and all(args is None for _, args in self._deferred):
                whole = [str(sql) for sql, _ in self._deferred]
                self._deferred = []
                self._c.execute("; ".join([*whole, "COMMIT"]), prepare=False)
                return
        self._flush(("COMMIT", ()))
        if self._pipe is not None:
            pipe, self._pipe, self._pipeline = self._pipe, None, None
            pipe.__exit__(None, None, None)  # sends what waits, and raises the first refusal

    def _abandon(self) -> None:
        """Leave a write's pipeline after a failure, dropping what it left unread (a ROLLBACK
        follows)."""
        if self._pipe is not None:
            pipe, self._pipe, self._pipeline = self._pipe, None, None
            with contextlib.suppress(psycopg.Error):
                pipe.__exit__(None, None, None)

    def _piped(self) -> None:
        """Enter a write's pipeline, if it has not yet: it lasts until the COMMIT. (A write
        whose only statements are sent whole at its COMMIT never enters one: ``_commit``.)"""
        if self._commits and self._pipe is None:
            self._pipe = self._c.pipeline()
            self._pipeline = self._pipe.__enter__()

    def _settle(self) -> None:
        """Wait for every statement sent so far (a row count is known only then; a refused one
        raises here)."""
        if self._pipeline is not None:
            self._pipeline.sync()

    def _x(self, sql: Query, args: Params = ()) -> Cursor:
        """``sql`` on the transaction's connection, beginning the transaction first if it has not
        (and ending it with ``sql`` if it is the closing statement: a read's, never a write's)."""
        closing, self._closing = self._closing, False
        self._piped()
        if self._deferred:
            cursor = self._flush((sql, args))
            assert cursor is not None
            return cursor
        if self._begin is None and not closing:
            return self._c.execute(sql, args)  # in the transaction, or (ended) a snapshot of its own
        led, self._led = self._led, False
        if not led:
            return self._opening([(sql, args)], settled=False, closing=closing)[1][0]
        # the settled clock first, and the marker taking the snapshot (``clock_marker_then``)
        clock, (marker, cursor) = self._opening([(SUM, ()), (sql, args)], settled=True, closing=closing)
        assert clock is not None
        self._clock, self._led_marker = clock, _first(marker)
        return cursor

    def _opening(
        self, statements: Sequence[tuple[Query, Params]], *, settled: bool, closing: bool
    ) -> tuple[int | None, list[Cursor]]:
        """``statements`` in one pipeline, after this read's BEGIN if it has not begun (and the
        settled clock before it, ``settled``), before its COMMIT (``closing``): one round trip.
        The clock (if read) and the statements' cursors. A connection found broken before the
        transaction sent anything that counted is swapped for another and all of it sent again."""
        begin, self._begin = self._begin, None
        if closing:
            self._ended = True
        for attempt in range(_RECONNECTS + 1):
            try:
                with self._c.pipeline() as pipeline:
                    clock = self._c.execute(_SETTLED) if settled else None
                    if clock is not None:
                        _sync_without_waiting(pipeline)  # its own implicit transaction, ended before BEGIN
                    if begin is not None:
                        self._c.execute(begin)
                    # the snapshot is taken by the first statement, not by BEGIN
                    cursors = [self._c.execute(sql, args) for sql, args in statements]
                    if closing:
                        self._c.execute("COMMIT")
                return (None if clock is None else _first(clock)), cursors
            except psycopg.OperationalError:
                if begin is None or not self._c.broken or self._reconnect is None or attempt == _RECONNECTS:
                    raise
                self._c = self._reconnect(self._c)
        raise AssertionError("unreachable")  # pragma: no cover

    def _start(self) -> None:
        """Begin on the server now (a transaction nested in this one must share its snapshot)."""
        if self._begin is not None:
            self._x("SELECT 1")

    # -- savepoints (a group commit undoes one refused write, keeping the rest) ------
    def _one(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> Any:
        row = self._x(sql, args).fetchone()
        return None if row is None else row[0]

    def _rows(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        return self._x(sql, args).fetchall()

    def _count(self, sql: str, args: Sequence[Any]) -> int:
        cursor = self._x(sql, args)
        self._settle()
        return cursor.rowcount

    def _changed(self, text: str, args: Sequence[Any] = ()) -> int:
        return self._count(self._d.sql(text), args)

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """``sql`` once per row (pipelined by psycopg); the rows it affected in all."""
        listed = list(rows)
        if not listed:
            return 0
        self._start()
        self._piped()
        if self._deferred:
            self._flush()
        cursor = self._c.cursor()
        cursor.executemany(sql, listed)
        self._settle()
        return cursor.rowcount

    def _insert_rows(
        self, table: str, columns: str, types: tuple[str, ...], rows: Iterable[Sequence[Any]]
    ) -> None:
        self._insert(table, columns, types, rows, _NOTHING)

    def _delete_pairs(
        self, table: str, first: tuple[str, str], second: str, pairs: Sequence[tuple[Any, str]]
    ) -> int:
        sql = _pairs_delete_sql(table, first[0], second, first[1])
        return self._count(sql, ([a for a, _ in pairs], [b for _, b in pairs]))

    def _insert(
        self, table: str, columns: str, types: tuple[str, ...], rows: Iterable[Sequence[Any]], tail: str = ""
    ) -> None:
        """``rows`` into ``table`` in one statement (none when there are no rows)."""
        listed = rows if isinstance(rows, list) else list(rows)
        if len(listed) == 1:
            row = listed[0]
            if len(row) != len(types):
                raise ValueError(f"{table}: rows of {len(row)} columns, {len(types)} types")
            self._send(_row_insert_sql(table, columns, types, tail), tuple(row))
            return
        arrays = [list(column) for column in zip(*listed, strict=True)]  # the rows' columns
        if arrays:
            if len(arrays) != len(types):
                raise ValueError(f"{table}: rows of {len(arrays)} columns, {len(types)} types")
            self._send(_unnest_insert_sql(table, columns, types, tail), arrays)

    # -- clock and change marker -----------------------------------------------------
    def marker(self) -> int:
        """The change marker as of this snapshot (see ``marker.OwnCommits``)."""
        return self._marker_of(int(self._one(SUM)))

    def count(self, name: str) -> int:
        """A counter; the clock is the settled one (schema 3's ``clock_settled``): every version
        up to it is committed, and seen by this transaction's reads, or never will be."""
        if name != "clock":
            return super().count(name)
        if self._clock is not None:
            return self._clock
        if self._begin is not None:  # a read: settled first, its snapshot begun after, one round trip
            self._clock, _ = self._settled_then_begin()
            return self._clock
        settled = _first(self._x(_SETTLED))
        if self._repeatable:
            # a snapshot begun before: what it sees of versions up to this is not promised (the
            # store's reads that rely on the clock -- a forget's survey, the index catching up --
            # read it first); one value for the whole snapshot all the same
            self._clock = settled
        # READ COMMITTED: each later statement sees every version up to it
        return settled

    def clock_marker(self) -> tuple[int, int]:
        """The settled clock and this snapshot's change marker: in a read not begun yet, one
        round trip (the clock, then BEGIN and the marker, which takes the snapshot)."""
        if self._begin is not None and self._clock is None:
            self._clock, cursor = self._settled_then_begin(SUM)
            return self._clock, self._marker_of(int(_first(cursor)))
        return self.count("clock"), self.marker()

    def clock_marker_then(self, op: Op[R]) -> tuple[int, Hashable, R]:
        """The settled clock, this snapshot's change marker and ``op`` as the read's closing
        statement: in a read of its own not begun yet, one round trip (the clock; BEGIN, the
        marker taking the snapshot, ``op``'s statement; COMMIT). Give it an operation of one
        statement."""
        if self._begin is None or self._clock is not None or not self._ends:
            clock, marker = self.clock_marker()
            return clock, marker, self.run_last(op)
        self._led = True  # the statement that begins the read sends the clock and the marker first
        try:
            result = self.run_last(op)
        finally:
            led, self._led = self._led, False
        if led:  # ``op`` sent no statement: nothing began
            clock, marker = self.clock_marker()
            return clock, marker, result
        assert self._clock is not None
        return self._clock, self._marker_of(self._led_marker), result

    def _settled_then_begin(self, first: Query = "SELECT 1") -> tuple[int, Cursor]:
        """The settled clock, then this read's BEGIN and ``first``, the statement taking its
        snapshot (and its cursor), in one round trip."""
        assert self._begin is not None
        clock, (taken,) = self._opening([(first, ())], settled=True, closing=False)
        assert clock is not None
        return clock, taken

    def meta_all(self) -> dict[str, int]:
        return {str(n): int(v) for n, v in self._rows(_META_ALL)}

    def reserve(self, count: int, floor: int = 0) -> int:
        # a block of the sequence no other transaction gets (schema 3's reserve_versions)
        last = int(self._one(_RESERVE, (count, floor)))
        self._reserved = max(self._reserved, last + count)
        return last

    def advance(self, name: str, to: int | None = None) -> None:
        if name != "clock":
            super().advance(name, to)
        elif to is None:
            self.reserve(1)
        elif to > self._reserved:  # not a version this transaction reserved: never behind it
            self.reserve(0, to)

    # -- tombstones ------------------------------------------------------------------
    # -- keys ------------------------------------------------------------------------
    # -- records ---------------------------------------------------------------------
    def records_in_slots(self, slots: Sequence[tuple[bytes, bytes]]) -> list[RecordRow]:
        # one statement for every slot: a lateral probe of lineage_slot each
        return [record_row(row) for row in self._rows(_RECORDS_IN_SLOTS, slot_arrays(slots))]

    # -- key rows: a write made them first, or another did (target locks do not exclude that)
    def insert_scopes(self, rows: Iterable[ScopeKeyRow]) -> None:
        listed = [(r.token, r.parent, r.wrapped, r.epoch) for r in rows]
        types = ("bytea", "bytea", "bytea", "bigint")
        self._insert_new("scopes", "token, parent, wrapped, epoch", types, listed)

    def insert_subjects(self, rows: Iterable[tuple[bytes, bytes, int]]) -> None:
        self._insert_new("subjects", "token, wrapped, epoch", ("bytea", "bytea", "bigint"), list(rows))

    def _insert_new(
        self, table: str, columns: str, types: tuple[str, ...], rows: list[tuple[Any, ...]]
    ) -> None:
        """``rows`` (new keys, each keyed by its first column), or LostRace if another
        transaction made one of them first (its key, not ours, is the one)."""
        if not rows:
            return
        if self._store_wide:  # no other write meanwhile: as everywhere else
            self._insert(table, columns, types, rows, _NOTHING)
            return
        arrays = [list(column) for column in zip(*rows, strict=True)]
        sql = _unnest_insert_sql(table, columns, types, " ON CONFLICT DO NOTHING RETURNING 1")
        if len(self._rows(sql, arrays)) != len(rows):
            raise LostRace(f"another write made a {table[:-1]} key first; the write runs again")

    def replace_scope_key(self, token: bytes, wrapped: bytes, epoch: int) -> None:
        self._replace_key("scopes", token, wrapped, epoch)

    def replace_subject_key(self, token: bytes, wrapped: bytes, epoch: int) -> None:
        self._replace_key("subjects", token, wrapped, epoch)

    def _replace_key(self, table: str, token: bytes, wrapped: bytes, epoch: int) -> None:
        """A new key for a destroyed one, or (under target locks) LostRace if another transaction
        replaced it first. Store-wide, a key whose KEK epoch was destroyed is replaced too."""
        sql = f"UPDATE {table} SET wrapped=%s, epoch=%s, destroyed_version=NULL WHERE token=%s"
        if self._store_wide:
            self._x(sql, (wrapped, epoch, token))
        elif self._count(sql + " AND wrapped IS NULL", (wrapped, epoch, token)) != 1:
            raise LostRace(f"another write replaced a destroyed {table[:-1]} key first; the write runs again")

    def delete_records(self, ids: Sequence[str]) -> None:
        if ids:
            self._send(_DELETE_RECORDS, (list(ids),))

    def key_records(
        self, scope_tokens: Sequence[bytes], key_token: bytes
    ) -> tuple[int, list[tuple[RecordRow, LineageRow | None]]]:
        """The rows (and lineage rows) of ``key`` in each of a few scopes, and the change marker
        of the snapshot they were read in: one statement."""
        rows = self._rows(_KEY_RECORDS, (list(scope_tokens), key_token))
        found = [
            (RecordRow(*row[1:11]), None if row[11] is None else lineage_row(row[11:]))
            for row in rows
            if row[1] is not None
        ]
        return self._marker_of(int(rows[0][0])), found

    def insert_records(
        self, rows: Sequence[RecordRow], lineage: Sequence[LineageRow], replaced: Sequence[str] = ()
    ) -> None:
        self._start()
        # deferred: they go in one round trip with whatever the transaction sends next (its COMMIT)
        if len(rows) == 1 and len(lineage) == 1 and len(replaced) <= 1 and not lineage[0].sources:
            self._send(record_statement(rows[0], lineage[0], replaced), None)
            return
        self.delete_records(replaced)
        # one pipeline, one round trip, one statement a table; a RecordRow is a tuple in RECORD_COLS
        # order (expires_at made a float: an array holds one type)
        tokens, subject_ids = _subject_pairs((x.subject_tokens, x.record_id) for x in lineage)
        records = (
            r
            if r.expires_at is None or type(r.expires_at) is float
            else r._replace(expires_at=float(r.expires_at))
            for r in rows
        )
        self._insert("records", RECORD_COLS, RECORD_TYPES, records)
        self._insert("lineage", LINEAGE_COLS, LINEAGE_TYPES, map(lineage_values, lineage))
        if tokens:
            self._send(
                "INSERT INTO record_subjects (subject_token, record_id) "
                "SELECT * FROM unnest(%s::bytea[], %s::text[]) ON CONFLICT DO NOTHING",
                (tokens, subject_ids),
            )
        self._insert(
            "derivations",
            "source_id, derived_id",
            ("text", "text"),
            ((src, x.record_id) for x in lineage for src in x.sources),
            _NOTHING,
        )

    # -- forgetting ------------------------------------------------------------------
    # -- what only a forget's records use, what of a target remains ---------------------
    def plaintext_holds(self, needle: bytes) -> bool:
        """Does ``needle`` occur in a column the store keeps in plain (ids, request rows, the audit
        log)? Such bytes are content-free bookkeeping by construction (W4)."""
        return bool(self._one(_PLAIN_HOLDS, {"needle": needle}))

    # -- purge -----------------------------------------------------------------------
    # -- key rotation and backups -------------------------------------------------------
    def rewrap(self, rows: Iterable[tuple[str, Any, bytes, int]]) -> None:
        listed = list(rows)
        for table, pk in WRAPPED_TABLES:
            mine = [(w, e, k) for t, k, w, e in listed if t == table]
            if mine:
                self._x(
                    f"UPDATE {table} t SET wrapped=u.w, epoch=u.e FROM "
                    f"unnest(%s::bytea[], %s::bigint[], %s::{_PK_TYPES[table]}[]) AS u(w, e, k) "
                    f"WHERE t.{pk} = u.k",
                    ([w for w, _, _ in mine], [e for _, e, _ in mine], [k for _, _, k in mine]),
                )

    # -- erasure requests and audit ----------------------------------------------------
