"""The handlers of ``backends.ops`` whose SQL both engines share, written once.

:class:`SQLHandlers` is mixed into each backend's transaction class (beside ``ops.OpRunner``),
which supplies the primitives: :meth:`SQLHandlers._x` runs a statement in the engine's own
spelling on the transaction's connection, :meth:`SQLHandlers._many` runs one for each of many
rows, :meth:`SQLHandlers._insert_rows` inserts many rows ignoring those already there and
:meth:`SQLHandlers._delete_pairs` deletes rows by many key pairs (``executemany`` in SQLite, one
``unnest`` of arrays in PostgreSQL). A handler writes its statement with ``?`` parameters; the
class's :class:`~.dialect.Dialect` says the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache
from typing import Any, ClassVar, Protocol

from ..base import ErasureRow, LineageRow, RecordRow, ScopeKeyRow
from .columns import (
    ERASURE_COLS,
    ERASURE_FIELDS,
    ERASURE_SELECT,
    L_COLS,
    LINEAGE_COLS,
    R_COLS,
    RECORD_COLS,
    WRAPPED_TABLES,
    epochs_in_use,
    lineage_row,
    record_row,
)
from .dialect import Dialect

__all__ = [
    "AUDIT_TAIL",
    "LINEAGE_TOKENS",
    "META",
    "SAMPLE_ROWS",
    "SAMPLE_ROWS_IDS",
    "SUBJECT_ROWS",
    "TAKERS_OF",
    "TAKERS_OF_IDS",
    "WRITTEN_SINCE",
    "Cursor",
    "SQLHandlers",
    "audit_tail_of",
    "by_ids",
    "sample_rows_of",
    "scope_chain",
    "scope_rows_of",
    "subject_rows_of",
    "subtree_rows",
    "takers_of",
    "token_pairs_of",
]

_SAVEPOINT = "cenotaph_write"
# statements a backend may also send ahead of a write (PostgreSQL: with its BEGIN and locks),
# written with ``?`` parameters (``Dialect.sql``)
# the lineage rows of records written after a version (both ``?`` are that version): every write
# inserts a records row at a fresh version (the table's key, so this is a range), and a replaced
# version's lineage stays under the same slot
WRITTEN_SINCE = (
    f"SELECT {LINEAGE_COLS} FROM lineage WHERE version > ? AND (scope_token, key_token) IN "
    "(SELECT scope_token, key_token FROM records WHERE version > ?) ORDER BY version"
)
AUDIT_TAIL = "SELECT seq, entry FROM audit ORDER BY seq DESC LIMIT 1"
META = "SELECT value FROM meta WHERE name=?"  # one meta value (none: no row)


# every lineage row of a list of ids with its record row and vector cell, if any (``{In}``: the
# ids, see ``SQLHandlers._in_parts``); a compliance forget's sample, sent ahead with its locks
SAMPLE_ROWS = (
    f"SELECT {L_COLS}, {R_COLS}, v.cell FROM lineage l LEFT JOIN records r ON r.version = l.version "
    "LEFT JOIN vectors v ON v.version = r.version WHERE {In}"
)
# every consumer's take of a list of record ids (``{In}``: the ids); only a consumer's
# registration of a take (store-wide) changes it, so a forget sends it ahead with its locks
TAKERS_OF = "SELECT consumer_id, record_id, version FROM consumer_takes WHERE {In}"
SAMPLE_ROWS_IDS, TAKERS_OF_IDS = "l.record_id", "record_id"  # the columns their ``{In}`` lists


@cache
def scope_chain(d: Dialect) -> str:
    """The scopes rows of a scope (the one parameter) and of every ancestor its parent column
    leads to: one statement up the parent column (UNION: a tampered cycle ends). A forget sends
    it ahead with its locks, for the keys that open its sampled records."""
    return (
        f"WITH RECURSIVE up(t) AS (SELECT {d.param('bytea')} UNION "
        "SELECT s.parent FROM scopes s JOIN up ON s.token = up.t WHERE s.parent IS NOT NULL) "
        "SELECT token, parent, wrapped, epoch FROM scopes WHERE token IN (SELECT t FROM up)"
    )


@cache
def subtree_tokens(d: Dialect) -> str:
    """The tokens of a scope (the one parameter) and of every scope below it."""
    return (
        f"WITH RECURSIVE sub(t) AS (SELECT {d.param('bytea')} UNION "
        "SELECT s.token FROM scopes s JOIN sub ON s.parent = sub.t) SELECT t FROM sub"
    )


@cache
def subtree_rows(d: Dialect) -> str:
    """The scopes rows of :func:`subtree_tokens`. A compliance scope forget sends it ahead with
    its locks: the keys it destroys, and (with the target's :func:`scope_chain`) those opening
    every record it samples."""
    return f"SELECT token, parent, wrapped, epoch FROM scopes WHERE token IN ({subtree_tokens(d)})"


# (scope token, subject tokens) of the lineage rows of a list of ids (``{In}``: the ids), in
# version order where the engine needs one; a compliance scope or subject forget sends it ahead
# with its locks, for the keys only its records use
LINEAGE_TOKENS = "SELECT scope_token, subject_tokens FROM lineage WHERE {In}"


def tokens_of(rows: Iterable[Sequence[Any]]) -> list[bytes]:
    """The first column's tokens."""
    return [bytes(r[0]) for r in rows]


def token_pairs_of(rows: Iterable[Sequence[Any]]) -> list[tuple[bytes, bytes]]:
    """:data:`LINEAGE_TOKENS`'s rows."""
    return [(bytes(a), bytes(b)) for a, b in rows]


# the subjects rows of a list of tokens (``{In}``: ``token`` one of them); a forget sends those of
# its target scope's subjects ahead with its locks, for the keys that open its sampled records
SUBJECT_ROWS = "SELECT token, wrapped, epoch FROM subjects WHERE {In}"


def subject_rows_of(rows: Iterable[Sequence[Any]]) -> dict[bytes, tuple[bytes | None, int | None]]:
    """:data:`SUBJECT_ROWS`'s rows: (wrapped key, epoch) by token."""
    return {bytes(t): (w, e) for t, w, e in rows}


def scope_rows_of(rows: Iterable[Sequence[Any]]) -> dict[bytes, ScopeKeyRow]:
    """Rows of ``token, parent, wrapped, epoch`` by token."""
    return {bytes(row[0]): ScopeKeyRow(*row) for row in rows}


def sample_rows_of(
    rows: Iterable[Sequence[Any]],
) -> dict[str, tuple[LineageRow, RecordRow | None, bytes | None]]:
    """:data:`SAMPLE_ROWS`'s rows by record id: (lineage row, record row, vector cell)."""
    width = len(LineageRow._fields)
    found: dict[str, tuple[LineageRow, RecordRow | None, bytes | None]] = {}
    for row in rows:
        record = row[width:-1]
        cell = row[-1]
        found[row[0]] = (
            lineage_row(row[:width]),
            None if record[0] is None else record_row(record),
            None if cell is None else bytes(cell),
        )
    return found


def takers_of(rows: Iterable[Sequence[Any]]) -> list[tuple[str, str, int]]:
    """:data:`TAKERS_OF`'s rows: (consumer id, record id, version)."""
    return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]


