"""SQLite backend: every SQL statement of the embedded store. Every ``sqlite3`` error it meets
becomes a :class:`cenotaph.errors.StorageError` through ``errors.translate``."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import StorageError
from ..base import ErasureRow, LineageRow, RecordRow, ScopeKeyRow, lineage_values, run_after_commit
from ..ops import OpRunner
from .errors import busy_error, is_busy, translate
from .schema import MIGRATIONS, statements

if TYPE_CHECKING:
    from .physical import SQLitePhysical

__all__ = ["SQLiteBackend", "SQLITE_SETTINGS", "DB_NAME", "read_only", "unwritable"]

DB_NAME = "cenotaph.db"

BUSY_TIMEOUT_ENV = "CENOTAPH_BUSY_TIMEOUT_MS"


def busy_timeout_ms() -> int:
    """How long a write waits for another process's write transaction (default 30 s)."""
    try:
        return max(0, int(os.environ.get(BUSY_TIMEOUT_ENV, "30000")))
    except ValueError:
        return 30_000


# Every connection setting, with why. Applied (and secure_delete read back) on each connection.
SQLITE_SETTINGS: tuple[tuple[str, str], ...] = (
    ("journal_mode", "WAL"),  # never PERSIST: it keeps pre-images after commit (HINTS)
    ("synchronous", "FULL"),  # W7: a returned write survives power loss
    ("secure_delete", "ON"),  # S3: zero freed pages ourselves, never trust the build default
    # busy_timeout (busy_timeout_ms()): wait for other processes' writes, then StorageError
    ("temp_store", "MEMORY"),  # no temp files outside the data directory
    ("trusted_schema", "OFF"),
    ("foreign_keys", "OFF"),
)


def unwritable(directory: Path) -> list[Path]:
    """The data directory and database files (``-wal`` and ``-shm`` too, if they exist) this
    process may not write. Any at all, and the store is opened read-only: reads work, and a step
    that writes raises StorageError naming them."""
    db = directory / DB_NAME
    paths = [directory, db, db.with_name(DB_NAME + "-wal"), db.with_name(DB_NAME + "-shm")]
    return [p for p in paths if (p == directory or p.exists()) and not os.access(p, os.W_OK)]


def read_only(directory: Path) -> bool:
    return bool(unwritable(directory))


