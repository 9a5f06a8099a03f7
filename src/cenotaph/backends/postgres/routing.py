"""Read transactions on a streaming replica, only where read-after-forget still holds.

A backend opened with ``read_replicas`` may begin a read transaction on one of them instead of
the primary. It does so only when that replica has replayed past the **floor**: a WAL position
of the primary at or after the commit of every forget this process knows of, and of every
commit of its own. Otherwise the read goes to the primary; writes always do.

How the floor is kept (``docs/sharding.md`` states the argument in full):

- The backend's own commit (a forget among them) makes the floor unknown
  (:meth:`ReadRouter.committed`).
- A forget of another process learnt through the ledger makes it unknown too
  (:meth:`ReadRouter.learnt`, called by the caches' sync when the ledger view gains a forget:
  every store call checks the ledger before it reads).
- The marker statement every sync runs on the primary reads the forget epoch with it, and the
  primary's WAL position after it (:data:`FLOOR`): when the epoch moved, the floor becomes that
  position (:meth:`ReadRouter.observed`): a forget committed in the database but not yet seen
  in the ledger moves it as well.
- An unknown floor is read again, in that one statement on the primary, by the next read that
  would go to a replica (``PostgresBackend._read_connection``). Its snapshot sees every commit
  that returned before it (their commit records flushed first, with ``synchronous_commit`` on),
  and the position is read after the snapshot.
- A replica's replay position is read before its read transaction takes its snapshot (the
  first statement, later), and replay only moves forward while the server runs: the snapshot
  holds every commit up to the position read. A connection remembers the last position it
  read (:data:`_REPLAYED`); a server restart breaks the connection, and the memory with it.

Other processes' writes that are not forgets do not move the floor: a replica may serve them up
to its replay lag, as any replica read does. The caches cannot keep such a stale answer: a
resolved read is used again only after a marker statement on the primary said nothing changed.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from .txn import Connection

__all__ = ["APPLICATION_NAME", "FLOOR", "ReadRouter", "lsn_number"]

# the change counter, the forget epoch, then the primary's WAL position (after the snapshot)
FLOOR = (
    "SELECT (SELECT value FROM change_marker_sum()), f.value, "
    "pg_current_wal_lsn()::text FROM meta f WHERE f.name = 'forget_epoch'"
)
APPLICATION_NAME = "cenotaph-read"  # how a replica's pg_stat_activity names a store's read sessions
REPLICA_WAIT_S = 1.0  # how long a read waits for a replica connection before it takes the primary's
DOWN_S = 5.0  # how long a replica that could not be reached (or is no replica) is left alone
_POOL_MAX = 4

# the replay position each replica connection last read (a lower bound while it stays open)
_REPLAYED: weakref.WeakKeyDictionary[Connection, int] = weakref.WeakKeyDictionary()


def lsn_number(lsn: str) -> int:
    """A WAL position ``X/Y`` as a number, to compare two."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) + int(low, 16)


class _Replica:
    def __init__(self, pool: ConnectionPool[Connection]) -> None:
        self.pool = pool
        self.down_until = 0.0