def audit_tail_of(row: Sequence[Any] | None) -> tuple[int, str] | None:
    """The audit log's tail (seq, entry) from :data:`AUDIT_TAIL`'s row (None: an empty log)."""
    return None if row is None else (int(row[0]), str(row[1]))


def by_ids(d: Dialect, n: int) -> str:
    """The records rows of ``n`` record ids, found through their lineage rows (records are keyed
    by version alone; the id is indexed once, in lineage)."""
    return f"version IN (SELECT version FROM lineage WHERE {d.any_of('record_id', 'text', n)})"


class Cursor(Protocol):
    """What both drivers' cursors give a handler."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class SQLHandlers:
    """The shared handlers; a subclass sets ``_d`` (its dialect) and implements the primitives."""

    _d: ClassVar[Dialect]
    _commits: bool
    _after: list[Callable[[], None]]
    marker: Callable[[], int]  # each backend's own (ops.Marker)

    # -- the primitives a backend supplies ----------------------------------------------
    def _x(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        """Run ``sql`` (the engine's spelling) in this transaction."""
        raise NotImplementedError

    def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run ``sql`` (the engine's spelling) once for each of ``rows``; the rows it changed."""
        raise NotImplementedError

    def _insert_rows(
        self, table: str, columns: str, types: tuple[str, ...], rows: Iterable[Sequence[Any]]
    ) -> None:
        """Insert ``rows`` (of ``columns``, PostgreSQL ``types``), skipping any already there."""
        raise NotImplementedError

    def _delete_pairs(
        self, table: str, first: tuple[str, str], second: str, pairs: Sequence[tuple[Any, str]]
    ) -> int:
        """Delete the rows of ``table`` keyed by each ``(first, second)`` pair (``first``: a
        column and its PostgreSQL type; ``second`` is text); the rows removed."""
        raise NotImplementedError

    # -- statements written once --------------------------------------------------------
    def _run(self, text: str, args: Sequence[Any] = ()) -> Cursor:
        return self._x(self._d.sql(text), args)

    def _get(self, text: str, args: Sequence[Any] = ()) -> Any:
        """The first column of the first row (None without one)."""
        row = self._run(text, args).fetchone()
        return None if row is None else row[0]

    def _changed(self, text: str, args: Sequence[Any] = ()) -> int:
        return self._run(text, args).rowcount

    def _by_ids(self, n: int) -> str:
        return by_ids(self._d, n)

    def _in_parts(self, text: str, column: str, sql_type: str, values: Sequence[Any]) -> Iterator[Any]:
        """The rows of ``text`` for every part of ``values`` the dialect sends: its ``{In}`` is
        ``column`` being one of the part, its ``{ids}`` the records rows of the part's ids."""
        for part in self._d.chunks(values):
            sql = text.format(In=self._d.any_of(column, sql_type, len(part)), ids=self._by_ids(len(part)))
            yield from self._run(sql, self._d.list_args(part))

    # -- after commit, savepoints (a group commit undoes one refused write alone) ---------
    def after_commit(self, action: Callable[[], None]) -> None:
        if not self._commits:  # a read never commits: the action would silently never run
            raise RuntimeError("after_commit needs a write transaction (backend.write())")
        self._after.append(action)

    def savepoint(self) -> None:
        self._run(f"SAVEPOINT {_SAVEPOINT}")

    def release_savepoint(self) -> None:
        self._run(f"RELEASE SAVEPOINT {_SAVEPOINT}")

    def rollback_to_savepoint(self) -> None:
        self._run(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
        self._run(f"RELEASE SAVEPOINT {_SAVEPOINT}")

    # -- counters and meta ---------------------------------------------------------------
    def clock_marker(self) -> tuple[int, int]:
        return self.count("clock"), self.marker()

    def count(self, name: str) -> int:
        return int(self._get("SELECT value FROM meta WHERE name=?", (name,)))

    def advance(self, name: str, to: int | None = None) -> None:
        if to is None:
            self._run("UPDATE meta SET value=value+1 WHERE name=?", (name,))
        else:
            self._run("UPDATE meta SET value=? WHERE name=? AND value<?", (to, name, to))

    def reserve(self, count: int, floor: int = 0) -> int:
        # the writers are serialised here: the clock is the last version, Advance moves it
        return max(self.count("clock"), floor)

    def meta(self, name: str) -> int | None:
        value = self._get(META, (name,))
        return None if value is None else int(value)

    def meta_all(self) -> dict[str, int]:
        return {str(n): int(v) for n, v in self._run("SELECT name, value FROM meta")}

    def set_meta(self, name: str, value: int) -> None:
        self._run(
            "INSERT INTO meta (name, value) VALUES (?,?) ON CONFLICT (name) DO UPDATE SET value=excluded.value",
            (name, value),
        )

    # -- tombstones, lifts, reauthorization --------------------------------------------
    def _max_by_target(self, table: str, targets: Sequence[bytes]) -> dict[bytes, int]:
        sql = f"SELECT target, max(version) FROM {table} WHERE {{In}} GROUP BY target"
        return {bytes(t): int(v) for t, v in self._in_parts(sql, "target", "bytea", targets)}

    def tombstone_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]:
        return self._max_by_target("tombstones", targets)

    def lift_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]:
        return self._max_by_target("lifts", targets)

    def all_lifts(self) -> list[tuple[bytes, int]]:
        sql = "SELECT target, version FROM lifts" + self._d.order("target, version")
        return [(bytes(t), int(v)) for t, v in self._run(sql)]

    def all_reauths(self) -> list[tuple[bytes, str, bytes, int, int | None, bytes | None]]:
        sql = "SELECT digest, kind, target, issued_version, consumed_version, subject FROM reauth_tokens"
        return [
            (
                bytes(d),
                str(k),
                bytes(t),
                int(v),
                None if c is None else int(c),
                None if s is None else bytes(s),
            )
            for d, k, t, v, c, s in self._run(sql + self._d.order("digest"))
        ]

    def insert_tombstones(self, rows: Iterable[tuple[bytes, int, str, str]]) -> None:
        types = ("bytea", "bigint", "text", "text")
        self._insert_rows("tombstones", "target, version, kind, request_id", types, rows)

    def insert_lift(self, target: bytes, version: int) -> None:
        self._run(
            "INSERT INTO lifts (target, version) VALUES (?,?) ON CONFLICT DO NOTHING", (target, version)
        )

    def insert_reauth(
        self, digest: bytes, kind: str, target: bytes, version: int, subject: bytes | None = None
    ) -> None:
        self._run(
            "INSERT INTO reauth_tokens (digest, kind, target, issued_version, subject) VALUES (?,?,?,?,?)",
            (digest, kind, target, version, subject),
        )

    def reauth(self, digest: bytes) -> tuple[str, bytes, int, int | None, bytes | None] | None:
        row = self._run(
            "SELECT kind, target, issued_version, consumed_version, subject FROM reauth_tokens WHERE digest=?",
            (digest,),
        ).fetchone()
        if row is None:
            return None
        return row[0], bytes(row[1]), int(row[2]), row[3], None if row[4] is None else bytes(row[4])

    def consume_reauth(self, digest: bytes, version: int) -> None:
        self._run("UPDATE reauth_tokens SET consumed_version=? WHERE digest=?", (version, digest))

    # -- what the ledger decided, as the database caches it ------------------------------
    def unhidden(self, ids: Sequence[str]) -> list[str]:
        sql = "SELECT id FROM records WHERE hidden_version IS NULL AND {ids}" + self._d.order("version")
        return [r[0] for r in self._in_parts(sql, "record_id", "text", ids)]

    def keyed(self, ids: Sequence[str]) -> list[str]:
        found: set[str] = set()
        for sql, column in (
            ("SELECT id FROM records WHERE wrapped IS NOT NULL AND {ids}", "record_id"),
            ("SELECT record_id FROM lineage WHERE wrapped IS NOT NULL AND {In}", "record_id"),
        ):
            found.update(r[0] for r in self._in_parts(sql, column, "text", ids))
        return sorted(found)

    # -- keys ------------------------------------------------------------------------
    def scope_rows(self, tokens: Sequence[bytes]) -> dict[bytes, ScopeKeyRow]:
        sql = "SELECT token, parent, wrapped, epoch FROM scopes WHERE {In}"
        return scope_rows_of(self._in_parts(sql, "token", "bytea", tokens))

    def scope_chain_rows(self, token: bytes) -> dict[bytes, ScopeKeyRow]:
        return scope_rows_of(self._run(scope_chain(self._d), (token,)))

    def insert_scopes(self, rows: Iterable[ScopeKeyRow]) -> None:
        self._insert_rows(
            "scopes",
            "token, parent, wrapped, epoch",
            ("bytea", "bytea", "bytea", "bigint"),
            ((r.token, r.parent, r.wrapped, r.epoch) for r in rows),
        )

    def subject_rows(self, tokens: Sequence[bytes]) -> dict[bytes, tuple[bytes | None, int | None]]:
        return subject_rows_of(self._in_parts(SUBJECT_ROWS, "token", "bytea", tokens))

    def insert_subjects(self, rows: Iterable[tuple[bytes, bytes, int]]) -> None:
        self._insert_rows("subjects", "token, wrapped, epoch", ("bytea", "bytea", "bigint"), rows)

    def replace_scope_key(self, token: bytes, wrapped: bytes, epoch: int) -> None:
        self._run(
            "UPDATE scopes SET wrapped=?, epoch=?, destroyed_version=NULL WHERE token=?",
            (wrapped, epoch, token),
        )

    def replace_subject_key(self, token: bytes, wrapped: bytes, epoch: int) -> None:
        self._run(
            "UPDATE subjects SET wrapped=?, epoch=?, destroyed_version=NULL WHERE token=?",
            (wrapped, epoch, token),
        )

    def subtree_tokens(self, token: bytes) -> list[bytes]:
        return tokens_of(self._run(subtree_tokens(self._d), (token,)))

    def subtree_rows(self, token: bytes) -> dict[bytes, ScopeKeyRow]:
        return scope_rows_of(self._run(subtree_rows(self._d), (token,)))

    # -- records ---------------------------------------------------------------------
    def record(self, record_id: str) -> RecordRow | None:
        row = self._run(
            f"SELECT {RECORD_COLS} FROM records WHERE version = (SELECT version FROM lineage WHERE record_id=?)",
            (record_id,),
        ).fetchone()
        return None if row is None else record_row(row)

    def records_of_ids(self, ids: Sequence[str]) -> dict[str, tuple[RecordRow, LineageRow]]:
        # one statement (a part of ids each, where the dialect sends them in parts)
        sql = f"SELECT {R_COLS}, {L_COLS} FROM lineage l JOIN records r ON r.version = l.version WHERE {{In}}"
        width = len(RecordRow._fields)
        found = self._in_parts(sql, "l.record_id", "text", list(dict.fromkeys(ids)))
        return {row[0]: (record_row(row[:width]), lineage_row(row[width:])) for row in found}

    def sample_rows(self, ids: Sequence[str]) -> dict[str, tuple[LineageRow, RecordRow | None, bytes | None]]:
        return sample_rows_of(self._in_parts(SAMPLE_ROWS, SAMPLE_ROWS_IDS, "text", list(dict.fromkeys(ids))))

    def records_in_scopes(self, scope_tokens: Sequence[bytes]) -> list[RecordRow]:
        sql = f"SELECT {R_COLS} FROM lineage l JOIN records r ON r.version = l.version WHERE {{In}}"
        sql += self._d.order("r.version")
        return [record_row(r) for r in self._in_parts(sql, "l.scope_token", "bytea", scope_tokens)]

    def live_records(self, after_version: int = 0) -> Iterator[RecordRow]:
        sql = (
            f"SELECT {RECORD_COLS} FROM records WHERE version > ? AND hidden_version IS NULL "
            "AND wrapped IS NOT NULL" + self._d.order("version")
        )
        for row in self._run(sql, (after_version,)).fetchall():
            yield record_row(row)

    def store_vectors(self, cells: Sequence[tuple[bytes, str, int]]) -> int:
        """Keep ``(cell, id, version)`` sealed vectors of rows still live at that version; returns how many."""
        return self._many(
            self._d.sql(
                "INSERT INTO vectors (version, cell) SELECT version, ? FROM records "
                "WHERE version=? AND id=? AND wrapped IS NOT NULL AND hidden_version IS NULL "
                f"ON CONFLICT ({self._d.key('version')}) DO UPDATE SET cell=excluded.cell"
            ),
            [(cell, version, record_id) for cell, record_id, version in cells],
        )

    def live_vectors(self, after_version: int = 0) -> list[tuple[str, int, bytes, bytes, int, bytes | None]]:
        sql = (
            "SELECT r.id, r.version, r.scope_token, r.wrapped, r.epoch, v.cell FROM records r "
            "LEFT JOIN vectors v ON v.version = r.version "
            "WHERE r.version > ? AND r.hidden_version IS NULL AND r.wrapped IS NOT NULL"
            + self._d.order("r.version")
        )
        return [(str(i), int(v), s, w, int(e), c) for i, v, s, w, e, c in self._run(sql, (after_version,))]

    def vector_cell(self, version: int) -> bytes | None:
        value = self._get("SELECT cell FROM vectors WHERE version=?", (version,))
        return None if value is None else bytes(value)

    def delete_records(self, ids: Sequence[str]) -> None:
        for part in self._d.chunks(ids) if ids else ():
            self._run(f"DELETE FROM records WHERE {self._by_ids(len(part))}", self._d.list_args(part))

    # -- lineage -----------------------------------------------------------------------
    def lineage(self, ids: Sequence[str]) -> dict[str, LineageRow]:
        sql = f"SELECT {LINEAGE_COLS} FROM lineage WHERE {{In}}"
        return {row[0]: lineage_row(row) for row in self._in_parts(sql, "record_id", "text", ids)}

    def lineage_tokens(self, ids: Sequence[str]) -> list[tuple[bytes, bytes]]:
        sql = LINEAGE_TOKENS + self._d.order("version")
        return token_pairs_of(self._in_parts(sql, "record_id", "text", ids))

    def lineage_keyed(self, ids: Sequence[str]) -> set[str]:
        sql = "SELECT record_id FROM lineage WHERE wrapped IS NOT NULL AND {In}"
        return {r[0] for r in self._in_parts(sql, "record_id", "text", ids)}

    def lineage_ids(
        self, scope_tokens: Sequence[bytes], key_token: bytes | None, *, unforgotten: bool = False
    ) -> list[str]:
        ids: list[str] = []
        for part in self._d.chunks(scope_tokens):
            sql = f"SELECT record_id FROM lineage WHERE {self._d.any_of('scope_token', 'bytea', len(part))}"
            args = self._d.list_args(part)
            if key_token is not None:
                sql += " AND key_token=?"
                args.append(key_token)
            if unforgotten:
                sql += " AND forgotten_version IS NULL"
            sql += " AND destroyed_version IS NULL" + self._d.order("version")
            ids.extend(r[0] for r in self._run(sql, args))
        return ids

    def lineage_ids_for_subject(self, subject_token: bytes) -> list[str]:
        sql = (
            "SELECT rs.record_id FROM record_subjects rs JOIN lineage l ON l.record_id = rs.record_id "
            "WHERE rs.subject_token=? AND l.destroyed_version IS NULL" + self._d.order("l.version")
        )
        return [r[0] for r in self._run(sql, (subject_token,))]

    def derived_closure(self, ids: Sequence[str]) -> list[str]:
        """Every record derived, transitively, from any of ``ids`` (not including them): the whole
        closure, a level of derivations a round."""
        seen = set(ids)
        frontier = list(seen)
        while frontier:
            level: list[str] = []
            for (derived,) in self._in_parts(
                "SELECT derived_id FROM derivations WHERE {In}", "source_id", "text", frontier
            ):
                if derived not in seen:
                    seen.add(derived)
                    level.append(derived)
            frontier = level
        return sorted(seen - set(ids))

    def written_since(self, version: int) -> list[LineageRow]:
        return [lineage_row(row) for row in self._run(WRITTEN_SINCE, (version, version))]

    @staticmethod
    def _forgotten_tests(compliance: bool) -> tuple[str, str]:
        """(a lineage row not yet forgotten, a record row still shown) for a forget of this mode."""
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
        found: set[str] = set()
        for part in self._d.chunks(scope_tokens):
            args = self._d.list_args(part)
            key_sql = ""
            if key_token is not None:
                key_sql = " AND l.key_token=?"
                args.append(key_token)
            args.append(before)
            where = f"{self._d.any_of('l.scope_token', 'bytea', len(part))}{key_sql} AND l.version < ?"
            for sql in (
                f"SELECT l.record_id FROM lineage l WHERE {where} AND {kept}",
                f"SELECT r.id FROM lineage l JOIN records r ON r.version = l.version WHERE {where} AND {shown}",
            ):
                found.update(r[0] for r in self._run(sql, args))
        return sorted(found)

    def _unforgotten_ctes(
        self, scope_token: bytes, key_token: bytes | None, before: int, exact: bool, compliance: bool
    ) -> tuple[str, list[Any]]:
        """Two common table expressions (for a ``WITH RECURSIVE``) and their parameters:
        ``sub(t)``, the target's scopes (its subtree, or the scope alone), and ``unforgotten(id)``,
        :meth:`unforgotten_in_scopes` of them."""
        kept, shown = self._forgotten_tests(compliance)
        first = self._d.param("bytea")
        sub = f"sub(t) AS (SELECT {first})"
        if not exact:  # UNION: a tampered cycle ends
            sub = (
                f"sub(t) AS (SELECT {first} UNION SELECT s.token FROM scopes s JOIN sub ON s.parent = sub.t)"
            )
        where = "l.scope_token IN (SELECT t FROM sub)"
        args: list[Any] = []
        if key_token is not None:
            where += " AND l.key_token=?"
            args.append(key_token)
        where += " AND l.version < ?"
        args.append(before)
        unforgotten = (
            f"unforgotten(id) AS (SELECT l.record_id FROM lineage l WHERE {where} AND {kept} UNION "
            f"SELECT r.id FROM lineage l JOIN records r ON r.version = l.version WHERE {where} AND {shown})"
        )
        return f"{sub}, {unforgotten}", [scope_token, *args, *args]

    def unforgotten_in_subtree(
        self,
        scope_token: bytes,
        key_token: bytes | None,
        before: int,
        *,
        exact: bool,
        compliance: bool,
        derived: bool = False,
    ) -> list[str]:
        ctes, args = self._unforgotten_ctes(scope_token, key_token, before, exact, compliance)
        if derived:  # sources precede what derives from them; UNION: a tampered cycle ends
            ctes += (
                ", closure(id) AS (SELECT id FROM unforgotten UNION "
                "SELECT d.derived_id FROM derivations d JOIN closure c ON d.source_id = c.id)"
            )
            return sorted(r[0] for r in self._run(f"WITH RECURSIVE {ctes} SELECT id FROM closure", args))
        return sorted(r[0] for r in self._run(f"WITH RECURSIVE {ctes} SELECT id FROM unforgotten", args))

    def still_readable(
        self,
        hidden: Sequence[str],
        keyed: Sequence[str],
        scope_token: bytes | None,
        key_token: bytes | None,
        before: int,
        *,
        exact: bool,
        compliance: bool,
    ) -> list[str]:
        if not self._d.arrays:  # a list in parts of at most CHUNK: the parts, then the target
            found = {*self.unhidden(hidden), *self.keyed(keyed)}
            if scope_token is not None:
                found.update(
                    self.unforgotten_in_subtree(
                        scope_token, key_token, before, exact=exact, compliance=compliance
                    )
                )
            return sorted(found)
        ctes, args = "", list[Any]()
        if scope_token is not None:
            ctes, args = self._unforgotten_ctes(scope_token, key_token, before, exact, compliance)
        d = self._d
        sql = (
            f"SELECT id FROM records WHERE hidden_version IS NULL AND {self._by_ids(1)} UNION "
            f"SELECT id FROM records WHERE wrapped IS NOT NULL AND {self._by_ids(1)} UNION "
            f"SELECT record_id FROM lineage WHERE wrapped IS NOT NULL AND {d.any_of('record_id', 'text', 1)}"
        )
        args += [*d.list_args(hidden), *d.list_args(keyed), *d.list_args(keyed)]
        if ctes:
            sql = f"WITH RECURSIVE {ctes} {sql} UNION SELECT id FROM unforgotten"
        return sorted(r[0] for r in self._run(sql, args))

    def unforgotten_for_subject(self, subject_token: bytes, before: int, *, compliance: bool) -> list[str]:
        kept, shown = self._forgotten_tests(compliance)
        found = {
            r[0]
            for sql in (
                "SELECT l.record_id FROM record_subjects rs JOIN lineage l ON l.record_id = rs.record_id "
                f"WHERE rs.subject_token=? AND l.version < ? AND {kept}",
                "SELECT r.id FROM record_subjects rs JOIN lineage l ON l.record_id = rs.record_id "
                "JOIN records r ON r.version = l.version "
                f"WHERE rs.subject_token=? AND r.version < ? AND {shown}",
            )
            for r in self._run(sql, (subject_token, before))
        }
        return sorted(found)

    # -- forgetting ------------------------------------------------------------------
    def hide_records(self, ids: Sequence[str], version: int, mode: str) -> None:
        # one statement per part of ids (an UPDATE per id was 1.1 s of a 100k-record forget); no
        # row count is read, so on PostgreSQL neither waits for its own round trip
        for part in self._d.chunks(ids):
            listed = self._d.list_args(part)
            self._run(
                "UPDATE lineage SET forgotten_version=coalesce(forgotten_version, ?) "
                f"WHERE {self._d.any_of('record_id', 'text', len(part))}",
                (version, *listed),
            )
            self._run(
                "UPDATE records SET hidden_version=?, hidden_mode=? "
                f"WHERE hidden_version IS NULL AND {self._by_ids(len(part))}",
                (version, mode, *listed),
            )

    def destroy_record_keys(self, ids: Sequence[str], version: int) -> None:
        for part in self._d.chunks(ids):
            listed = self._d.list_args(part)
            self._run(
                "UPDATE records SET wrapped=NULL, epoch=NULL, hidden_version=coalesce(hidden_version, ?), "
                f"hidden_mode='compliance' WHERE {self._by_ids(len(part))}",
                (version, *listed),
            )
            self._run(
                "UPDATE lineage SET wrapped=NULL, subjects=NULL, destroyed_version=coalesce(destroyed_version, ?), "
                f"forgotten_version=coalesce(forgotten_version, ?) WHERE {self._d.any_of('record_id', 'text', len(part))}",
                (version, version, *listed),
            )

    def _destroy_keys(self, table: str, tokens: Sequence[bytes], version: int) -> None:
        if not tokens:  # a key forget's: no statement (PostgreSQL would send an empty array)
            return
        for part in self._d.chunks(tokens):
            self._run(
                f"UPDATE {table} SET wrapped=NULL, epoch=NULL, destroyed_version=coalesce(destroyed_version, ?) "
                f"WHERE {self._d.any_of('token', 'bytea', len(part))}",
                (version, *self._d.list_args(part)),
            )

    def destroy_keys(self, scopes: Sequence[bytes], subjects: Sequence[bytes], version: int) -> None:
        # an UPDATE only: a subject the store never held (or whose row an earlier purge removed)
        # gets no row, so a repeated erasure leaves nothing behind to remove or to prove
        self._destroy_keys("scopes", scopes, version)
        self._destroy_keys("subjects", subjects, version)

    # -- what only a forget's records use, what of a target remains ---------------------
    def live_in_subtree(self, token: bytes, limit: int) -> list[str]:
        # a join the engine runs as a nested loop over the subtree's scopes as the walk yields
        # them, so the LIMIT stops the walk too (the scope under a tenant's root: 0.2 ms; the
        # root of one with 200,000 scopes: ~50 ms, where ``IN (subtree)`` took 2.2 s)
        sql = (
            f"WITH RECURSIVE sub(t) AS (SELECT {self._d.param('bytea')} UNION "
            "SELECT s.token FROM scopes s JOIN sub ON s.parent = sub.t) "
            "SELECT l.record_id FROM sub JOIN lineage l ON l.scope_token = sub.t "
            "WHERE l.destroyed_version IS NULL LIMIT ?"
        )
        return [str(r[0]) for r in self._run(sql, (token, limit))]

    def scope_lineage(self, token: bytes) -> Iterator[tuple[str, int, bool]]:
        """(record id, version, keys live) of every record ever written in exactly this scope."""
        sql = "SELECT record_id, version, destroyed_version IS NULL FROM lineage WHERE scope_token=?"
        for record_id, version, live in self._run(sql + self._d.order("version"), (token,)):
            yield str(record_id), int(version), bool(live)

    def subject_lineage(self, token: bytes) -> Iterator[tuple[str, int, bool]]:
        """(record id, version, keys live) of every record ever written carrying the subject."""
        sql = (
            "SELECT l.record_id, l.version, l.destroyed_version IS NULL FROM record_subjects rs "
            "JOIN lineage l ON l.record_id = rs.record_id WHERE rs.subject_token=?"
            + self._d.order("l.version")
        )
        for record_id, version, live in self._run(sql, (token,)):
            yield str(record_id), int(version), bool(live)

    def existing_records(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` still have a row in ``records`` (ciphertext)."""
        return {
            str(r[0]) for r in self._in_parts("SELECT id FROM records WHERE {ids}", "record_id", "text", ids)
        }

    # -- purge -----------------------------------------------------------------------
    def purge_erased(
        self, ids: Sequence[str], scopes: Sequence[bytes], subjects: Sequence[bytes], version: int
    ) -> int:
        """Delete every row of compliance-erased records, scopes and subjects; returns rows removed."""
        removed = 0
        for part in self._d.chunks(ids):
            listed = self._d.list_args(part)
            of_ids = self._d.any_of("record_id", "text", len(part))
            # record_subjects and derivations are keyed by (subject, record) and (source,
            # derived): deleting by the second column alone scans the whole table, so the pairs
            # come from the records' own lineage rows (their subject tokens and sources)
            pairs: list[tuple[bytes, str]] = []
            sources: list[tuple[str, str]] = []
            sql = f"SELECT record_id, subject_tokens, sources FROM lineage WHERE {of_ids}"
            for record_id, tokens, listed_sources in self._run(sql, listed):
                pairs.extend((bytes(tokens[i : i + 32]), record_id) for i in range(0, len(tokens), 32))
                if listed_sources != "[]":
                    sources.extend((source, record_id) for source in json.loads(listed_sources))
            removed += self._delete_pairs("record_subjects", ("subject_token", "bytea"), "record_id", pairs)
            removed += self._delete_pairs("derivations", ("source_id", "text"), "derived_id", sources)
            for sql in (
                f"DELETE FROM records WHERE {self._by_ids(len(part))}",  # before their lineage rows
                f"DELETE FROM lineage WHERE {of_ids}",
                f"DELETE FROM derivations WHERE {self._d.any_of('source_id', 'text', len(part))}",
            ):
                removed += self._changed(sql, listed)
        self._insert_rows(
            "erased_records", "record_id, version", ("text", "bigint"), [(i, version) for i in ids]
        )
        for table, tokens in (("scopes", scopes), ("subjects", subjects)):
            for part in self._d.chunks(tokens):
                sql = f"DELETE FROM {table} WHERE wrapped IS NULL AND {self._d.any_of('token', 'bytea', len(part))}"
                removed += self._changed(sql, self._d.list_args(part))
        return removed

    def erased_version(self, record_id: str) -> int | None:
        value = self._get("SELECT version FROM erased_records WHERE record_id=?", (record_id,))
        return None if value is None else int(value)

    def delete_hidden(self, ids: Sequence[str]) -> int:
        """Reclaim rows hidden by an operational forget (their lineage stays, W3)."""
        removed = 0
        for part in self._d.chunks(ids):
            sql = f"DELETE FROM records WHERE hidden_version IS NOT NULL AND {self._by_ids(len(part))}"
            removed += self._changed(sql, self._d.list_args(part))
        return removed

    def sweep_expired(self, now: float, limit: int) -> int:
        """Delete up to ``limit`` expired rows (content key and ciphertext); lineage is kept
        (expiry is operational)."""
        sql = (
            "DELETE FROM records WHERE version IN "
            "(SELECT version FROM records WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)"
        )
        return self._changed(sql, (now, limit))

    # -- key rotation and backups -------------------------------------------------------
    def wrapped_keys(self) -> list[tuple[str, Any, bytes, int]]:
        """Every live wrapped key: (table, primary key, wrapped, epoch)."""
        rows: list[tuple[str, Any, bytes, int]] = []
        for table, pk in WRAPPED_TABLES:
            sql = f"SELECT {pk}, wrapped, epoch FROM {table} WHERE wrapped IS NOT NULL" + self._d.order(pk)
            rows.extend((table, k, bytes(w), int(e)) for k, w, e in self._run(sql))
        return rows

    def epochs_in_use(self) -> set[int]:
        return epochs_in_use(self._run)

    def insert_probe_key(self, request_id: str, wrapped: bytes, epoch: int) -> None:
        self._run(
            "INSERT INTO probe_keys (request_id, wrapped, epoch) VALUES (?,?,?) "
            "ON CONFLICT (request_id) DO UPDATE SET wrapped=excluded.wrapped, epoch=excluded.epoch",
            (request_id, wrapped, epoch),
        )

    def probe_key(self, request_id: str) -> tuple[bytes, int] | None:
        row = self._run("SELECT wrapped, epoch FROM probe_keys WHERE request_id=?", (request_id,)).fetchone()
        return None if row is None else (bytes(row[0]), int(row[1]))

    def delete_probe_key(self, request_id: str) -> None:
        self._run("DELETE FROM probe_keys WHERE request_id=?", (request_id,))

    def probe_epochs(self) -> dict[str, int]:
        return {str(r[0]): int(r[1]) for r in self._run("SELECT request_id, epoch FROM probe_keys")}

    def probe_key_epochs(self) -> set[int]:
        return {int(r[0]) for r in self._run("SELECT DISTINCT epoch FROM probe_keys")}

    # -- erasure requests and audit ----------------------------------------------------
    def insert_erasure(self, row: ErasureRow, *, replace: bool = False) -> None:
        conflict = (
            "DO UPDATE SET " + ", ".join(f"{c}=excluded.{c}" for c in ERASURE_FIELDS if c != "id")
            if replace
            else "DO NOTHING"
        )
        self._run(
            f"INSERT INTO erasures ({ERASURE_COLS}) VALUES ({','.join('?' * len(ERASURE_FIELDS))}) "
            f"ON CONFLICT (id) {conflict}",
            tuple(getattr(row, c) for c in ERASURE_FIELDS),
        )
        if row.applied is not None or replace:
            self.set_applied(row.id, row.applied)

    def erasure(self, request_id: str) -> ErasureRow | None:
        row = self._run(f"{ERASURE_SELECT} WHERE e.id=?", (request_id,)).fetchone()
        return None if row is None else ErasureRow(*row)

    def erasure_layers(self, request_id: str) -> str | None:
        value = self._get("SELECT layers FROM erasures WHERE id=?", (request_id,))
        return None if value is None else str(value)

    def erasures(self, states: Sequence[str] | None = None) -> list[ErasureRow]:
        sql = ERASURE_SELECT
        args: list[Any] = []
        if states is not None:
            sql += f" WHERE {self._d.any_of('e.state', 'text', len(states))}"
            args = self._d.list_args(states)
        return [ErasureRow(*r) for r in self._run(sql + " ORDER BY e.version, e.id", args)]

    def update_erasure(self, request_id: str, **fields: Any) -> None:
        """Rewrites the whole row (its plan too): a large request's cursors are not kept here."""
        if not fields or not set(fields) <= set(ERASURE_FIELDS):
            raise ValueError(f"unknown erasure fields: {sorted(set(fields) - set(ERASURE_FIELDS))}")
        assignments = ", ".join(f"{name}=?" for name in fields)
        self._run(f"UPDATE erasures SET {assignments} WHERE id=?", (*fields.values(), request_id))

    def erasure_ids(self) -> set[str]:
        return {r[0] for r in self._run("SELECT id FROM erasures")}

    def unapplied_erasures(self) -> list[ErasureRow]:
        sql = f"{ERASURE_SELECT} WHERE p.applied IS NOT NULL ORDER BY e.version, e.id"
        return [ErasureRow(*r) for r in self._run(sql)]

    def apply_cursor(self, request_id: str) -> int | None:
        value = self._get("SELECT applied FROM erasure_progress WHERE request_id=?", (request_id,))
        return None if value is None else int(value)

    def set_applied(self, request_id: str, applied: int | None) -> None:
        self._run(
            "INSERT INTO erasure_progress (request_id, applied) VALUES (?,?) "
            "ON CONFLICT (request_id) DO UPDATE SET applied=excluded.applied",
            (request_id, applied),
        )
        self._drop_finished_progress(request_id)

    def purge_progress(self, request_id: str) -> tuple[int, int]:
        row = self._run(
            "SELECT purged, rows_removed FROM erasure_progress WHERE request_id=?", (request_id,)
        ).fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def set_purge_progress(self, request_id: str, done: int | None, removed: int = 0) -> None:
        self._run(
            "INSERT INTO erasure_progress (request_id, purged, rows_removed) VALUES (?,?,?) "
            "ON CONFLICT (request_id) DO UPDATE SET purged=excluded.purged, rows_removed=excluded.rows_removed",
            (request_id, done or 0, removed if done is not None else 0),
        )
        self._drop_finished_progress(request_id)

    def _drop_finished_progress(self, request_id: str) -> None:
        self._run(
            "DELETE FROM erasure_progress WHERE request_id=? AND applied IS NULL AND purged=0 AND rows_removed=0",
            (request_id,),
        )

    def audit_tail(self) -> tuple[int, str] | None:
        return audit_tail_of(self._run(AUDIT_TAIL).fetchone())

    def append_audit(self, seq: int, entry: str) -> None:
        self._run("INSERT INTO audit (seq, entry) VALUES (?,?)", (seq, entry))

    def audit_entries(self) -> list[str]:
        return [r[0] for r in self._run("SELECT entry FROM audit ORDER BY seq")]

    # -- downstream consumers (content-free: ids, versions, times, their own JSON) -----------
    def insert_consumer(self, consumer_id: str, name: str, ack_days: int, registered_at: str) -> None:
        self._run(
            "INSERT INTO consumers (id, name, ack_days, registered_at) VALUES (?,?,?,?)",
            (consumer_id, name, ack_days, registered_at),
        )

    def consumers(self) -> list[tuple[str, str, int, str]]:
        rows = self._run("SELECT id, name, ack_days, registered_at FROM consumers ORDER BY registered_at, id")
        return [(str(r[0]), str(r[1]), int(r[2]), str(r[3])) for r in rows]

    def insert_takes(self, consumer_id: str, taken: Sequence[tuple[str, int]], taken_at: str) -> None:
        self._insert_rows(
            "consumer_takes",
            "record_id, consumer_id, version, taken_at",
            ("text", "text", "bigint", "text"),
            [(record_id, consumer_id, version, taken_at) for record_id, version in taken],
        )

    def takers_of(self, record_ids: Sequence[str]) -> list[tuple[str, str, int]]:
        return takers_of(self._in_parts(TAKERS_OF, TAKERS_OF_IDS, "text", record_ids))

    def insert_consumer_events(self, rows: Sequence[tuple[str, str, str, str, str]]) -> None:
        for row in rows:
            self._run(
                "INSERT INTO consumer_events (consumer_id, request_id, records, created_at, deadline) "
                "VALUES (?,?,?,?,?)",
                row,
            )

    def consumer_events(
        self, consumer_id: str | None, request_id: str | None
    ) -> list[tuple[str, str, str, str, str, str | None, str | None]]:
        text = self._d.param("text")
        rows = self._run(
            "SELECT consumer_id, request_id, records, created_at, deadline, acknowledged_at, evidence "
            f"FROM consumer_events WHERE ({text} IS NULL OR consumer_id = ?) AND ({text} IS NULL OR request_id = ?) "
            "ORDER BY created_at, request_id, consumer_id",
            (consumer_id, consumer_id, request_id, request_id),
        )
        return [(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]

    def acknowledge_consumer_event(
        self, consumer_id: str, request_id: str, acknowledged_at: str, evidence: str
    ) -> None:
        self._run(
            "UPDATE consumer_events SET acknowledged_at=?, evidence=? WHERE consumer_id=? AND request_id=?",
            (acknowledged_at, evidence, consumer_id, request_id),
        )
