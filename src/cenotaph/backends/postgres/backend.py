"""PostgreSQL backend: a small connection pool, the store's schema, write transactions that hold
advisory locks and one-snapshot read transactions. Every statement is :class:`PostgresTxn`'s;
every driver error becomes a StorageError in ``errors``.

- A write transaction runs READ COMMITTED (each statement sees every commit before it) and takes
  its advisory locks first (``lock_keys``): store-wide ones (``write()``: migrations,
  rotation, purge, restore, consumers, ...) the store's key exclusive, SQLite's ``BEGIN
  IMMEDIATE``; a record write or a forget (``write(WriteLocks)``) the store's key shared, then
  one key per tombstone target (shared for a write covered by it, exclusive for a forget naming
  it), then the forgets' serial key exclusive if it is a forget -- always in that order, targets
  sorted, so no two transactions wait for each other in a cycle. Two writes of different users
  run at once; a write and a forget meet exactly where the forget could dominate the write.
- Versions come from a sequence in blocks (``ops.Reserve``), the change marker is striped
  (``marker``): no row every writer updates.
- A record write costs two round trips: BEGIN, the locks and the reads it needs (``ahead``: the
  change marker the store's caches check among them), then
  its inserts, the marker's bump and COMMIT (``PostgresTxn`` defers statements whose result
  nobody reads to the next one sent). Each is one message (``record_write``): BEGIN and schema
  5's write_begin, then a lone record's write_record, the bump and COMMIT.
- A read transaction is REPEATABLE READ, READ ONLY: one snapshot for all its statements.
- With ``read_replicas``, a read transaction may begin on a streaming replica instead, when that
  replica has replayed past every forget this process knows of and its own commits
  (``routing.ReadRouter``: read-after-forget holds on it); otherwise, and for every write, the
  primary.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from ...errors import InvalidValueError, StorageError
from ..base import WriteLocks, busy_timeout_ms, run_after_commit
from ..ops import Op
from .errors import Endpoint, endpoint, translate, translate_connect
from .marker import SUM, OwnCommits
from .record_write import LockKeys
from .routing import FLOOR, ReadRouter
from .schema import (
    DEFAULT_SCHEMA,
    LATEST,
    MIGRATIONS,
    MIGRATIONS_TABLE,
    NUMBERS,
    check_schema_name,
    create_schema,
    created_objects,
    set_search_path,
)
from .txn import Connection, PostgresTxn

if TYPE_CHECKING:
    from .physical import PostgresPhysical

T = TypeVar("T")

_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"

__all__ = [
    "PostgresBackend",
    "advisory_key",
    "lock_keys",
    "target_key",
    "no_store_message",
    "schema_description",
    "POOL_MIN",
    "POOL_MAX",
    "CONNECT_TIMEOUT_S",
]

POOL_MIN = 1
POOL_MAX = 4  # transactions of one backend are serialised; the spares serve a read inside a read
CONNECT_TIMEOUT_S = 10  # unless the address sets connect_timeout


def advisory_key(schema: str) -> int:
    """The advisory lock key of a store's schema (a signed 64-bit int, the same in every process)."""
    digest = hashlib.blake2b(f"cenotaph:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def target_key(schema: str, target: bytes) -> int:
    """The advisory lock key of one tombstone target of a store (signed 64-bit, every process's)."""
    digest = hashlib.blake2b(b"cenotaph-target:" + schema.encode() + b"\0" + target, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def serial_key(schema: str) -> int:
    """The key every forget of a store holds exclusive: forgets among themselves are sequential
    (the audit chain's next entry, the forget epoch)."""
    return advisory_key(f"{schema}\0serial")


def lock_keys(schema: str, locks: WriteLocks | None) -> LockKeys:
    """A write transaction's advisory lock keys and whether each is exclusive, in the one order
    every transaction uses: the store's key (exclusive when ``locks`` is None, store-wide; else
    shared), the targets by key (exclusive wins where a target is named both ways), then the
    serial key. ``lock_targets`` takes them one by one in the arrays' order."""
    if locks is None:
        return [advisory_key(schema)], [True]
    modes: dict[int, bool] = {target_key(schema, t): False for t in locks.shared}
    modes.update({target_key(schema, t): True for t in locks.exclusive})
    keys = [advisory_key(schema), *sorted(modes)]
    exclusive = [False, *(modes[k] for k in keys[1:])]
    if locks.serial:
        keys.append(serial_key(schema))
        exclusive.append(True)
    return keys, exclusive


def schema_description(schema: str, database: str, server: str) -> str:
    """How a message names a store's schema (never the address it was given)."""
    return f"schema {schema!r} of database {database!r} at {server}"


def no_store_message(where: str, schema_exists: bool) -> str:
    """What a location naming a schema without a store hears: which schema it named (``where``,
    see :func:`schema_description`), and that a URL without ``?schema=`` names the default one."""
    missing = "does not exist" if not schema_exists else "holds no cenotaph store"
    return (
        f"{where} {missing} (a URL without ?schema= names schema {DEFAULT_SCHEMA!r}); name the "
        "store's schema with ?schema=NAME, or open it with create=True to make a new store there"
    )


class PostgresBackend:
    """One store in one PostgreSQL schema; several processes and servers share it.

    ``create=False`` refuses a schema that holds no store (InvalidValueError) instead of making
    one. ``created`` says what this open made: ``"schema"`` (the schema and the store's
    tables), ``"tables"`` (the tables, in a schema that existed) or None (the store was there);
    :meth:`discard_created` removes it again while no transaction has committed in it.
    """

    concurrent_writers = True  # writers of different targets run at once (``WriteLocks``)

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        replicas: Sequence[str] = (),
        read_replicas: Sequence[str] = (),
        create: bool = True,
    ) -> None:
        self.schema = check_schema_name(schema)
        self.endpoint: Endpoint = endpoint(dsn, self.schema)
        for replica in (*replicas, *read_replicas):
            endpoint(replica, self.schema)  # refused now if malformed, not when first confirming
        # a replica that serves reads holds the store's rows too: a purge proves it replayed
        self.replicas = tuple(dict.fromkeys((*replicas, *read_replicas)))
        self.read_replicas = tuple(dict.fromkeys(read_replicas))
        self.read_only = False
        self._dsn = dsn
        self._key = advisory_key(self.schema)
        self._lock = threading.RLock()
        self._open: list[PostgresTxn] = []  # this thread's transactions, innermost last (under the lock)
        self._own = OwnCommits()
        self._connect_kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in conninfo_to_dict(dsn):
            self._connect_kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
        self.created: str | None = None
        self._migrate(create)
        self._pool: ConnectionPool[Connection] = ConnectionPool(
            dsn,
            kwargs=self._connect_kwargs,
            min_size=POOL_MIN,
            max_size=POOL_MAX,
            configure=self._configure,
            open=False,
            name=f"cenotaph:{self.schema}",
            num_workers=1,  # it only opens the odd connection: one thread per store is plenty
        )
        try:
            self._pool.open(wait=True, timeout=float(self._connect_kwargs.get("connect_timeout", 30)))
        except PoolTimeout as exc:
            self._pool.close()
            raise translate(exc, self.endpoint) from exc
        self.router: ReadRouter | None = None
        if self.read_replicas:
            self.router = ReadRouter(self.read_replicas, self.schema, self._connect_kwargs, self._configure)

    @property
    def location(self) -> Path | None:
        return None  # no file of the store's: the server keeps its files

    def describe(self) -> dict[str, str]:
        where = self.endpoint
        return {
            "backend": "postgresql",
            "location": f"PostgreSQL schema {where.schema} of database {where.dbname} on {where.server}",
        }

    # -- connections -------------------------------------------------------------------
    def _configure(self, conn: Connection) -> None:
        conn.execute(set_search_path(self.schema))

    def _connect(self) -> Connection:
        try:
            return psycopg.connect(self._dsn, **self._connect_kwargs)
        except psycopg.Error as exc:
            raise translate_connect(exc, self.endpoint) from exc

    def _applied(self, conn: Connection) -> frozenset[int]:
        """The migrations applied to the schema (none: no store, or no schema yet)."""
        table = sql.Identifier(self.schema, MIGRATIONS_TABLE)
        exists = conn.execute("SELECT to_regclass(%s)", (table.as_string(conn),)).fetchone()
        if exists is None or exists[0] is None:
            return frozenset()
        rows = conn.execute(sql.SQL("SELECT version FROM {}").format(table)).fetchall()
        return frozenset(int(row[0]) for row in rows)

    def _migrate(self, create: bool) -> None:
        """Apply every migration the schema lacks (``schema.NUMBERS``), under the writers' lock;
        a schema holding them all is opened without waiting for a writer. One transaction: a
        failed migration leaves nothing."""
        with self._connect() as conn:
            try:
                if self._applied(conn) == NUMBERS:
                    return
                conn.execute("BEGIN")
                conn.execute(f"SET LOCAL lock_timeout = {self._lock_timeout_ms()}")
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._key,))
                existed = _schema_exists(conn, self.schema)
                applied = self._applied(conn) if existed else frozenset()
                current = max(applied, default=0)
                if current == 0 and not create:
                    database = conn.execute("SELECT current_database()").fetchone()
                    where = schema_description(
                        self.schema, str(database and database[0]), self.endpoint.server
                    )
                    raise InvalidValueError(no_store_message(where, existed))
                conn.execute(create_schema(self.schema))
                conn.execute(set_search_path(self.schema, local=True))
                if current > LATEST:
                    # its rows may mean what this code cannot know (a token kind, a column)
                    raise StorageError(
                        f"the store in schema {self.schema!r} at {self.endpoint.server} has schema "
                        f"{current}, newer than this cenotaph knows ({LATEST}); open it with the newer "
                        "cenotaph that wrote it"
                    )
                for number, script in MIGRATIONS:
                    if number not in applied:
                        conn.execute(script)
                        conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} (version) VALUES (%s)", (number,))
                conn.execute("COMMIT")
                if current == 0:
                    self.created = "tables" if existed else "schema"
            except psycopg.Error as exc:
                _rollback(conn)
                raise translate(exc, self.endpoint) from exc
            except BaseException:
                _rollback(conn)
                raise

    @staticmethod
    def _lock_timeout_ms() -> int:
        return max(1, busy_timeout_ms())  # 0 would mean "wait forever" here, "never" to SQLite

    def _begin_write(
        self, locks: WriteLocks | None, ahead: Sequence[Op[Any]]
    ) -> tuple[Connection, list[tuple[Op[Any], Any]]]:
        """A pooled connection inside a new write transaction holding ``locks`` (see
        :func:`lock_keys`), and the results of the ``ahead`` operations it can send with
        them: one round trip (``PostgresTxn._begin_write``). A connection found broken (a server
        restart) is dropped and the next one tried: nothing was sent on it yet."""
        keys = lock_keys(self.schema, locks)
        attempt = 0
        while True:
            conn = self._getconn()
            try:
                return conn, PostgresTxn._begin_write(conn, keys, self._lock_timeout_ms(), ahead)
            except BaseException as exc:
                broken = conn.broken
                _rollback(conn)
                self._pool.putconn(conn)
                attempt += 1
                if not isinstance(exc, psycopg.Error):
                    raise
                if not broken or attempt > POOL_MAX:
                    raise translate(exc, self.endpoint) from exc

    def _reconnect(self, broken: Connection) -> Connection:
        """Another pooled connection for one found broken (which the pool discards); a replica's
        is replaced by the primary's (the read had sent nothing that counted yet)."""
        if self.router is not None and self.router.owns(broken):
            self.router.failed(broken)
        else:
            self._pool.putconn(broken)
        return self._getconn()

    def _release(self, conn: Connection) -> None:
        """Give a transaction's connection back to the pool it came from."""
        if self.router is not None and self.router.owns(conn):
            self.router.release(conn)
        else:
            self._pool.putconn(conn)

    def _read_connection(self) -> Connection:
        """Where a read transaction begins: a replica past the floor (read again on the primary
        first if it is unknown), else the primary."""
        router = self.router
        if router is None:
            return self._getconn()
        if router.floor is None and router.routes:
            self._autocommit(self._observe)
        routed = router.take()
        return routed if routed is not None else self._getconn()

    def _observe(self, conn: Connection) -> int:
        """The change counter, read with the forget epoch and the WAL position after them, which
        the router takes its floor from (``routing.FLOOR``)."""
        assert self.router is not None
        row = conn.execute(FLOOR).fetchone()
        assert row is not None
        self.router.observed(int(row[1]), str(row[2]))
        return int(row[0])

    def forgets_learnt(self) -> None:
        """This process learnt of another's forget (the ledger): replica reads wait for a floor
        read after it."""
        if self.router is not None:
            with self._lock:
                self.router.learnt()

    def _getconn(self) -> Connection:
        try:
            return self._pool.getconn(timeout=max(1.0, busy_timeout_ms() / 1000))
        except (PoolTimeout, psycopg.Error) as exc:
            raise translate(exc, self.endpoint) from exc

    # -- transactions --------------------------------------------------------------------
    @contextlib.contextmanager
    def _transaction(
        self, write: bool, locks: WriteLocks | None = None, ahead: Sequence[Op[Any]] = ()
    ) -> Iterator[PostgresTxn]:
        with self._lock:
            if write and self.in_transaction():
                raise StorageError(
                    "this store is already inside a transaction on this thread (a callback, such as "
                    "rotate_keys' progress, called back into it); make the call after it returns"
                )
            if self._open and not write:  # a read inside this thread's transaction reads in it
                outer = self._open[-1]
                outer._start()  # its snapshot, begun now if it had not yet
                yield PostgresTxn(
                    outer.connection,
                    commits=False,
                    marker_of=outer._marker_of,
                    repeatable=outer._repeatable,
                    clock=outer._clock,
                )
                return
            if write:
                conn, done = self._begin_write(locks, ahead)
                txn = PostgresTxn(
                    conn, commits=True, marker_of=self._own.marker, ahead=done, store_wide=locks is None
                )
            else:  # begun with its first statement, in the same round trip
                txn = PostgresTxn(
                    self._read_connection(),
                    commits=False,
                    begin=_READ,
                    reconnect=self._reconnect,
                    marker_of=self._own.marker,
                    repeatable=True,
                    ends=True,
                )
            self._open.append(txn)
            try:
                try:
                    yield txn
                    if txn.begun:
                        txn._commit()
                except psycopg.Error as exc:
                    txn._abandon()
                    _rollback(txn.connection)
                    raise translate(exc, self.endpoint) from exc
                except BaseException:
                    txn._abandon()
                    _rollback(txn.connection)
                    raise
            finally:
                self._open.pop()
                self._release(txn.connection)
            if write:
                self._own.committed()  # its own commit: not a change by someone else
                if self.router is not None:
                    self.router.committed()
            # still under the lock: no other thread of this process may see the commit before
            # the caches and marks that depend on it are updated
            run_after_commit(txn._after)

    def write(
        self, locks: WriteLocks | None = None, ahead: Sequence[Op[Any]] = ()
    ) -> contextlib.AbstractContextManager[PostgresTxn]:
        return self._transaction(True, locks, ahead)

    def read(self) -> contextlib.AbstractContextManager[PostgresTxn]:
        return self._transaction(write=False)

    def in_transaction(self) -> bool:
        """Is a write transaction of this backend open (on the thread holding its lock)?"""
        return any(txn.commits for txn in self._open)

    # -- change detection ----------------------------------------------------------------
    def marker(self) -> int:
        """The change marker (``Backend.marker``): the commits of every other connection, read
        in one statement outside any transaction."""

        def counter(conn: Connection) -> int:
            if self.router is not None:  # with the forget epoch and the floor after them
                return self._observe(conn)
            row = conn.execute(SUM).fetchone()
            assert row is not None
            return int(row[0])

        with self._lock:
            return self._own.marker(self._autocommit(counter))

    # -- what the physical part needs ---------------------------------------------------
    @cached_property
    def physical(self) -> PostgresPhysical:
        """What this backend does to bytes: replicas replayed, VACUUM FULL, no files of its own."""
        from .physical import PostgresPhysical  # it builds on this module

        return PostgresPhysical(self)

    def _autocommit(self, statements: Callable[[Connection], T]) -> T:
        """``statements`` on a pooled connection outside any transaction (VACUUM needs that)."""
        with self._lock:
            conn = self._getconn()
            try:
                return statements(conn)
            except psycopg.Error as exc:
                raise translate(exc, self.endpoint) from exc
            finally:
                self._pool.putconn(conn)

    def current_lsn(self) -> str:
        """The primary's current WAL position (after every commit this backend made)."""

        def lsn(conn: Connection) -> str:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            return str(row[0])

        return self._autocommit(lsn)

    def vacuum_full(self) -> None:
        """Rewrite every table of the store's schema from its live rows (``VACUUM FULL``)."""

        def vacuum(conn: Connection) -> None:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (self.schema,)
            ).fetchall()
            # it waits for every reader of each table: bounded like a writer (VACUUM runs in no
            # transaction block, so the timeout is the session's, reset after)
            conn.execute(f"SET lock_timeout = {self._lock_timeout_ms()}")
            try:
                for (table,) in rows:
                    conn.execute(
                        sql.SQL("VACUUM FULL {}.{}").format(
                            sql.Identifier(self.schema), sql.Identifier(table)
                        )
                    )
            finally:
                conn.execute("RESET lock_timeout")

        self._autocommit(vacuum)

    def close(self) -> None:
        with self._lock:
            self._pool.close()
            if self.router is not None:
                self.router.close()

    def discard_created(self) -> bool:
        """Remove what this open created (see ``created``) if no write transaction ever committed
        in it, so a store whose first open was refused leaves no schema or table behind. Works
        after :meth:`close`, on a connection of its own; returns whether anything was removed.
        Best effort: it runs while another error is on its way out, which it must not hide."""
        if self.created is None:
            return False
        try:
            with psycopg.connect(self._dsn, **self._connect_kwargs) as conn:
                try:
                    removed = self._discard(conn)
                except BaseException:
                    _rollback(conn)
                    raise
        except psycopg.Error:
            return False  # the server went away, most likely why the open failed: nothing to do
        self.created = None
        return removed

    def _discard(self, conn: Connection) -> bool:
        conn.execute("BEGIN")
        conn.execute(f"SET LOCAL lock_timeout = {self._lock_timeout_ms()}")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._key,))
        marker = conn.execute(
            sql.SQL("SELECT sum(value) FROM {}.change_marker").format(sql.Identifier(self.schema))
        ).fetchone()
        if marker is None or int(marker[0]) != 0:  # a store now: another process opened it since
            conn.execute("ROLLBACK")
            return False
        schema = sql.Identifier(self.schema)
        if self.created == "schema":
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))
        else:  # the schema was there before: drop only what the migrations made in it
            tables, functions = created_objects()
            conn.execute(
                sql.SQL("DROP TABLE {} CASCADE").format(
                    sql.SQL(", ").join(sql.Identifier(self.schema, t) for t in tables)
                )
            )
            for function in functions:
                conn.execute(sql.SQL("DROP FUNCTION {}").format(sql.Identifier(self.schema, function)))
        conn.execute("COMMIT")
        return True


def _schema_exists(conn: Connection, schema: str) -> bool:
    row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return row is not None


def _rollback(conn: Connection) -> None:
    """Roll back whatever is open on ``conn``; a broken connection has nothing left to roll back."""
    if conn.broken or conn.closed:
        return
    with contextlib.suppress(psycopg.Error):
        conn.execute("ROLLBACK")