class ReadRouter:
    """Where a read transaction of one backend begins: a replica past the floor, or nowhere
    (then the primary). Used under the backend's lock."""

    def __init__(
        self,
        dsns: Sequence[str],
        schema: str,
        connect: dict[str, Any],
        configure: Callable[[Connection], None],
    ) -> None:
        self._replicas: list[_Replica] = []
        for dsn in dsns:
            kwargs = dict(connect)
            if "application_name" not in conninfo_to_dict(dsn):
                kwargs["application_name"] = APPLICATION_NAME
            pool: ConnectionPool[Connection] = ConnectionPool(
                dsn,
                kwargs=kwargs,
                min_size=0,  # a replica down at open is no reason to refuse the store
                max_size=_POOL_MAX,
                configure=configure,
                open=False,
                name=f"cenotaph-read:{schema}",
                num_workers=1,
            )
            pool.open(wait=False)
            self._replicas.append(_Replica(pool))
        self._turn = itertools.cycle(range(len(self._replicas)))
        self._owners: weakref.WeakKeyDictionary[Connection, _Replica] = weakref.WeakKeyDictionary()
        self._floor: int | None = None  # None: unknown (an own commit, a forget learnt): read it again
        self._epoch: int | None = None  # the forget epoch the floor was taken at
        self._mutex = threading.Lock()
        self.replica_reads = 0  # read transactions begun on a replica
        self.primary_reads = 0  # read transactions that went to the primary

    # -- the floor ---------------------------------------------------------------------
    def observed(self, epoch: int, lsn: str) -> None:
        """The primary's forget epoch and, after it in the same statement (:data:`FLOOR`), its
        WAL position: the floor, if it was unknown or a forget committed since it was taken."""
        with self._mutex:
            if self._floor is None or epoch != self._epoch:
                self._floor = lsn_number(lsn)
                self._epoch = epoch

    def committed(self) -> None:
        """This backend committed a write: the floor must be read again, after it."""
        with self._mutex:
            self._floor = None

    def learnt(self) -> None:
        """This process learnt of another's forget (the ledger): the floor must be read again."""
        with self._mutex:
            self._floor = None

    @property
    def floor(self) -> int | None:
        return self._floor

    @property
    def routes(self) -> bool:
        """Could a read go to a replica now (one is listed and not left alone)?"""
        now = time.monotonic()
        return any(replica.down_until <= now for replica in self._replicas)

    # -- connections -------------------------------------------------------------------
    def take(self) -> Connection | None:
        """A connection to a replica that has replayed past the floor, or None (read the primary)."""
        floor = self._floor
        if floor is None:
            self.primary_reads += 1
            return None
        now = time.monotonic()
        for _ in range(len(self._replicas)):
            replica = self._replicas[next(self._turn)]
            if replica.down_until > now:
                continue
            conn = self._connection(replica)
            if conn is None:
                continue
            if self._replayed(conn, replica, floor):
                self._owners[conn] = replica
                self.replica_reads += 1
                return conn
            replica.pool.putconn(conn)
        self.primary_reads += 1
        return None

    def owns(self, conn: Connection) -> bool:
        return conn in self._owners

    def release(self, conn: Connection) -> None:
        """Give a replica connection back to its pool."""
        replica = self._owners.pop(conn)
        replica.pool.putconn(conn)

    def failed(self, conn: Connection) -> None:
        """A replica connection broke before its transaction read anything: leave it alone a while."""
        replica = self._owners.pop(conn)
        replica.down_until = time.monotonic() + DOWN_S
        replica.pool.putconn(conn)
        self.replica_reads -= 1
        self.primary_reads += 1

    def close(self) -> None:
        for replica in self._replicas:
            replica.pool.close()

    @staticmethod
    def _connection(replica: _Replica) -> Connection | None:
        try:
            return replica.pool.getconn(timeout=REPLICA_WAIT_S)
        except (PoolTimeout, psycopg.Error):
            replica.down_until = time.monotonic() + DOWN_S
            return None

    @staticmethod
    def _replayed(conn: Connection, replica: _Replica, floor: int) -> bool:
        """Has the server of ``conn`` replayed past ``floor``? Asked before the read's snapshot.
        A server not in recovery (promoted, or never a replica) serves no read: its WAL is no
        longer the primary's."""
        if _REPLAYED.get(conn, -1) >= floor:
            return True
        try:
            row = conn.execute("SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text").fetchone()
        except psycopg.Error:
            replica.down_until = time.monotonic() + DOWN_S
            return False
        if row is None or not row[0] or row[1] is None:
            replica.down_until = time.monotonic() + DOWN_S
            return False
        replayed = lsn_number(str(row[1]))
        _REPLAYED[conn] = replayed
        return replayed >= floor
