"""The PostgreSQL transaction: every statement of a store kept in PostgreSQL, over tokens and
ciphertext, with the handlers (names, parameters, results) of ``SQLiteTxn``: ``run(op)`` dispatches each
operation of ``backends.ops`` to the handler of its name.

Id and token lists go whole into one statement as arrays (``= ANY(%s::text[])``), not chunked
``IN (?, ...)`` lists; rows come back as tuples (bytea as bytes). Lists of records come back in
version order: PostgreSQL promises no order without ``ORDER BY``, where SQLite's rowid scans
happened to give one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache
from typing import Any

import psycopg
from psycopg.sql import SQL, Composed

from ..base import ErasureRow, LineageRow, RecordRow, ScopeKeyRow, lineage_values
from ..ops import OpRunner
from ..sqlite.backend import (
    _ERASURE_COLS,
    _LINEAGE_COLS,
    _PLAIN_COLUMNS,
    _R_COLS,
    _RECORD_COLS,
    _WRAPPED_TABLES,
    _lineage,
    _record,
)

__all__ = ["Connection", "PostgresTxn"]

Connection = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]
Query = str | SQL | Composed
Params = Sequence[Any] | dict[str, Any]
_RECONNECTS = 4  # a pool's worth of stale connections after a server restart

_L_COLS = ", ".join(f"l.{c.strip()}" for c in _LINEAGE_COLS.split(","))
_ERASURE_SELECT = (
    "SELECT "
    + ", ".join(f"e.{c.strip()}" for c in _ERASURE_COLS.split(","))
    + ", p.applied FROM erasures e LEFT JOIN erasure_progress p ON p.request_id = e.id"
)
_ERASURE_FIELDS = frozenset(c.strip() for c in _ERASURE_COLS.split(","))
# records rows of a list of ids, found through their lineage rows (records are keyed by version alone)
_BY_IDS = "version IN (SELECT version FROM lineage WHERE record_id = ANY(%s::text[]))"
# the newest lineage version of each (scope, key) slot, and its record row (a slot's record row,
# if any, is its newest version's: a write replaces the row it finds)
_SLOTS = (
    "unnest(%s::bytea[], %s::bytea[]) AS s(scope_token, key_token) CROSS JOIN LATERAL "
    "(SELECT * FROM lineage n WHERE n.scope_token = s.scope_token AND n.key_token = s.key_token "
    "ORDER BY n.version DESC LIMIT 1) AS l JOIN records r ON r.version = l.version"
)
# a key's rows in a few scopes with their lineage rows, and the change marker, in one snapshot
# (one row of NULLs beside the marker when no scope holds the key)
_KEY_RECORDS = (
    f"SELECT m.value, {_R_COLS}, {_L_COLS} FROM change_marker m LEFT JOIN ("
    "unnest(%s::bytea[]) AS s(scope_token) CROSS JOIN LATERAL "
    "(SELECT * FROM lineage n WHERE n.scope_token = s.scope_token AND n.key_token = %s "
    "ORDER BY n.version DESC LIMIT 1) AS l JOIN records r ON r.version = l.version) ON true"
)
_PK_TYPES = {"records": "bigint", "lineage": "text", "scopes": "bytea", "subjects": "bytea"}
# every column kept in plain, as SQLite's list names them (its schema text has no table here:
# PostgreSQL keeps the schema in its catalogs, which hold no row of ours)
_PLAIN = tuple((t, c) for t, c in _PLAIN_COLUMNS if not t.startswith("sqlite_"))
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


_NOTHING = " ON CONFLICT DO NOTHING"
# the PostgreSQL types of _RECORD_COLS and _LINEAGE_COLS, in their order
_RECORD_TYPES = ("text", "bytea", "bytea", "bigint", "float8", "bigint", "bytea", "bigint", "bytea", "bytea")
_LINEAGE_TYPES = (
    "text", "bytea", "bytea", "bigint", "bytea", "bigint", "bytea", "bytea", "text", "bigint", "bigint"
)  # fmt: skip


def _epochs_in_use(conn: Connection) -> set[int]:
    found: set[int] = set()
    for table, _ in (*_WRAPPED_TABLES, ("probe_keys", "request_id")):
        sql = f"SELECT DISTINCT epoch FROM {table} WHERE epoch IS NOT NULL AND wrapped IS NOT NULL"
        found.update(int(r[0]) for r in conn.execute(sql))  # a destroyed key needs no epoch
    return found


def _subject_pairs(lineage: Iterable[tuple[bytes, str]]) -> tuple[list[bytes], list[str]]:
    """(subject tokens, record ids): one pair per 32-byte token of each ``(tokens, record id)``."""
    tokens: list[bytes] = []
    ids: list[str] = []
    for packed, record_id in lineage:
        for i in range(0, len(packed), 32):
            tokens.append(bytes(packed[i : i + 32]))
            ids.append(record_id)
    return tokens, ids


class PostgresTxn(OpRunner):
    """A transaction on one pooled connection. Every handler is plain SQL over tokens and ciphertext."""

    def __init__(
        self,
        conn: Connection,
        *,
        commits: bool = True,
        begin: str | None = None,
        reconnect: Callable[[Connection], Connection] | None = None,
        marker_of: Callable[[int], int] = int,
    ) -> None:
        self._c = conn
        self._commits = commits
        self._accept_writes(commits)
        self._after: list[Callable[[], None]] = []
        # a read's BEGIN, sent in one round trip with its first statement (a read that runs
        # none sends nothing); ``reconnect`` swaps a connection found broken then for another
        self._begin = begin
        self._reconnect = reconnect
        self._marker_of = marker_of  # the change marker of a snapshot at a counter value

    @property
    def connection(self) -> Connection:
        return self._c

    @property
    def commits(self) -> bool:
        """Is this a write transaction (one that commits what it does)?"""
        return self._commits

    @property
    def begun(self) -> bool:
        """Has the transaction begun on the server (or was it begun before this object)?"""
        return self._begin is None

    def _x(self, sql: Query, args: Params = ()) -> Cursor:
        """``sql`` on the transaction's connection, beginning the transaction first if it has not."""
        if self._begin is None:
            return self._c.execute(sql, args)
        begin, self._begin = self._begin, None
        for attempt in range(_RECONNECTS + 1):
            try:
                with self._c.pipeline():
                    self._c.execute(begin)
                    cursor = self._c.execute(sql, args)
                return cursor
            except psycopg.OperationalError:
                # broken before this transaction sent anything that counted: another connection
                if not self._c.broken or self._reconnect is None or attempt == _RECONNECTS:
                    raise
                self._c = self._reconnect(self._c)
        raise AssertionError("unreachable")  # pragma: no cover

    def _start(self) -> None:
        """Begin on the server now (a transaction nested in this one must share its snapshot)."""
        if self._begin is not None:
            self._x("SELECT 1")

    def after_commit(self, action: Callable[[], None]) -> None:
        if not self._commits:  # a read never commits: the action would silently never run
            raise RuntimeError("after_commit needs a write transaction (backend.write())")
        self._after.append(action)

    # -- savepoints (a group commit undoes one refused write, keeping the rest) ------
    def savepoint(self) -> None:
        self._x("SAVEPOINT cenotaph_write")

    def release_savepoint(self) -> None:
        self._x("RELEASE SAVEPOINT cenotaph_write")

    def rollback_to_savepoint(self) -> None:
        self._x("ROLLBACK TO SAVEPOINT cenotaph_write")
        self._x("RELEASE SAVEPOINT cenotaph_write")

    def _one(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> Any:
        row = self._x(sql, args).fetchone()
        return None if row is None else row[0]

    def _rows(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        return self._x(sql, args).fetchall()

    def _count(self, sql: str, args: Sequence[Any]) -> int:
        return self._x(sql, args).rowcount

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """``sql`` once per row (pipelined by psycopg); the rows it affected in all."""
        listed = list(rows)
        if not listed:
            return 0
        self._start()
        cursor = self._c.cursor()
        cursor.executemany(sql, listed)
        return cursor.rowcount

    def _insert(
        self, table: str, columns: str, types: tuple[str, ...], rows: Iterable[Sequence[Any]], tail: str = ""
    ) -> None:
        """``rows`` into ``table`` in one statement (none when there are no rows)."""
        arrays = [list(column) for column in zip(*rows, strict=True)]  # the rows' columns
        if arrays:
            if len(arrays) != len(types):
                raise ValueError(f"{table}: rows of {len(arrays)} columns, {len(types)} types")
            self._x(_unnest_insert_sql(table, columns, types, tail), arrays)

    # -- clock and change marker -----------------------------------------------------
    def marker(self) -> int:
        """The change marker as of this snapshot (see ``marker.OwnCommits``)."""
        return self._marker_of(int(self._one("SELECT value FROM change_marker")))

    def clock(self) -> int:
        return int(self._one("SELECT value FROM meta WHERE name='clock'"))

    def set_clock(self, version: int) -> None:
        self._x("UPDATE meta SET value=%s WHERE name='clock' AND value<%s", (version, version))

    def meta(self, name: str) -> int | None:
        value = self._one("SELECT value FROM meta WHERE name=%s", (name,))
        return None if value is None else int(value)

    def set_meta(self, name: str, value: int) -> None:
        self._x(
            "INSERT INTO meta (name, value) VALUES (%s,%s) ON CONFLICT (name) DO UPDATE SET value=excluded.value",
            (name, value),
        )

    def meta_all(self) -> dict[str, int]:
        return {str(n): int(v) for n, v in self._rows("SELECT name, value FROM meta")}

    def forget_epoch(self) -> int:
        return int(self._one("SELECT value FROM meta WHERE name='forget_epoch'"))

    def bump_forget_epoch(self) -> None:
        self._x("UPDATE meta SET value=value+1 WHERE name='forget_epoch'")

    # -- tombstones ------------------------------------------------------------------
    def _max_by_target(self, table: str, targets: Sequence[bytes]) -> dict[bytes, int]:
        sql = f"SELECT target, max(version) FROM {table} WHERE target = ANY(%s::bytea[]) GROUP BY target"
        return {bytes(t): int(v) for t, v in self._rows(sql, (list(targets),))}

    def tombstone_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]:
        return self._max_by_target("tombstones", targets)

    def lift_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]:
        return self._max_by_target("lifts", targets)

    def all_lifts(self) -> list[tuple[bytes, int]]:
        rows = self._rows("SELECT target, version FROM lifts ORDER BY target, version")
        return [(bytes(t), int(v)) for t, v in rows]

    def all_reauths(self) -> list[tuple[bytes, str, bytes, int, int | None, bytes | None]]:
        sql = (
            "SELECT digest, kind, target, issued_version, consumed_version, subject FROM reauth_tokens "
            "ORDER BY digest"
        )
        return [
            (
                bytes(d),
                str(k),
                bytes(t),
                int(v),
                None if c is None else int(c),
                None if s is None else bytes(s),
            )
            for d, k, t, v, c, s in self._rows(sql)
        ]

    def insert_tombstones(self, rows: Iterable[tuple[bytes, int, str, str]]) -> None:
        self._insert(
            "tombstones",
            "target, version, kind, request_id",
            ("bytea", "bigint", "text", "text"),
            rows,
            _NOTHING,
        )

    def insert_lift(self, target: bytes, version: int) -> None:
        self._x(
            "INSERT INTO lifts (target, version) VALUES (%s,%s) ON CONFLICT DO NOTHING", (target, version)
        )

    def insert_reauth(
        self, digest: bytes, kind: str, target: bytes, version: int, subject: bytes | None = None
    ) -> None:
        self._x(
            "INSERT INTO reauth_tokens (digest, kind, target, issued_version, subject) VALUES (%s,%s,%s,%s,%s)",
            (digest, kind, target, version, subject),
        )

    def reauth(self, digest: bytes) -> tuple[str, bytes, int, int | None, bytes | None] | None:
        row = self._x(
            "SELECT kind, target, issued_version, consumed_version, subject FROM reauth_tokens WHERE digest=%s",
            (digest,),
        ).fetchone()
        if row is None:
            return None
        return row[0], bytes(row[1]), int(row[2]), row[3], None if row[4] is None else bytes(row[4])

    def consume_reauth(self, digest: bytes, version: int) -> None:
        self._x("UPDATE reauth_tokens SET consumed_version=%s WHERE digest=%s", (version, digest))

    def unhidden(self, ids: Sequence[str]) -> list[str]:
        sql = f"SELECT id FROM records WHERE hidden_version IS NULL AND {_BY_IDS} ORDER BY version"
        return [r[0] for r in self._rows(sql, (list(ids),))]

    def keyed(self, ids: Sequence[str]) -> list[str]:
        listed = list(ids)
        found: set[str] = set()
        for sql in (
            f"SELECT id FROM records WHERE wrapped IS NOT NULL AND {_BY_IDS}",
            "SELECT record_id FROM lineage WHERE wrapped IS NOT NULL AND record_id = ANY(%s::text[])",
        ):
            found.update(r[0] for r in self._rows(sql, (listed,)))
        return sorted(found)

    # -- keys ------------------------------------------------------------------------
    def scope_rows(self, tokens: Sequence[bytes]) -> dict[bytes, ScopeKeyRow]:
        sql = "SELECT token, parent, wrapped, epoch FROM scopes WHERE token = ANY(%s::bytea[])"
        return {bytes(row[0]): ScopeKeyRow(*row) for row in self._rows(sql, (list(tokens),))}

    def insert_scopes(self, rows: Iterable[ScopeKeyRow]) -> None:
        self._insert(
            "scopes",
            "token, parent, wrapped, epoch",
            ("bytea", "bytea", "bytea", "bigint"),
            ((r.token, r.parent, r.wrapped, r.epoch) for r in rows),
            _NOTHING,
        )

    def subject_rows(self, tokens: Sequence[bytes]) -> dict[bytes, tuple[bytes | None, int | None]]:
        sql = "SELECT token, wrapped, epoch FROM subjects WHERE token = ANY(%s::bytea[])"
        return {bytes(t): (w, e) for t, w, e in self._rows(sql, (list(tokens),))}

    def insert_subjects(self, rows: Iterable[tuple[bytes, bytes, int]]) -> None:
        self._insert("subjects", "token, wrapped, epoch", ("bytea", "bytea", "bigint"), rows, _NOTHING)

    def replace_scope_key(self, token: bytes, wrapped: bytes, epoch: int) -> None:
        self._x(
            "UPDATE scopes SET wrapped=%s, epoch=%s, destroyed_version=NULL WHERE token=%s",
            (wrapped, epoch, token),
        )

    def replace_subject_key(self, token: bytes, wrapped: bytes, epoch: int) -> None:
        self._x(
            "UPDATE subjects SET wrapped=%s, epoch=%s, destroyed_version=NULL WHERE token=%s",
            (wrapped, epoch, token),
        )

    def subtree_tokens(self, token: bytes) -> list[bytes]:
        sql = (
            "WITH RECURSIVE sub(t) AS (SELECT %s::bytea UNION "
            "SELECT s.token FROM scopes s JOIN sub ON s.parent = sub.t) SELECT t FROM sub"
        )
        return [bytes(r[0]) for r in self._rows(sql, (token,))]

    # -- records ---------------------------------------------------------------------
    def records_in_slots(self, slots: Sequence[tuple[bytes, bytes]]) -> list[RecordRow]:
        # one statement for every slot: a lateral probe of lineage_slot each
        unique = list(dict.fromkeys((bytes(s), bytes(k)) for s, k in slots))
        sql = f"SELECT {_R_COLS} FROM {_SLOTS} ORDER BY r.version"
        args = ([s for s, _ in unique], [k for _, k in unique])
        return [_record(row) for row in self._rows(sql, args)]

    def key_records(
        self, scope_tokens: Sequence[bytes], key_token: bytes
    ) -> tuple[int, list[tuple[RecordRow, LineageRow | None]]]:
        """The rows (and lineage rows) of ``key`` in each of a few scopes, and the change marker
        of the snapshot they were read in: one statement."""
        rows = self._rows(_KEY_RECORDS, (list(scope_tokens), key_token))
        found = [
            (RecordRow(*row[1:11]), None if row[11] is None else _lineage(row[11:]))
            for row in rows
            if row[1] is not None
        ]
        return self._marker_of(int(rows[0][0])), found

    def record(self, record_id: str) -> RecordRow | None:
        row = self._x(
            f"SELECT {_RECORD_COLS} FROM records WHERE version = "
            "(SELECT version FROM lineage WHERE record_id=%s)",
            (record_id,),
        ).fetchone()
        return None if row is None else _record(row)

    def records_in_scopes(self, scope_tokens: Sequence[bytes]) -> list[RecordRow]:
        sql = (
            f"SELECT {_R_COLS} FROM lineage l JOIN records r ON r.version = l.version "
            "WHERE l.scope_token = ANY(%s::bytea[]) ORDER BY r.version"
        )
        return [_record(r) for r in self._rows(sql, (list(scope_tokens),))]

    def live_records(self, after_version: int = 0) -> Iterator[RecordRow]:
        sql = (
            f"SELECT {_RECORD_COLS} FROM records WHERE version > %s AND hidden_version IS NULL "
            "AND wrapped IS NOT NULL ORDER BY version"
        )
        for row in self._rows(sql, (after_version,)):
            yield _record(row)

    def insert_records(self, rows: Sequence[RecordRow], lineage: Sequence[LineageRow]) -> None:
        # one pipeline, one round trip, one statement a table; a RecordRow is a tuple in _RECORD_COLS
        # order (expires_at made a float: an array holds one type)
        tokens, subject_ids = _subject_pairs((x.subject_tokens, x.record_id) for x in lineage)
        records = (
            r
            if r.expires_at is None or type(r.expires_at) is float
            else r._replace(expires_at=float(r.expires_at))
            for r in rows
        )
        self._start()
        with self._c.pipeline():
            self._insert("records", _RECORD_COLS, _RECORD_TYPES, records)
            self._insert("lineage", _LINEAGE_COLS, _LINEAGE_TYPES, map(lineage_values, lineage))
            if tokens:
                self._x(
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

    def store_vectors(self, cells: Sequence[tuple[bytes, str, int]]) -> int:
        """Keep ``(cell, id, version)`` sealed vectors of rows still live at that version; returns how many."""
        return self._many(
            "INSERT INTO vectors (version, cell) SELECT version, %s FROM records "
            "WHERE version=%s AND id=%s AND wrapped IS NOT NULL AND hidden_version IS NULL "
            "ON CONFLICT (version) DO UPDATE SET cell=excluded.cell",
            [(cell, version, record_id) for cell, record_id, version in cells],
        )

    def live_vectors(self, after_version: int = 0) -> list[tuple[str, int, bytes, bytes, int, bytes | None]]:
        sql = (
            "SELECT r.id, r.version, r.scope_token, r.wrapped, r.epoch, v.cell FROM records r "
            "LEFT JOIN vectors v ON v.version = r.version "
            "WHERE r.version > %s AND r.hidden_version IS NULL AND r.wrapped IS NOT NULL ORDER BY r.version"
        )
        return [(str(i), int(v), s, w, int(e), c) for i, v, s, w, e, c in self._rows(sql, (after_version,))]

    def vector_cell(self, version: int) -> bytes | None:
        value = self._one("SELECT cell FROM vectors WHERE version=%s", (version,))
        return None if value is None else bytes(value)

    def delete_records(self, ids: Sequence[str]) -> None:
        if ids:
            self._x(f"DELETE FROM records WHERE {_BY_IDS}", (list(ids),))

    def lineage(self, ids: Sequence[str]) -> dict[str, LineageRow]:
        sql = f"SELECT {_LINEAGE_COLS} FROM lineage WHERE record_id = ANY(%s::text[])"
        return {row[0]: _lineage(row) for row in self._rows(sql, (list(ids),))}

    def lineage_tokens(self, ids: Sequence[str]) -> list[tuple[bytes, bytes]]:
        sql = "SELECT scope_token, subject_tokens FROM lineage WHERE record_id = ANY(%s::text[]) ORDER BY version"
        return [(bytes(s), bytes(t)) for s, t in self._rows(sql, (list(ids),))]

    def lineage_keyed(self, ids: Sequence[str]) -> set[str]:
        sql = "SELECT record_id FROM lineage WHERE wrapped IS NOT NULL AND record_id = ANY(%s::text[])"
        return {r[0] for r in self._rows(sql, (list(ids),))}

    def lineage_ids(
        self, scope_tokens: Sequence[bytes], key_token: bytes | None, *, unforgotten: bool = False
    ) -> list[str]:
        sql = "SELECT record_id FROM lineage WHERE scope_token = ANY(%s::bytea[])"
        args: list[Any] = [list(scope_tokens)]
        if key_token is not None:
            sql += " AND key_token=%s"
            args.append(key_token)
        if unforgotten:
            sql += " AND forgotten_version IS NULL"
        return [r[0] for r in self._rows(sql + " AND destroyed_version IS NULL ORDER BY version", args)]

    def lineage_ids_for_subject(self, subject_token: bytes) -> list[str]:
        sql = (
            "SELECT rs.record_id FROM record_subjects rs JOIN lineage l ON l.record_id = rs.record_id "
            "WHERE rs.subject_token=%s AND l.destroyed_version IS NULL ORDER BY l.version"
        )
        return [r[0] for r in self._rows(sql, (subject_token,))]

    def derived_closure(self, ids: Sequence[str]) -> list[str]:
        """Every record derived, transitively, from any of ``ids`` (not including them)."""
        seen = set(ids)
        frontier = list(ids)
        while frontier:
            sql = "SELECT derived_id FROM derivations WHERE source_id = ANY(%s::text[])"
            nxt = [d for (d,) in self._rows(sql, (frontier,)) if d not in seen]
            seen.update(nxt)
            frontier = list(dict.fromkeys(nxt))
        return sorted(seen - set(ids))

    def written_since(self, version: int) -> list[LineageRow]:
        # every write inserts a records row at a fresh version, and a replaced version's lineage
        # stays under the same slot
        sql = (
            f"SELECT {_LINEAGE_COLS} FROM lineage WHERE version > %(v)s AND (scope_token, key_token) IN "
            "(SELECT scope_token, key_token FROM records WHERE version > %(v)s) ORDER BY version"
        )
        return [_lineage(row) for row in self._rows(sql, {"v": version})]

    @staticmethod
    def _forgotten_tests(compliance: bool) -> tuple[str, str]:
        kept = "l.destroyed_version IS NULL" if compliance else "l.forgotten_version IS NULL"
        shown = (
            "(r.hidden_version IS NULL OR r.wrapped IS NOT NULL)"
            if compliance
            else "r.hidden_version IS NULL"
        )
        return kept, shown

    def unforgotten_in_scopes(
        self, scope_tokens: Sequence[bytes], key_token: bytes | None, before: int, *, compliance: bool
    ) -> list[str]:
        kept, shown = self._forgotten_tests(compliance)
        key_sql = "" if key_token is None else " AND l.key_token=%(key)s"
        where = f"l.scope_token = ANY(%(scopes)s::bytea[]){key_sql} AND l.version < %(before)s"
        args = {"scopes": list(scope_tokens), "key": key_token, "before": before}
        found: set[str] = set()
        for sql in (
            f"SELECT l.record_id FROM lineage l WHERE {where} AND {kept}",
            f"SELECT r.id FROM lineage l JOIN records r ON r.version = l.version WHERE {where} AND {shown}",
        ):
            found.update(r[0] for r in self._rows(sql, args))
        return sorted(found)

    def unforgotten_for_subject(self, subject_token: bytes, before: int, *, compliance: bool) -> list[str]:
        kept, shown = self._forgotten_tests(compliance)
        found = {
            r[0]
            for sql in (
                "SELECT l.record_id FROM record_subjects rs JOIN lineage l ON l.record_id = rs.record_id "
                f"WHERE rs.subject_token=%s AND l.version < %s AND {kept}",
                "SELECT r.id FROM record_subjects rs JOIN lineage l ON l.record_id = rs.record_id "
                "JOIN records r ON r.version = l.version "
                f"WHERE rs.subject_token=%s AND r.version < %s AND {shown}",
            )
            for r in self._rows(sql, (subject_token, before))
        }
        return sorted(found)

    # -- forgetting ------------------------------------------------------------------
    def hide_records(self, ids: Sequence[str], version: int, mode: str) -> int:
        listed = list(ids)
        self._x(
            "UPDATE lineage SET forgotten_version=coalesce(forgotten_version, %s) "
            "WHERE record_id = ANY(%s::text[])",
            (version, listed),
        )
        return self._count(
            f"UPDATE records SET hidden_version=%s, hidden_mode=%s WHERE hidden_version IS NULL AND {_BY_IDS}",
            (version, mode, listed),
        )

    def destroy_record_keys(self, ids: Sequence[str], version: int) -> None:
        listed = list(ids)
        self._x(
            "UPDATE records SET wrapped=NULL, epoch=NULL, hidden_version=coalesce(hidden_version, %s), "
            f"hidden_mode='compliance' WHERE {_BY_IDS}",
            (version, listed),
        )
        self._x(
            "UPDATE lineage SET wrapped=NULL, subjects=NULL, destroyed_version=coalesce(destroyed_version, %s), "
            "forgotten_version=coalesce(forgotten_version, %s) WHERE record_id = ANY(%s::text[])",
            (version, version, listed),
        )

    def destroy_scope_keys(self, tokens: Sequence[bytes], version: int) -> None:
        self._x(
            "UPDATE scopes SET wrapped=NULL, epoch=NULL, destroyed_version=coalesce(destroyed_version, %s) "
            "WHERE token = ANY(%s::bytea[])",
            (version, list(tokens)),
        )

    def destroy_subject_keys(self, tokens: Sequence[bytes], version: int) -> None:
        # an UPDATE only: a subject the store never held (or whose row an earlier purge removed)
        # gets no row, so a repeated erasure leaves nothing behind to remove or to prove
        self._x(
            "UPDATE subjects SET wrapped=NULL, epoch=NULL, destroyed_version=coalesce(destroyed_version, %s) "
            "WHERE token = ANY(%s::bytea[])",
            (version, list(tokens)),
        )

    # -- what only a forget's records use, what of a target remains ---------------------
    def child_scopes(self, token: bytes) -> Iterator[bytes]:
        """The scopes whose parent is ``token``."""
        for (child,) in self._rows("SELECT token FROM scopes WHERE parent=%s ORDER BY token", (token,)):
            yield bytes(child)

    def scope_lineage(self, token: bytes) -> Iterator[tuple[str, int, bool]]:
        """(record id, version, keys live) of every record ever written in exactly this scope."""
        sql = (
            "SELECT record_id, version, destroyed_version IS NULL FROM lineage WHERE scope_token=%s "
            "ORDER BY version"
        )
        for record_id, version, live in self._rows(sql, (token,)):
            yield str(record_id), int(version), bool(live)

    def subject_lineage(self, token: bytes) -> Iterator[tuple[str, int, bool]]:
        """(record id, version, keys live) of every record ever written carrying the subject."""
        sql = (
            "SELECT l.record_id, l.version, l.destroyed_version IS NULL FROM record_subjects rs "
            "JOIN lineage l ON l.record_id = rs.record_id WHERE rs.subject_token=%s ORDER BY l.version"
        )
        for record_id, version, live in self._rows(sql, (token,)):
            yield str(record_id), int(version), bool(live)

    def plaintext_holds(self, needle: bytes) -> bool:
        """Does ``needle`` occur in a column the store keeps in plain (ids, request rows, the audit
        log)? Such bytes are content-free bookkeeping by construction (W4)."""
        return bool(self._one(_PLAIN_HOLDS, {"needle": needle}))

    def existing_records(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` still have a row in ``records`` (ciphertext)."""
        return {str(r[0]) for r in self._rows(f"SELECT id FROM records WHERE {_BY_IDS}", (list(ids),))}

    # -- purge -----------------------------------------------------------------------
    def purge_erased(
        self, ids: Sequence[str], scopes: Sequence[bytes], subjects: Sequence[bytes], version: int
    ) -> int:
        """Delete every row of compliance-erased records, scopes and subjects; returns rows removed."""
        listed = list(ids)
        # record_subjects and derivations are keyed by (subject, record) and (source, derived):
        # the pairs come from the records' own lineage rows (their subject tokens and sources)
        found = self._rows(
            "SELECT record_id, subject_tokens, sources FROM lineage WHERE record_id = ANY(%s::text[])",
            (listed,),
        )
        tokens, subject_ids = _subject_pairs((bytes(t), str(i)) for i, t, _ in found)
        sources = [(s, str(i)) for i, _, listed_sources in found for s in json.loads(listed_sources)]
        removed = self._count(
            _pairs_delete_sql("record_subjects", "subject_token", "record_id", "bytea"), (tokens, subject_ids)
        )
        removed += self._count(
            _pairs_delete_sql("derivations", "source_id", "derived_id", "text"),
            ([s for s, _ in sources], [d for _, d in sources]),
        )
        for sql in (
            f"DELETE FROM records WHERE {_BY_IDS}",  # before their lineage rows
            "DELETE FROM lineage WHERE record_id = ANY(%s::text[])",
            "DELETE FROM derivations WHERE source_id = ANY(%s::text[])",
        ):
            removed += self._count(sql, (listed,))
        self._x(
            "INSERT INTO erased_records (record_id, version) SELECT unnest(%s::text[]), %s ON CONFLICT DO NOTHING",
            (listed, version),
        )
        for table, keys in (("scopes", scopes), ("subjects", subjects)):
            sql = f"DELETE FROM {table} WHERE wrapped IS NULL AND token = ANY(%s::bytea[])"
            removed += self._count(sql, (list(keys),))
        return removed

    def erased_version(self, record_id: str) -> int | None:
        value = self._one("SELECT version FROM erased_records WHERE record_id=%s", (record_id,))
        return None if value is None else int(value)

    def delete_hidden(self, ids: Sequence[str]) -> int:
        """Reclaim rows hidden by an operational forget (their lineage stays, W3)."""
        return self._count(
            f"DELETE FROM records WHERE hidden_version IS NOT NULL AND {_BY_IDS}", (list(ids),)
        )

    def sweep_expired(self, now: float, limit: int) -> int:
        """Delete up to ``limit`` expired rows (content key and ciphertext); lineage is kept
        (expiry is operational)."""
        sql = (
            "DELETE FROM records WHERE version IN "
            "(SELECT version FROM records WHERE expires_at <= %s ORDER BY expires_at LIMIT %s)"
        )
        return self._count(sql, (now, limit))

    # -- key rotation and backups -------------------------------------------------------
    def wrapped_keys(self) -> list[tuple[str, Any, bytes, int]]:
        """Every live wrapped key: (table, primary key, wrapped, epoch)."""
        rows: list[tuple[str, Any, bytes, int]] = []
        for table, pk in _WRAPPED_TABLES:
            sql = f"SELECT {pk}, wrapped, epoch FROM {table} WHERE wrapped IS NOT NULL ORDER BY {pk}"
            rows.extend((table, k, bytes(w), int(e)) for k, w, e in self._rows(sql))
        return rows

    def rewrap(self, rows: Iterable[tuple[str, Any, bytes, int]]) -> None:
        listed = list(rows)
        for table, pk in _WRAPPED_TABLES:
            mine = [(w, e, k) for t, k, w, e in listed if t == table]
            if mine:
                self._x(
                    f"UPDATE {table} t SET wrapped=u.w, epoch=u.e FROM "
                    f"unnest(%s::bytea[], %s::bigint[], %s::{_PK_TYPES[table]}[]) AS u(w, e, k) "
                    f"WHERE t.{pk} = u.k",
                    ([w for w, _, _ in mine], [e for _, e, _ in mine], [k for _, _, k in mine]),
                )

    def epochs_in_use(self) -> set[int]:
        self._start()
        return _epochs_in_use(self._c)

    def insert_probe_key(self, request_id: str, wrapped: bytes, epoch: int) -> None:
        self._x(
            "INSERT INTO probe_keys (request_id, wrapped, epoch) VALUES (%s,%s,%s) "
            "ON CONFLICT (request_id) DO UPDATE SET wrapped=excluded.wrapped, epoch=excluded.epoch",
            (request_id, wrapped, epoch),
        )

    def probe_key(self, request_id: str) -> tuple[bytes, int] | None:
        row = self._x("SELECT wrapped, epoch FROM probe_keys WHERE request_id=%s", (request_id,)).fetchone()
        return None if row is None else (bytes(row[0]), int(row[1]))

    def delete_probe_key(self, request_id: str) -> None:
        self._x("DELETE FROM probe_keys WHERE request_id=%s", (request_id,))

    def probe_key_epochs(self) -> set[int]:
        return {int(r[0]) for r in self._rows("SELECT DISTINCT epoch FROM probe_keys")}

    # -- erasure requests and audit ----------------------------------------------------
    def insert_erasure(self, row: ErasureRow, *, replace: bool = False) -> None:
        columns = [c.strip() for c in _ERASURE_COLS.split(",")]
        conflict = (
            "DO UPDATE SET " + ", ".join(f"{c}=excluded.{c}" for c in columns if c != "id")
            if replace
            else "DO NOTHING"
        )
        self._x(
            f"INSERT INTO erasures ({_ERASURE_COLS}) VALUES ({','.join(['%s'] * len(columns))}) "
            f"ON CONFLICT (id) {conflict}",
            tuple(getattr(row, c) for c in columns),
        )
        if row.applied is not None or replace:
            self.set_applied(row.id, row.applied)

    def erasure(self, request_id: str) -> ErasureRow | None:
        row = self._x(f"{_ERASURE_SELECT} WHERE e.id=%s", (request_id,)).fetchone()
        return None if row is None else ErasureRow(*row)

    def erasure_layers(self, request_id: str) -> str | None:
        value = self._one("SELECT layers FROM erasures WHERE id=%s", (request_id,))
        return None if value is None else str(value)

    def erasures(self, states: Sequence[str] | None = None) -> list[ErasureRow]:
        sql = _ERASURE_SELECT
        args: list[Any] = []
        if states is not None:
            sql += " WHERE e.state = ANY(%s::text[])"
            args = [list(states)]
        return [ErasureRow(*r) for r in self._rows(sql + " ORDER BY e.version, e.id", args)]

    def update_erasure(self, request_id: str, **fields: Any) -> None:
        """Rewrites the whole row (its plan too): a large request's cursors are not kept here."""
        if not fields or not set(fields) <= _ERASURE_FIELDS:
            raise ValueError(f"unknown erasure fields: {sorted(set(fields) - _ERASURE_FIELDS)}")
        assignments = ", ".join(f"{name}=%s" for name in fields)
        self._x(f"UPDATE erasures SET {assignments} WHERE id=%s", (*fields.values(), request_id))

    def erasure_ids(self) -> set[str]:
        return {r[0] for r in self._rows("SELECT id FROM erasures")}

    def unapplied_erasures(self) -> list[ErasureRow]:
        sql = f"{_ERASURE_SELECT} WHERE p.applied IS NOT NULL ORDER BY e.version, e.id"
        return [ErasureRow(*r) for r in self._rows(sql)]

    def apply_cursor(self, request_id: str) -> int | None:
        value = self._one("SELECT applied FROM erasure_progress WHERE request_id=%s", (request_id,))
        return None if value is None else int(value)

    def set_applied(self, request_id: str, applied: int | None) -> None:
        self._x(
            "INSERT INTO erasure_progress (request_id, applied) VALUES (%s,%s) "
            "ON CONFLICT (request_id) DO UPDATE SET applied=excluded.applied",
            (request_id, applied),
        )
        self._drop_finished_progress(request_id)

    def purge_progress(self, request_id: str) -> tuple[int, int]:
        row = self._x(
            "SELECT purged, rows_removed FROM erasure_progress WHERE request_id=%s", (request_id,)
        ).fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def set_purge_progress(self, request_id: str, done: int | None, removed: int = 0) -> None:
        self._x(
            "INSERT INTO erasure_progress (request_id, purged, rows_removed) VALUES (%s,%s,%s) "
            "ON CONFLICT (request_id) DO UPDATE SET purged=excluded.purged, rows_removed=excluded.rows_removed",
            (request_id, done or 0, removed if done is not None else 0),
        )
        self._drop_finished_progress(request_id)

    def _drop_finished_progress(self, request_id: str) -> None:
        self._x(
            "DELETE FROM erasure_progress WHERE request_id=%s AND applied IS NULL AND purged=0 AND rows_removed=0",
            (request_id,),
        )

    def audit_tail(self) -> tuple[int, str] | None:
        row = self._x("SELECT seq, entry FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def append_audit(self, seq: int, entry: str) -> None:
        self._x("INSERT INTO audit (seq, entry) VALUES (%s,%s)", (seq, entry))

    def audit_entries(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT entry FROM audit ORDER BY seq")]

    # downstream consumers

    def insert_consumer(self, consumer_id: str, name: str, ack_days: int, registered_at: str) -> None:
        self._x(
            "INSERT INTO consumers (id, name, ack_days, registered_at) VALUES (%s,%s,%s,%s)",
            (consumer_id, name, ack_days, registered_at),
        )

    def consumers(self) -> list[tuple[str, str, int, str]]:
        rows = self._rows(
            "SELECT id, name, ack_days, registered_at FROM consumers ORDER BY registered_at, id"
        )
        return [(str(r[0]), str(r[1]), int(r[2]), str(r[3])) for r in rows]

    def insert_takes(self, consumer_id: str, taken: Sequence[tuple[str, int]], taken_at: str) -> None:
        for record_id, version in taken:
            self._x(
                "INSERT INTO consumer_takes (record_id, consumer_id, version, taken_at) VALUES (%s,%s,%s,%s) "
                "ON CONFLICT DO NOTHING",
                (record_id, consumer_id, version, taken_at),
            )

    def takers_of(self, record_ids: Sequence[str]) -> list[tuple[str, str, int]]:
        rows = self._rows(
            "SELECT consumer_id, record_id, version FROM consumer_takes WHERE record_id = ANY(%s)",
            (list(record_ids),),
        )
        return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    def insert_consumer_events(self, rows: Sequence[tuple[str, str, str, str, str]]) -> None:
        for row in rows:
            self._x(
                "INSERT INTO consumer_events (consumer_id, request_id, records, created_at, deadline) "
                "VALUES (%s,%s,%s,%s,%s)",
                row,
            )

    def consumer_events(
        self, consumer_id: str | None, request_id: str | None
    ) -> list[tuple[str, str, str, str, str, str | None, str | None]]:
        rows = self._rows(
            "SELECT consumer_id, request_id, records, created_at, deadline, acknowledged_at, evidence "
            "FROM consumer_events WHERE (%s::text IS NULL OR consumer_id = %s) "
            "AND (%s::text IS NULL OR request_id = %s) ORDER BY created_at, request_id, consumer_id",
            (consumer_id, consumer_id, request_id, request_id),
        )
        return [(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]

    def acknowledge_consumer_event(
        self, consumer_id: str, request_id: str, acknowledged_at: str, evidence: str
    ) -> None:
        self._x(
            "UPDATE consumer_events SET acknowledged_at=%s, evidence=%s WHERE consumer_id=%s AND request_id=%s",
            (acknowledged_at, evidence, consumer_id, request_id),
        )