# One write lock per database file per process: stores of one process that open the same file
# (a store per thread, a server's workers) queue on it, blocked and woken in turn, instead of
# polling SQLite's lock against each other, where a writer could lose every race for the whole
# busy timeout. Other processes still meet at SQLite's own lock (see SQLiteBackend._begin).
_FILE_LOCKS: dict[tuple[int, int], threading.Lock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


def _file_lock(path: Path) -> threading.Lock:
    info = path.stat()
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault((info.st_dev, info.st_ino), threading.Lock())


def _nobody_writes(db: Path) -> bool:
    """Only root could change this database: a read-only file system; a file no one may write (a
    connection that cannot write the file cannot write its WAL either); or a directory no one may
    write and no -wal to write into (a WAL writer would have to create it)."""
    if os.statvfs(db.parent).f_flag & os.ST_RDONLY:
        return True
    if not os.stat(db).st_mode & 0o222:
        return True
    wal = db.with_name(db.name + "-wal")
    return not os.stat(db.parent).st_mode & 0o222 and not wal.exists()


def _read_only_uri(path: Path) -> str:
    """How to open ``path`` read-only. When nothing can change the database and no WAL content is
    left, it is opened immutable: SQLite then needs no -wal or -shm (which a read-only directory
    could not hold, and which it would otherwise leave behind, read-only, to block the next writer).
    Otherwise it is read through the -wal and -shm, seeing every commit other processes make."""
    wal = path.with_name(path.name + "-wal")
    immutable = _nobody_writes(path) and (not wal.exists() or wal.stat().st_size == 0)
    return f"{path.as_uri()}?mode=ro" + ("&immutable=1" if immutable else "")


_RECORD_COLS = (
    "id, scope_token, key_token, version, expires_at, hidden_version, wrapped, epoch, ciphertext, vector"
)
if RecordRow._fields != tuple(c.strip() for c in _RECORD_COLS.split(",")):
    raise RuntimeError("RecordRow's fields must follow _RECORD_COLS (rows are inserted as they are)")
_R_COLS = ", ".join(f"r.{c.strip()}" for c in _RECORD_COLS.split(","))
_LINEAGE_COLS = (
    "record_id, scope_token, key_token, version, wrapped, epoch, subject_tokens, subjects, sources, "
    "destroyed_version, forgotten_version"
)


# a key's rows in a few scopes with their lineage rows, and the snapshot's data version (one row
# of NULLs when no scope holds the key): a read learns whether another connection committed from
# the statement that reads its rows
# A slot's record row, if any, is its newest lineage version's (a write replaces the row it
# finds, so an older version never keeps one): one probe of lineage_slot per scope, newest first.
def _newest(n: int) -> str:
    return (
        f"(SELECT version FROM lineage WHERE scope_token=?{n} AND key_token=?1 ORDER BY version DESC LIMIT 1)"
    )


_SLOT_SELECT = (
    "SELECT d.data_version, "
    + ", ".join(f"r.{c.strip()}" for c in _RECORD_COLS.split(","))
    + ", "
    + ", ".join(f"l.{c.strip()}" for c in _LINEAGE_COLS.split(","))
    + " FROM pragma_data_version d LEFT JOIN records r ON r.version IN "
)
_SLOT_SQL = {
    n: f"{_SLOT_SELECT}({','.join(_newest(i) for i in range(2, n + 2))}) LEFT JOIN lineage l ON l.version = r.version"
    for n in range(1, 65)
}
_ERASURE_COLS = (
    "id, mode, target_kind, target, version, requested_at, state, layers, plan, probes, horizon, "
    "horizon_reason, verified_at, scan"
)
# a request row with its apply cursor, which lives apart (erasure_progress: see schema 6)
_ERASURE_SELECT = (
    "SELECT "
    + ", ".join(f"e.{c.strip()}" for c in _ERASURE_COLS.split(","))
    + ", p.applied FROM erasures e LEFT JOIN erasure_progress p ON p.request_id = e.id"
)
_WRAPPED_TABLES = (
    ("records", "version"),
    ("lineage", "record_id"),
    ("scopes", "token"),
    ("subjects", "token"),
)
_CHUNK = 500  # bound on host parameters per statement
_POLL_FIRST_S = 0.0005  # a writer waiting for the write lock tries again after this,
_POLL_MAX_S = 0.002  # doubling up to this (see SQLiteBackend._begin)


# every column the store writes in plain: ids, states, content-free JSON (tokens as hex, counts,
# versions, timestamps) and the schema; every other column is an HMAC token or AES-GCM ciphertext
_PLAIN_COLUMNS = (
    ("audit", "entry"),
    *(("erasures", c) for c in ("id", "mode", "target_kind", "requested_at", "state", "layers", "plan")),
    *(("erasures", c) for c in ("horizon", "horizon_reason", "verified_at", "scan")),
    ("tombstones", "request_id"),
    ("tombstones", "kind"),
    ("records", "id"),
    ("lineage", "record_id"),
    ("lineage", "sources"),
    ("derivations", "source_id"),
    ("derivations", "derived_id"),
    ("erased_records", "record_id"),
    ("probe_keys", "request_id"),
    ("reauth_tokens", "kind"),
    ("meta", "name"),
    ("sqlite_master", "sql"),
)


def _by_ids(n: int) -> str:
    """The records rows of ``n`` record ids, found through their lineage rows (schema 8: records
    are keyed by version alone, the id is indexed once, in lineage)."""
    return f"version IN (SELECT version FROM lineage WHERE record_id IN ({_marks(n)}))"


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _record(row: Sequence[Any]) -> RecordRow:
    return RecordRow(*row)


def _lineage(row: Sequence[Any]) -> LineageRow:
    values = list(row)
    values[8] = () if values[8] == "[]" else tuple(json.loads(values[8]))
    return LineageRow(*values)


def _epochs_in_use(conn: sqlite3.Connection) -> set[int]:
    found: set[int] = set()
    for table, _ in (*_WRAPPED_TABLES, ("probe_keys", "request_id")):
        sql = f"SELECT DISTINCT epoch FROM {table} WHERE epoch IS NOT NULL AND wrapped IS NOT NULL"
        found.update(int(r[0]) for r in conn.execute(sql))  # a destroyed key needs no epoch
    return found


class SQLiteTxn(OpRunner):
    """A transaction on one connection. Every handler is plain SQL over tokens and ciphertext."""

    def __init__(self, conn: sqlite3.Connection, *, commits: bool = True) -> None:
        self._c = conn
        self._commits = commits
        self._accept_writes(commits)
        self._after: list[Callable[[], None]] = []

    def after_commit(self, action: Callable[[], None]) -> None:
        if not self._commits:  # a read never commits: the action would silently never run
            raise RuntimeError("after_commit needs a write transaction (backend.write())")
        self._after.append(action)

    # -- savepoints (a group commit undoes one refused write, keeping the rest) ------
    def savepoint(self) -> None:
        self._c.execute("SAVEPOINT cenotaph_write")

    def release_savepoint(self) -> None:
        self._c.execute("RELEASE cenotaph_write")

    def rollback_to_savepoint(self) -> None:
        self._c.execute("ROLLBACK TO cenotaph_write")
        self._c.execute("RELEASE cenotaph_write")

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        row = self._c.execute(sql, args).fetchone()
        return None if row is None else row[0]

    # -- change marker and clock -------------------------------------------------------
    def marker(self) -> int:
        """``data_version`` as of this snapshot (the statement begins it, if nothing did yet)."""
        return int(self._one("PRAGMA data_version"))

    def clock(self) -> int:
        return int(self._one("SELECT value FROM meta WHERE name='clock'"))

    def set_clock(self, version: int) -> None:
        self._c.execute("UPDATE meta SET value=? WHERE name='clock' AND value<?", (version, version))

    def meta(self, name: str) -> int | None:
        value = self._one("SELECT value FROM meta WHERE name=?", (name,))
        return None if value is None else int(value)

    def set_meta(self, name: str, value: int) -> None:
        self._c.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (name, value))

    def meta_all(self) -> dict[str, int]:
        return {str(n): int(v) for n, v in self._c.execute("SELECT name, value FROM meta")}

    def forget_epoch(self) -> int:
        return int(self._one("SELECT value FROM meta WHERE name='forget_epoch'"))

    def bump_forget_epoch(self) -> None:
        self._c.execute("UPDATE meta SET value=value+1 WHERE name='forget_epoch'")

    # -- tombstones ------------------------------------------------------------------
    def _max_by_target(self, table: str, targets: Sequence[bytes]) -> dict[bytes, int]:
        found: dict[bytes, int] = {}
        for part in _chunks(list(targets)):
            sql = f"SELECT target, max(version) FROM {table} WHERE target IN ({_marks(len(part))}) GROUP BY target"
            found.update({bytes(t): int(v) for t, v in self._c.execute(sql, part)})
        return found

    def tombstone_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]:
        return self._max_by_target("tombstones", targets)

    def lift_versions(self, targets: Sequence[bytes]) -> dict[bytes, int]:
        return self._max_by_target("lifts", targets)

    def all_lifts(self) -> list[tuple[bytes, int]]:
        return [(bytes(t), int(v)) for t, v in self._c.execute("SELECT target, version FROM lifts")]

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
            for d, k, t, v, c, s in self._c.execute(sql)
        ]

    def insert_tombstones(self, rows: Iterable[tuple[bytes, int, str, str]]) -> None:
        self._c.executemany("INSERT OR IGNORE INTO tombstones VALUES (?,?,?,?)", rows)

    def insert_lift(self, target: bytes, version: int) -> None:
        self._c.execute("INSERT OR IGNORE INTO lifts VALUES (?,?)", (target, version))

    def insert_reauth(
        self, digest: bytes, kind: str, target: bytes, version: int, subject: bytes | None = None
    ) -> None:
        self._c.execute(
            "INSERT INTO reauth_tokens (digest, kind, target, issued_version, subject) VALUES (?,?,?,?,?)",
            (digest, kind, target, version, subject),
        )

    def reauth(self, digest: bytes) -> tuple[str, bytes, int, int | None, bytes | None] | None:
        row = self._c.execute(
            "SELECT kind, target, issued_version, consumed_version, subject FROM reauth_tokens WHERE digest=?",
            (digest,),
        ).fetchone()
        if row is None:
            return None
        return row[0], bytes(row[1]), int(row[2]), row[3], None if row[4] is None else bytes(row[4])

    def consume_reauth(self, digest: bytes, version: int) -> None:
        self._c.execute("UPDATE reauth_tokens SET consumed_version=? WHERE digest=?", (version, digest))

    def unhidden(self, ids: Sequence[str]) -> list[str]:
        found: list[str] = []
        for part in _chunks(list(ids)):
            sql = f"SELECT id FROM records WHERE hidden_version IS NULL AND {_by_ids(len(part))}"
            found.extend(r[0] for r in self._c.execute(sql, part))
        return found

    def keyed(self, ids: Sequence[str]) -> list[str]:
        found: set[str] = set()
        for part in _chunks(list(ids)):
            marks = _marks(len(part))
            for sql in (
                f"SELECT id FROM records WHERE wrapped IS NOT NULL AND {_by_ids(len(part))}",
                f"SELECT record_id FROM lineage WHERE wrapped IS NOT NULL AND record_id IN ({marks})",
            ):
                found.update(r[0] for r in self._c.execute(sql, part))
        return sorted(found)

    # -- keys ------------------------------------------------------------------------
    def scope_rows(self, tokens: Sequence[bytes]) -> dict[bytes, ScopeKeyRow]:
        found: dict[bytes, ScopeKeyRow] = {}
        for part in _chunks(list(tokens)):
            sql = f"SELECT token, parent, wrapped, epoch FROM scopes WHERE token IN ({_marks(len(part))})"
            for row in self._c.execute(sql, part):
                found[bytes(row[0])] = ScopeKeyRow(*row)
        return found

    def insert_scopes(self, rows: Iterable[ScopeKeyRow]) -> None:
        self._c.executemany(
            "INSERT OR IGNORE INTO scopes (token, parent, wrapped, epoch) VALUES (?,?,?,?)",
            ((r.token, r.parent, r.wrapped, r.epoch) for r in rows),
        )

    def subject_rows(self, tokens: Sequence[bytes]) -> dict[bytes, tuple[bytes | None, int | None]]:
        found: dict[bytes, tuple[bytes | None, int | None]] = {}
        for part in _chunks(list(tokens)):
            sql = f"SELECT token, wrapped, epoch FROM subjects WHERE token IN ({_marks(len(part))})"
            found.update({bytes(t): (w, e) for t, w, e in self._c.execute(sql, part)})
        return found

    def insert_subjects(self, rows: Iterable[tuple[bytes, bytes, int]]) -> None:
        self._c.executemany("INSERT OR IGNORE INTO subjects (token, wrapped, epoch) VALUES (?,?,?)", rows)

    def replace_scope_key(self, token: bytes, wrapped: bytes, epoch: int) -> None:
        self._c.execute(
            "UPDATE scopes SET wrapped=?, epoch=?, destroyed_version=NULL WHERE token=?",
            (wrapped, epoch, token),
        )

    def replace_subject_key(self, token: bytes, wrapped: bytes, epoch: int) -> None:
        self._c.execute(
            "UPDATE subjects SET wrapped=?, epoch=?, destroyed_version=NULL WHERE token=?",
            (wrapped, epoch, token),
        )

    def subtree_tokens(self, token: bytes) -> list[bytes]:
        sql = (
            "WITH RECURSIVE sub(t) AS (SELECT ? UNION SELECT s.token FROM scopes s JOIN sub ON s.parent = sub.t) "
            "SELECT t FROM sub"
        )
        return [bytes(r[0]) for r in self._c.execute(sql, (token,))]

    # -- records ---------------------------------------------------------------------
    def records_in_slots(self, slots: Sequence[tuple[bytes, bytes]]) -> list[RecordRow]:
        if len(slots) == 1:
            sql = (
                f"SELECT {_RECORD_COLS} FROM records WHERE version = (SELECT version FROM lineage "
                "WHERE scope_token=? AND key_token=? ORDER BY version DESC LIMIT 1)"
            )
            row = self._c.execute(sql, slots[0]).fetchone()
            return [] if row is None else [_record(row)]
        # one statement per scope, its keys in an IN list: one index probe per slot (an IN list of
        # scopes times one of keys probes every pair, 500 x 500 for a batch over many scopes)
        by_scope: dict[bytes, set[bytes]] = {}
        for scope_token, key_token in slots:
            by_scope.setdefault(scope_token, set()).add(key_token)
        rows: list[RecordRow] = []
        for scope_token, keys in by_scope.items():
            for part in _chunks(sorted(keys)):
                sql = (
                    f"SELECT {_RECORD_COLS} FROM records WHERE version IN (SELECT max(version) FROM "
                    f"lineage WHERE scope_token=? AND key_token IN ({_marks(len(part))}) GROUP BY key_token)"
                )
                rows.extend(_record(row) for row in self._c.execute(sql, (scope_token, *part)))
        return rows

    def key_records(
        self, scope_tokens: Sequence[bytes], key_token: bytes
    ) -> tuple[int, list[tuple[RecordRow, LineageRow | None]]]:
        """The rows (and lineage rows) of ``key`` in each of a few scopes, and the data version
        of the snapshot they were read in: one statement."""
        found: list[tuple[RecordRow, LineageRow | None]] = []
        rows = self._c.execute(_SLOT_SQL[len(scope_tokens)], (key_token, *scope_tokens)).fetchall()
        for row in rows:
            if row[1] is not None:
                found.append((RecordRow(*row[1:11]), None if row[11] is None else _lineage(row[11:])))
        return int(rows[0][0]), found

    def record(self, record_id: str) -> RecordRow | None:
        row = self._c.execute(
            f"SELECT {_RECORD_COLS} FROM records WHERE {_by_ids(1)}", (record_id,)
        ).fetchone()
        return None if row is None else _record(row)

    def records_in_scopes(self, scope_tokens: Sequence[bytes]) -> list[RecordRow]:
        rows: list[RecordRow] = []
        for part in _chunks(list(scope_tokens)):
            sql = (
                f"SELECT {_R_COLS} FROM lineage l JOIN records r ON r.version = l.version "
                f"WHERE l.scope_token IN ({_marks(len(part))})"
            )
            rows.extend(_record(r) for r in self._c.execute(sql, part))
        return rows

    def live_records(self, after_version: int = 0) -> Iterator[RecordRow]:
        sql = (
            f"SELECT {_RECORD_COLS} FROM records WHERE version > ? AND hidden_version IS NULL "
            "AND wrapped IS NOT NULL"
        )
        for row in self._c.execute(sql, (after_version,)).fetchall():
            yield _record(row)

    def insert_records(self, rows: Sequence[RecordRow], lineage: Sequence[LineageRow]) -> None:
        # a RecordRow is a tuple in _RECORD_COLS order (checked at import): no copy per row
        self._c.executemany(f"INSERT INTO records ({_RECORD_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
        self._c.executemany(
            f"INSERT INTO lineage ({_LINEAGE_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [lineage_values(x) for x in lineage],
        )
        self._c.executemany(
            "INSERT OR IGNORE INTO record_subjects VALUES (?,?)",
            [
                (x.subject_tokens[i : i + 32], x.record_id)
                for x in lineage
                for i in range(0, len(x.subject_tokens), 32)
            ],
        )
        derived = [(src, x.record_id) for x in lineage for src in x.sources]
        if derived:
            self._c.executemany("INSERT OR IGNORE INTO derivations VALUES (?,?)", derived)

    def store_vectors(self, cells: Sequence[tuple[bytes, str, int]]) -> int:
        """Keep ``(cell, id, version)`` sealed vectors of rows still live at that version; returns how many."""
        cursor = self._c.executemany(
            "INSERT OR REPLACE INTO vectors (version, cell) SELECT version, ?1 FROM records "
            "WHERE version=?3 AND id=?2 AND wrapped IS NOT NULL AND hidden_version IS NULL",
            cells,
        )
        return cursor.rowcount

    def live_vectors(self, after_version: int = 0) -> list[tuple[str, int, bytes, bytes, int, bytes | None]]:
        sql = (
            "SELECT r.id, r.version, r.scope_token, r.wrapped, r.epoch, v.cell FROM records r "
            "LEFT JOIN vectors v ON v.version = r.version "
            "WHERE r.version > ? AND r.hidden_version IS NULL AND r.wrapped IS NOT NULL"
        )
        return self._c.execute(sql, (after_version,)).fetchall()

    def vector_cell(self, version: int) -> bytes | None:
        row = self._c.execute("SELECT cell FROM vectors WHERE version=?", (version,)).fetchone()
        return None if row is None else bytes(row[0])

    def delete_records(self, ids: Sequence[str]) -> None:
        if ids:
            self._c.executemany(f"DELETE FROM records WHERE {_by_ids(1)}", [(i,) for i in ids])

    def lineage(self, ids: Sequence[str]) -> dict[str, LineageRow]:
        found: dict[str, LineageRow] = {}
        for part in _chunks(list(ids)):
            sql = f"SELECT {_LINEAGE_COLS} FROM lineage WHERE record_id IN ({_marks(len(part))})"
            for row in self._c.execute(sql, part):
                found[row[0]] = _lineage(row)
        return found

    def lineage_tokens(self, ids: Sequence[str]) -> list[tuple[bytes, bytes]]:
        found: list[tuple[bytes, bytes]] = []
        for part in _chunks(list(ids)):
            sql = f"SELECT scope_token, subject_tokens FROM lineage WHERE record_id IN ({_marks(len(part))})"
            found.extend((bytes(s), bytes(t)) for s, t in self._c.execute(sql, part))
        return found

    def lineage_keyed(self, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for part in _chunks(list(ids)):
            sql = f"SELECT record_id FROM lineage WHERE wrapped IS NOT NULL AND record_id IN ({_marks(len(part))})"
            found.update(r[0] for r in self._c.execute(sql, part))
        return found

    def lineage_ids(
        self, scope_tokens: Sequence[bytes], key_token: bytes | None, *, unforgotten: bool = False
    ) -> list[str]:
        ids: list[str] = []
        for part in _chunks(list(scope_tokens)):
            sql = f"SELECT record_id FROM lineage WHERE scope_token IN ({_marks(len(part))})"
            args: list[Any] = list(part)
            if key_token is not None:
                sql += " AND key_token=?"
                args.append(key_token)
            if unforgotten:
                sql += " AND forgotten_version IS NULL"
            ids.extend(r[0] for r in self._c.execute(sql + " AND destroyed_version IS NULL", args))
        return ids

    def lineage_ids_for_subject(self, subject_token: bytes) -> list[str]:
        sql = (
            "SELECT rs.record_id FROM record_subjects rs JOIN lineage l ON l.record_id = rs.record_id "
            "WHERE rs.subject_token=? AND l.destroyed_version IS NULL"
        )
        return [r[0] for r in self._c.execute(sql, (subject_token,))]

    def derived_closure(self, ids: Sequence[str]) -> list[str]:
        """Every record derived, transitively, from any of ``ids`` (not including them)."""
        seen = set(ids)
        frontier = list(ids)
        while frontier:
            nxt: list[str] = []
            for part in _chunks(frontier):
                sql = f"SELECT derived_id FROM derivations WHERE source_id IN ({_marks(len(part))})"
                for (derived,) in self._c.execute(sql, part):
                    if derived not in seen:
                        seen.add(derived)
                        nxt.append(derived)
            frontier = nxt
        return sorted(seen - set(ids))

    def written_since(self, version: int) -> list[LineageRow]:
        # every write inserts a records row at a fresh version (the table's key, so this is a
        # range), and a replaced version's lineage stays under the same slot
        sql = (
            f"SELECT {_LINEAGE_COLS} FROM lineage WHERE version > ?1 AND (scope_token, key_token) IN "
            "(SELECT scope_token, key_token FROM records WHERE version > ?1) ORDER BY version"
        )
        return [_lineage(row) for row in self._c.execute(sql, (version,))]

    def unforgotten_in_scopes(
        self, scope_tokens: Sequence[bytes], key_token: bytes | None, before: int, *, compliance: bool
    ) -> list[str]:
        found: set[str] = set()
        kept = "l.destroyed_version IS NULL" if compliance else "l.forgotten_version IS NULL"
        shown = (
            "(r.hidden_version IS NULL OR r.wrapped IS NOT NULL)"
            if compliance
            else "r.hidden_version IS NULL"
        )
        for part in _chunks(list(scope_tokens)):
            marks = _marks(len(part))
            key_sql, args = (
                ("", [*part, before])
                if key_token is None
                else (" AND l.key_token=?", [*part, key_token, before])
            )
            where = f"l.scope_token IN ({marks}){key_sql} AND l.version < ?"
            for sql in (
                f"SELECT l.record_id FROM lineage l WHERE {where} AND {kept}",
                f"SELECT r.id FROM lineage l JOIN records r ON r.version = l.version WHERE {where} AND {shown}",
            ):
                found.update(r[0] for r in self._c.execute(sql, args))
        return sorted(found)

    def unforgotten_for_subject(self, subject_token: bytes, before: int, *, compliance: bool) -> list[str]:
        kept = "l.destroyed_version IS NULL" if compliance else "l.forgotten_version IS NULL"
        shown = (
            "(r.hidden_version IS NULL OR r.wrapped IS NOT NULL)"
            if compliance
            else "r.hidden_version IS NULL"
        )
        found = {
            r[0]
            for sql in (
                "SELECT l.record_id FROM record_subjects rs JOIN lineage l ON l.record_id = rs.record_id "
                f"WHERE rs.subject_token=? AND l.version < ? AND {kept}",
                "SELECT r.id FROM record_subjects rs JOIN lineage l ON l.record_id = rs.record_id "
                "JOIN records r ON r.version = l.version "
                f"WHERE rs.subject_token=? AND r.version < ? AND {shown}",
            )
            for r in self._c.execute(sql, (subject_token, before))
        }
        return sorted(found)

    # -- forgetting ------------------------------------------------------------------
    def hide_records(self, ids: Sequence[str], version: int, mode: str) -> int:
        # one statement per chunk of ids (an UPDATE per id was 1.1 s of a 100k-record forget)
        hidden = 0
        for part in _chunks(list(ids)):
            marks = _marks(len(part))
            self._c.execute(
                f"UPDATE lineage SET forgotten_version=coalesce(forgotten_version, ?) WHERE record_id IN ({marks})",
                (version, *part),
            )
            hidden += self._c.execute(
                f"UPDATE records SET hidden_version=?, hidden_mode=? WHERE hidden_version IS NULL AND {_by_ids(len(part))}",
                (version, mode, *part),
            ).rowcount
        return hidden

    def destroy_record_keys(self, ids: Sequence[str], version: int) -> None:
        for part in _chunks(list(ids)):
            marks = _marks(len(part))
            self._c.execute(
                "UPDATE records SET wrapped=NULL, epoch=NULL, hidden_version=coalesce(hidden_version, ?), "
                f"hidden_mode='compliance' WHERE {_by_ids(len(part))}",
                (version, *part),
            )
            self._c.execute(
                "UPDATE lineage SET wrapped=NULL, subjects=NULL, destroyed_version=coalesce(destroyed_version, ?), "
                f"forgotten_version=coalesce(forgotten_version, ?) WHERE record_id IN ({marks})",
                (version, version, *part),
            )

    def destroy_scope_keys(self, tokens: Sequence[bytes], version: int) -> None:
        self._c.executemany(
            "UPDATE scopes SET wrapped=NULL, epoch=NULL, destroyed_version=coalesce(destroyed_version, ?) "
            "WHERE token=?",
            [(version, t) for t in tokens],
        )

    def destroy_subject_keys(self, tokens: Sequence[bytes], version: int) -> None:
        # an UPDATE only: a subject the store never held (or whose row an earlier purge removed)
        # gets no row, so a repeated erasure leaves nothing behind to remove or to prove
        self._c.executemany(
            "UPDATE subjects SET wrapped=NULL, epoch=NULL, destroyed_version=coalesce(destroyed_version, ?) "
            "WHERE token=?",
            [(version, t) for t in tokens],
        )

    # -- what only a forget's records use, what of a target remains ---------------------
    def child_scopes(self, token: bytes) -> Iterator[bytes]:
        """The scopes whose parent is ``token``, lazily (a caller may stop at the first)."""
        for (child,) in self._c.execute("SELECT token FROM scopes WHERE parent=?", (token,)):
            yield bytes(child)

    def scope_lineage(self, token: bytes) -> Iterator[tuple[str, int, bool]]:
        """(record id, version, keys live) of every record ever written in exactly this scope."""
        sql = "SELECT record_id, version, destroyed_version IS NULL FROM lineage WHERE scope_token=?"
        for record_id, version, live in self._c.execute(sql, (token,)):
            yield str(record_id), int(version), bool(live)

    def subject_lineage(self, token: bytes) -> Iterator[tuple[str, int, bool]]:
        """(record id, version, keys live) of every record ever written carrying the subject."""
        sql = (
            "SELECT l.record_id, l.version, l.destroyed_version IS NULL FROM record_subjects rs "
            "JOIN lineage l ON l.record_id = rs.record_id WHERE rs.subject_token=?"
        )
        for record_id, version, live in self._c.execute(sql, (token,)):
            yield str(record_id), int(version), bool(live)

    def plaintext_holds(self, needle: bytes) -> bool:
        """Does ``needle`` occur in a column the store keeps in plain (ids, request rows, the audit
        log, the schema)? Such bytes are content-free bookkeeping by construction (W4)."""
        for table, column in _PLAIN_COLUMNS:
            sql = f"SELECT 1 FROM {table} WHERE instr(CAST({column} AS BLOB), ?) > 0 LIMIT 1"
            if self._c.execute(sql, (needle,)).fetchone() is not None:
                return True
        return False

    def existing_records(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` still have a row in ``records`` (ciphertext)."""
        found: set[str] = set()
        for part in _chunks(list(ids)):
            sql = f"SELECT id FROM records WHERE {_by_ids(len(part))}"
            found.update(str(r[0]) for r in self._c.execute(sql, part))
        return found

    # -- purge -----------------------------------------------------------------------
    def purge_erased(
        self, ids: Sequence[str], scopes: Sequence[bytes], subjects: Sequence[bytes], version: int
    ) -> int:
        """Delete every row of compliance-erased records, scopes and subjects; returns rows removed."""
        removed = 0
        for part in _chunks(list(ids)):
            marks = _marks(len(part))
            # record_subjects and derivations are keyed by (subject, record) and (source,
            # derived): deleting by the second column alone scans the whole table, so the pairs
            # come from the records' own lineage rows (their subject tokens and sources)
            pairs: list[tuple[bytes, str]] = []
            sources: list[tuple[str, str]] = []
            sql = f"SELECT record_id, subject_tokens, sources FROM lineage WHERE record_id IN ({marks})"
            for record_id, tokens, listed in self._c.execute(sql, part):
                pairs.extend((tokens[i : i + 32], record_id) for i in range(0, len(tokens), 32))
                if listed != "[]":
                    sources.extend((source, record_id) for source in json.loads(listed))
            removed += self._deleted(
                "DELETE FROM record_subjects WHERE subject_token=? AND record_id=?", pairs
            )
            removed += self._deleted("DELETE FROM derivations WHERE source_id=? AND derived_id=?", sources)
            for sql in (
                f"DELETE FROM records WHERE {_by_ids(len(part))}",  # before their lineage rows
                f"DELETE FROM lineage WHERE record_id IN ({marks})",
                f"DELETE FROM derivations WHERE source_id IN ({marks})",
            ):
                removed += self._c.execute(sql, part).rowcount
        self._c.executemany("INSERT OR IGNORE INTO erased_records VALUES (?,?)", [(i, version) for i in ids])
        for table, tokens in (("scopes", scopes), ("subjects", subjects)):
            for part in _chunks(list(tokens)):
                sql = f"DELETE FROM {table} WHERE wrapped IS NULL AND token IN ({_marks(len(part))})"
                removed += self._c.execute(sql, part).rowcount
        return removed

    def _deleted(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> int:
        """Rows removed by one parameterised DELETE run for each of ``rows``."""
        before = self._c.total_changes
        self._c.executemany(sql, rows)
        return self._c.total_changes - before

    def erased_version(self, record_id: str) -> int | None:
        value = self._one("SELECT version FROM erased_records WHERE record_id=?", (record_id,))
        return None if value is None else int(value)

    def delete_hidden(self, ids: Sequence[str]) -> int:
        """Reclaim rows hidden by an operational forget (their lineage stays, W3)."""
        removed = 0
        for part in _chunks(list(ids)):
            sql = f"DELETE FROM records WHERE hidden_version IS NOT NULL AND {_by_ids(len(part))}"
            removed += self._c.execute(sql, part).rowcount
        return removed

    def sweep_expired(self, now: float, limit: int) -> int:
        """Delete up to ``limit`` expired rows (content key and ciphertext); lineage is kept
        (expiry is operational)."""
        sql = (
            "DELETE FROM records WHERE version IN "
            "(SELECT version FROM records WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)"
        )
        return self._c.execute(sql, (now, limit)).rowcount

    # -- key rotation and backups -------------------------------------------------------
    def wrapped_keys(self) -> list[tuple[str, Any, bytes, int]]:
        """Every live wrapped key: (table, primary key, wrapped, epoch)."""
        rows: list[tuple[str, Any, bytes, int]] = []
        for table, pk in _WRAPPED_TABLES:
            sql = f"SELECT {pk}, wrapped, epoch FROM {table} WHERE wrapped IS NOT NULL"
            rows.extend((table, k, bytes(w), int(e)) for k, w, e in self._c.execute(sql))
        return rows

    def rewrap(self, rows: Iterable[tuple[str, Any, bytes, int]]) -> None:
        for table, pk in _WRAPPED_TABLES:
            self._c.executemany(
                f"UPDATE {table} SET wrapped=?, epoch=? WHERE {pk}=?",
                [(w, e, k) for t, k, w, e in rows if t == table],
            )

    def epochs_in_use(self) -> set[int]:
        return _epochs_in_use(self._c)

    def insert_probe_key(self, request_id: str, wrapped: bytes, epoch: int) -> None:
        self._c.execute(
            "INSERT OR REPLACE INTO probe_keys (request_id, wrapped, epoch) VALUES (?,?,?)",
            (request_id, wrapped, epoch),
        )

    def probe_key(self, request_id: str) -> tuple[bytes, int] | None:
        row = self._c.execute(
            "SELECT wrapped, epoch FROM probe_keys WHERE request_id=?", (request_id,)
        ).fetchone()
        return None if row is None else (bytes(row[0]), int(row[1]))

    def delete_probe_key(self, request_id: str) -> None:
        self._c.execute("DELETE FROM probe_keys WHERE request_id=?", (request_id,))

    def probe_key_epochs(self) -> set[int]:
        return {int(r[0]) for r in self._c.execute("SELECT DISTINCT epoch FROM probe_keys")}

    # -- erasure requests and audit ----------------------------------------------------
    def insert_erasure(self, row: ErasureRow, *, replace: bool = False) -> None:
        self._c.execute(
            f"INSERT OR {'REPLACE' if replace else 'IGNORE'} INTO erasures ({_ERASURE_COLS}) VALUES ({_marks(14)})",
            (
                row.id,
                row.mode,
                row.target_kind,
                row.target,
                row.version,
                row.requested_at,
                row.state,
                row.layers,
                row.plan,
                row.probes,
                row.horizon,
                row.horizon_reason,
                row.verified_at,
                row.scan,
            ),
        )
        if row.applied is not None or replace:
            self.set_applied(row.id, row.applied)

    def erasure(self, request_id: str) -> ErasureRow | None:
        row = self._c.execute(f"{_ERASURE_SELECT} WHERE e.id=?", (request_id,)).fetchone()
        return None if row is None else ErasureRow(*row)

    def erasure_layers(self, request_id: str) -> str | None:
        value = self._one("SELECT layers FROM erasures WHERE id=?", (request_id,))
        return None if value is None else str(value)

    def erasures(self, states: Sequence[str] | None = None) -> list[ErasureRow]:
        sql = _ERASURE_SELECT
        args: list[Any] = []
        if states is not None:
            sql += f" WHERE e.state IN ({_marks(len(states))})"
            args = list(states)
        return [ErasureRow(*r) for r in self._c.execute(sql + " ORDER BY e.version", args)]

    def update_erasure(self, request_id: str, **fields: Any) -> None:
        """Rewrites the whole row (its plan too): a large request's cursors are not kept here."""
        allowed = set(_ERASURE_COLS.replace(" ", "").split(","))
        if not fields or not set(fields) <= allowed:
            raise ValueError(f"unknown erasure fields: {sorted(set(fields) - allowed)}")
        assignments = ", ".join(f"{name}=?" for name in fields)
        self._c.execute(f"UPDATE erasures SET {assignments} WHERE id=?", (*fields.values(), request_id))

    def erasure_ids(self) -> set[str]:
        return {r[0] for r in self._c.execute("SELECT id FROM erasures")}

    def unapplied_erasures(self) -> list[ErasureRow]:
        sql = f"{_ERASURE_SELECT} WHERE p.applied IS NOT NULL ORDER BY e.version"
        return [ErasureRow(*r) for r in self._c.execute(sql)]

    def apply_cursor(self, request_id: str) -> int | None:
        value = self._one("SELECT applied FROM erasure_progress WHERE request_id=?", (request_id,))
        return None if value is None else int(value)

    def set_applied(self, request_id: str, applied: int | None) -> None:
        self._c.execute(
            "INSERT INTO erasure_progress (request_id, applied) VALUES (?,?) "
            "ON CONFLICT(request_id) DO UPDATE SET applied=excluded.applied",
            (request_id, applied),
        )
        self._drop_finished_progress(request_id)

    def purge_progress(self, request_id: str) -> tuple[int, int]:
        row = self._c.execute(
            "SELECT purged, rows_removed FROM erasure_progress WHERE request_id=?", (request_id,)
        ).fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def set_purge_progress(self, request_id: str, done: int | None, removed: int = 0) -> None:
        self._c.execute(
            "INSERT INTO erasure_progress (request_id, purged, rows_removed) VALUES (?,?,?) "
            "ON CONFLICT(request_id) DO UPDATE SET purged=excluded.purged, rows_removed=excluded.rows_removed",
            (request_id, done or 0, removed if done is not None else 0),
        )
        self._drop_finished_progress(request_id)

    def _drop_finished_progress(self, request_id: str) -> None:
        self._c.execute(
            "DELETE FROM erasure_progress WHERE request_id=? AND applied IS NULL AND purged=0 AND rows_removed=0",
            (request_id,),
        )

    def audit_tail(self) -> tuple[int, str] | None:
        row = self._c.execute("SELECT seq, entry FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def append_audit(self, seq: int, entry: str) -> None:
        self._c.execute("INSERT INTO audit VALUES (?,?)", (seq, entry))

    def audit_entries(self) -> list[str]:
        return [r[0] for r in self._c.execute("SELECT entry FROM audit ORDER BY seq")]


class SQLiteBackend:
    """One connection per Store, serialised by a lock of its own (a store serialises its threads
    itself, see ``cenotaph.locking``); several processes share the files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / DB_NAME
        self.read_only = read_only(directory)
        self._lock = threading.RLock()
        self._version_cursor: sqlite3.Cursor | None = None
        if self.read_only and not self.path.exists():
            raise StorageError(
                f"cannot create a store in {directory}: it is read-only for this user; choose a "
                "writable directory"
            )
        try:
            self._conn = self.connect(self.path)
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        try:
            self._writers = _file_lock(self.path)
            self._migrate()
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, sqlite3.Error):
                raise translate(exc, self.path) from exc
            raise

    @property
    def location(self) -> Path:
        return self.directory

    @staticmethod
    def connect(path: Path) -> sqlite3.Connection:
        """A connection with every setting of SQLITE_SETTINGS applied and secure_delete read back;
        read-only (see :func:`read_only`) when this process cannot write the database."""
        ro = read_only(path.parent)
        target = _read_only_uri(path) if ro else str(path)
        conn = sqlite3.connect(target, uri=ro, isolation_level=None, check_same_thread=False, timeout=30.0)
        # busy_timeout first: switching to WAL needs a lock another process opening the same new
        # directory may hold, and without a timeout that fails at once
        for name, value in (("busy_timeout", str(busy_timeout_ms())), *SQLITE_SETTINGS):
            if not (ro and name == "journal_mode"):  # a reader cannot switch it, and needs not
                conn.execute(f"PRAGMA {name}={value}")
        if conn.execute("PRAGMA secure_delete").fetchone()[0] != 1:
            conn.close()
            raise StorageError(
                "SQLite refused secure_delete=ON; cenotaph cannot erase freed pages on this build"
            )
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if not ro and str(mode).lower() != "wal":
            conn.close()
            raise StorageError("SQLite refused WAL mode; put the data directory on a local file system")
        return conn

    def _migrate(self) -> None:
        if self.read_only:
            current = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
            if current < MIGRATIONS[-1][0]:
                raise StorageError(
                    f"{self.path} has schema {current}, older than this cenotaph's "
                    f"({MIGRATIONS[-1][0]}), and is read-only for this user; open it once with write "
                    "permission to upgrade it"
                )
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                current = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
                if current > MIGRATIONS[-1][0]:
                    # its rows may mean what this code cannot know (a token kind, a column)
                    raise StorageError(
                        f"this data directory has schema {current}, newer than this cenotaph knows "
                        f"({MIGRATIONS[-1][0]}); open it with the newer cenotaph that wrote it"
                    )
                for number, script in MIGRATIONS:
                    if number > current:
                        for statement in statements(script):
                            self._conn.execute(statement)
                        self._conn.execute(f"PRAGMA user_version={number}")
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def _transaction(self, begin: str) -> Iterator[SQLiteTxn]:
        with self._lock:
            if self._conn.in_transaction:
                raise StorageError(
                    "this store is already inside a transaction on this thread (a callback, such as "
                    "rotate_keys' progress, called back into it); make the call after it returns"
                )
            txn = SQLiteTxn(self._conn)
            timeout_ms = busy_timeout_ms()
            deadline = time.monotonic() + timeout_ms / 1000
            if not self._writers.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise busy_error()
            try:
                try:
                    self._begin(begin, deadline, timeout_ms)
                except sqlite3.Error as exc:
                    raise translate(exc, self.path) from exc
                try:
                    yield txn
                    self._conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._rollback()
                    raise translate(exc, self.path) from exc
                except BaseException:
                    self._rollback()
                    raise
            finally:
                self._writers.release()
            # still under the lock (and the store's, held around the whole block): no other
            # thread of this process may see the commit before the caches and marks that depend
            # on it are updated
            run_after_commit(txn._after)

    def _begin(self, begin: str, deadline: float, timeout_ms: int) -> None:
        """``begin``, waiting for another process's write lock by polling every few milliseconds
        until ``deadline`` (writers of this process already queued on the file's lock), rather
        than with SQLite's busy handler: its sleeps grow to 100 ms, so a writer
        queued behind a run of short transactions (a large forget's or purge's chunks, each
        followed by a short pause for exactly this) kept missing the gaps between them and waited
        through several. The handler (``timeout_ms``) stays in force for every statement inside
        the transaction."""
        delay = _POLL_FIRST_S
        self._conn.execute("PRAGMA busy_timeout=0")
        try:
            while True:
                try:
                    self._conn.execute(begin)
                    return
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc) or time.monotonic() >= deadline:
                        raise
                time.sleep(delay)
                delay = min(delay * 2, _POLL_MAX_S)
        finally:
            self._conn.execute(f"PRAGMA busy_timeout={timeout_ms}")

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def write(self) -> contextlib.AbstractContextManager[SQLiteTxn]:
        return self._transaction("BEGIN IMMEDIATE")

    @contextlib.contextmanager
    def read(self) -> Iterator[SQLiteTxn]:
        """One snapshot for the whole block: a deferred ``BEGIN`` (in WAL mode a reader takes no
        write lock and blocks no writer; its snapshot starts at its first statement) ended by
        ``COMMIT``. A block opened inside a transaction of this thread (a callback) reads in that
        transaction. Writing operations are refused either way."""
        with self._lock:
            txn = SQLiteTxn(self._conn, commits=False)
            if self._conn.in_transaction:
                yield txn
                return
            try:
                self._conn.execute("BEGIN")
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from exc
            try:
                yield txn
                self._conn.execute("COMMIT")  # ends the snapshot: a reader must not outlive its block
            except sqlite3.Error as exc:
                self._rollback()
                raise translate(exc, self.path) from exc
            except BaseException:
                self._rollback()
                raise

    def marker(self) -> int:
        """``PRAGMA data_version`` on this backend's connection: it moves when another connection
        commits, never for this one's own commits."""
        with self._lock:
            try:
                # one cursor kept for it (under the lock): this runs before every cache hit
                cursor = self._version_cursor
                if cursor is None:
                    cursor = self._version_cursor = self._conn.cursor()
                return int(cursor.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from exc

    @cached_property
    def physical(self) -> SQLitePhysical:
        """What this backend does to bytes: WAL truncation, VACUUM, VACUUM INTO, its files."""
        from .physical import SQLitePhysical  # it builds on this module

        return SQLitePhysical(self)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
