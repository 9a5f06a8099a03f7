"""SQLite backend: the embedded store's connection, transactions and the statements only SQLite
runs (the rest are ``backends.sql``'s, shared with PostgreSQL). Every ``sqlite3`` error it meets
becomes a :class:`cenotaph.errors.StorageError` through ``errors.translate``."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import StorageError
from ..base import (
    LineageRow,
    OneStatement,
    RecordRow,
    WriteLocks,
    busy_timeout_ms,
    lineage_values,
    run_after_commit,
)
from ..ops import Op, OpRunner
from ..sql import SQLITE, SQLHandlers
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
from .errors import busy_error, is_busy, translate
from .schema import MIGRATIONS, statements

if TYPE_CHECKING:
    from .physical import SQLitePhysical

__all__ = ["SQLiteBackend", "SQLITE_SETTINGS", "DB_NAME", "read_only", "unwritable"]

DB_NAME = "cenotaph.db"

# Every connection setting, with why. Applied (and secure_delete read back) on each connection.
SQLITE_SETTINGS: tuple[tuple[str, str], ...] = (
    ("journal_mode", "WAL"),  # never PERSIST: it keeps pre-images after commit
    ("synchronous", "FULL"),  # W7: a returned write survives power loss
    ("secure_delete", "ON"),  # S3: zero freed pages ourselves, never trust the build default
    # busy_timeout (busy_timeout_ms()): wait for other processes' writes, then StorageError
    ("temp_store", "MEMORY"),  # no temp files outside the data directory
    ("trusted_schema", "OFF"),
    ("foreign_keys", "OFF"),
    ("cache_size", "-16384"),  # 16 MiB: see docs/architecture.md, "What is on disk"
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


# a key's rows in a few scopes with their lineage rows, and the snapshot's data version (one row
# of NULLs when no scope holds the key): a read learns whether another connection committed from
# the statement that reads its rows
# A slot's record row, if any, is its newest lineage version's (a write replaces the row it
# finds, so an older version never keeps one): one probe of lineage_slot per scope, newest first.
def _newest(n: int) -> str:
    return (
        f"(SELECT version FROM lineage WHERE scope_token=?{n} AND key_token=?1 ORDER BY version DESC LIMIT 1)"
    )


_SLOT_SELECT = f"SELECT d.data_version, {R_COLS}, {L_COLS} FROM pragma_data_version d LEFT JOIN records r ON r.version IN "
_SLOT_SQL = {
    n: f"{_SLOT_SELECT}({','.join(_newest(i) for i in range(2, n + 2))}) LEFT JOIN lineage l ON l.version = r.version"
    for n in range(1, 65)
}
_POLL_FIRST_S = 0.0005  # a writer waiting for the write lock tries again after this,
_POLL_MAX_S = 0.002  # doubling up to this (see SQLiteBackend._begin)


def _marks(n: int) -> str:
    return ",".join("?" * n)


class SQLiteTxn(SQLHandlers, OpRunner):
    """A transaction on one connection: the shared handlers (``backends.sql``) in SQLite's
    dialect, and the few whose SQL is SQLite's own."""

    _d = SQLITE

    def __init__(self, conn: sqlite3.Connection, *, commits: bool = True) -> None:
        self._c = conn
        self._commits = commits
        self._accept_writes(commits)
        self._after: list[Callable[[], None]] = []

    def _x(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._c.execute(sql, args)

    def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        return self._c.executemany(sql, rows).rowcount

    def _insert_rows(
        self, table: str, columns: str, types: tuple[str, ...], rows: Iterable[Sequence[Any]]
    ) -> None:
        sql = f"INSERT INTO {table} ({columns}) VALUES ({_marks(len(types))}) ON CONFLICT DO NOTHING"
        self._c.executemany(sql, rows)

    def _delete_pairs(
        self, table: str, first: tuple[str, str], second: str, pairs: Sequence[tuple[Any, str]]
    ) -> int:
        sql = f"DELETE FROM {table} WHERE {first[0]}=? AND {second}=?"
        before = self._c.total_changes
        self._c.executemany(sql, pairs)
        return self._c.total_changes - before

    def marker(self) -> int:
        """``data_version`` as of this snapshot (the statement begins it, if nothing did yet)."""
        return int(self._c.execute("PRAGMA data_version").fetchone()[0])

    # -- records ---------------------------------------------------------------------
    def records_in_slots(self, slots: Sequence[tuple[bytes, bytes]]) -> list[RecordRow]:
        if len(slots) == 1:
            sql = (
                f"SELECT {RECORD_COLS} FROM records WHERE version = (SELECT version FROM lineage "
                "WHERE scope_token=? AND key_token=? ORDER BY version DESC LIMIT 1)"
            )
            row = self._c.execute(sql, slots[0]).fetchone()
            return [] if row is None else [record_row(row)]
        # one statement per scope, its keys in an IN list: one index probe per slot (an IN list of
        # scopes times one of keys probes every pair, 500 x 500 for a batch over many scopes)
        by_scope: dict[bytes, set[bytes]] = {}
        for scope_token, key_token in slots:
            by_scope.setdefault(scope_token, set()).add(key_token)
        rows: list[RecordRow] = []
        for scope_token, keys in by_scope.items():
            for part in SQLITE.chunks(sorted(keys)):
                sql = (
                    f"SELECT {RECORD_COLS} FROM records WHERE version IN (SELECT max(version) FROM "
                    f"lineage WHERE scope_token=? AND key_token IN ({_marks(len(part))}) GROUP BY key_token)"
                )
                rows.extend(record_row(row) for row in self._c.execute(sql, (scope_token, *part)))
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
                found.append((RecordRow(*row[1:11]), None if row[11] is None else lineage_row(row[11:])))
        return int(rows[0][0]), found

    def insert_records(
        self, rows: Sequence[RecordRow], lineage: Sequence[LineageRow], replaced: Sequence[str] = ()
    ) -> None:
        self.delete_records(replaced)
        # a RecordRow is a tuple in RECORD_COLS order (checked at import): no copy per row
        self._c.executemany(f"INSERT INTO records ({RECORD_COLS}) VALUES ({_marks(10)})", rows)
        self._c.executemany(
            f"INSERT INTO lineage ({LINEAGE_COLS}) VALUES ({_marks(11)})",
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

    def plaintext_holds(self, needle: bytes) -> bool:
        """Does ``needle`` occur in a column the store keeps in plain (ids, request rows, the audit
        log, the schema)? Such bytes are content-free bookkeeping by construction (W4)."""
        for table, column in PLAIN_COLUMNS:
            sql = f"SELECT 1 FROM {table} WHERE instr(CAST({column} AS BLOB), ?) > 0 LIMIT 1"
            if self._c.execute(sql, (needle,)).fetchone() is not None:
                return True
        return False

    def rewrap(self, rows: Iterable[tuple[str, Any, bytes, int]]) -> None:
        for table, pk in WRAPPED_TABLES:
            self._c.executemany(
                f"UPDATE {table} SET wrapped=?, epoch=? WHERE {pk}=?",
                [(w, e, k) for t, k, w, e in rows if t == table],
            )


class SQLiteBackend:
    """One connection per Store, serialised by a lock of its own (a store serialises its threads
    itself, see ``cenotaph.locking``); several processes share the files."""

    concurrent_writers = False  # one writer per database file: ``WriteLocks`` change nothing

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

    def describe(self) -> dict[str, str]:
        return {"backend": "sqlite", "location": f"SQLite database in the data directory {self.directory}"}

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
                with self._committed():
                    yield txn
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

    @contextlib.contextmanager
    def _committed(self) -> Iterator[None]:
        """The block, then ``COMMIT``; a block or commit that fails rolls back (a ``sqlite3``
        error raised as the StorageError it means)."""
        try:
            yield
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise translate(exc, self.path) from exc
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def write(
        self, locks: WriteLocks | None = None, ahead: Sequence[Op[Any]] = ()
    ) -> contextlib.AbstractContextManager[SQLiteTxn]:
        """One writer per database file (``BEGIN IMMEDIATE``): ``locks`` and ``ahead`` change nothing."""
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
            with self._committed():  # ends the snapshot: a reader must not outlive its block
                yield txn

    def statement(self) -> _Statement:
        """A read of one operation in autocommit (:class:`OneStatement`): no ``BEGIN``/``COMMIT``,
        the statement is its own snapshot (WAL mode). Inside a transaction of this thread (a
        callback) the operation reads in that transaction, as :meth:`read` does."""
        return _Statement(self)

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


class _Statement:
    """The block of :meth:`SQLiteBackend.statement`: the backend's lock held, a ``sqlite3`` error
    raised as the StorageError it means. A class, not a generator: it runs on every cold read."""

    __slots__ = ("_backend",)

    def __init__(self, backend: SQLiteBackend) -> None:
        self._backend = backend

    def __enter__(self) -> OneStatement:
        backend = self._backend
        backend._lock.acquire()
        return OneStatement(SQLiteTxn(backend._conn, commits=False))

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self._backend._lock.release()
        if isinstance(exc, sqlite3.Error):
            raise translate(exc, self._backend.path) from exc
