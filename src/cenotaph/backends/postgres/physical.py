"""PostgreSQL's physical erasure (see ``backends/physical.py`` for the contract).

The server keeps the files: heap and index pages, where a deleted row stays as a dead tuple
until VACUUM marks its space free (plain VACUUM does not zero it; ``VACUUM FULL`` rewrites a
table from its live rows), the server's WAL, which keeps copies for several checkpoints, and
every streaming replica, which holds what the primary held until it replays past the erasing
commit. None of those files is this process's to scan. What carries the erasure there is the
crypto-shredding: a compliance forget destroys every wrapped key of its records in the same
transaction as its tombstone. Those files may still keep the destroyed keys' wrapped form (a dead
tuple, a WAL record) until vacuum and WAL recycling, and a wrapped key opens with the KEK epoch
that wrapped it: what ends that is the horizon (the next rotation destroys the epoch), which the
request reports on its own, as it does for backups. The
purge proves what it can reach: the rows gone, and (the ``wal`` layer) every configured replica
replayed past the purge's commit, so no replica still serves a destroyed key or a deleted row.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from ...errors import StorageError
from ...model import Layer, LayerState
from ..base import LayerEntry, busy_timeout_ms
from ..physical import Check, LayerProof, Reclaimed, ScanGap, ScanSources
from .dump import dump_files, holds_dump, write_dump
from .errors import connect_reason, endpoint, translate, translate_connect

if TYPE_CHECKING:
    from .backend import PostgresBackend

__all__ = ["POSTGRES_FORMAT", "PostgresFormat", "PostgresPhysical", "REPLAY_WAIT_S", "ReplicaProbe"]

REPLAY_WAIT_S = 2.0  # how long a purge waits for replicas to replay before it says which lag
_POLL_S = 0.02

_LAYERS = (
    LayerProof(
        Layer.ROWS,
        "rows deleted in the store's schema; their dead tuples hold only ciphertext whose keys the "
        "forget destroyed, and VACUUM FULL rewrites the tables on request",
    ),
    LayerProof(
        Layer.WAL,
        "every configured streaming replica has replayed past the purge's commit "
        "(pg_last_wal_replay_lsn): none still serves a destroyed key or a deleted row",
    ),
    LayerProof(
        Layer.INDEX,
        "the sealed search vectors are rows of the schema, deleted with their records; the "
        "in-memory index zeroes its entries",
    ),
    LayerProof(
        Layer.SCAN,
        "the files this process can read (a local keyring) are scanned for the request's probes; "
        "the server's files are beyond reach, covered by the keys' destruction",
    ),
)

_SERVER_FILES = ScanGap(
    what="the PostgreSQL server's data files and WAL, and every replica's",
    covered_by=(
        "the erased records' keys, destroyed in the forget's own transaction; until the "
        "horizon (a rotation destroying the KEK epochs that wrapped them) those files may still "
        "hold the keys' wrapped form, which that epoch opens"
    ),
)


class PostgresFormat:
    """A PostgreSQL store has no data directory: nothing here is a store's file. A snapshot is a
    directory holding its logical dump (``dump.py``), which restore loads into a new schema."""

    restored_files: frozenset[str] = frozenset()

    def holds_store(self, directory: Path) -> bool:
        return False

    def unwritable(self, directory: Path) -> list[Path]:
        return []

    def snapshot_files(self, directory: Path) -> list[Path]:
        return dump_files(directory)

    def holds_snapshot(self, directory: Path) -> bool:
        return holds_dump(directory)

    def install_snapshot(self, src: Path, target: Path) -> None:
        raise StorageError(_NO_DIRECTORY_INSTALL)

    def settings_checks(self, directory: Path) -> list[Check]:
        return []

    def integrity_check(self, directory: Path) -> Check:
        return Check("database integrity", "ok", "a PostgreSQL store has no database file here")

    def version_checks(self) -> list[Check]:
        return [Check("postgresql driver", "ok", f"psycopg {psycopg.__version__}")]

    def tombstone_targets(self, directory: Path) -> list[bytes]:
        return []


_NO_DIRECTORY_INSTALL = (
    "a PostgreSQL store's backup is a logical dump, loaded into a schema: restore it to a "
    "postgresql://...?schema=NEW location, not into a directory"
)
POSTGRES_FORMAT = PostgresFormat()


class PostgresPhysical:
    """The physical erasure of one open :class:`PostgresBackend`."""

    format = POSTGRES_FORMAT
    layers = _LAYERS

    def __init__(self, backend: PostgresBackend) -> None:
        self._backend = backend

    def reclaim(self) -> Reclaimed:
        """Wait (briefly) for every replica to replay past the primary's current WAL position,
        which follows the deleting commit; a replica paused, lagging or unreachable leaves the
        layer pending (it may still serve a destroyed key), and the request ``shredded``: the
        gap names each such replica (``host:port``) and what it is doing."""
        replicas = self._backend.replicas
        if not replicas:
            return Reclaimed(True, 0, {Layer.WAL: LayerEntry(LayerState.DONE, {"replicas": 0})})
        target = self._backend.current_lsn()
        with ExitStack() as stack:
            watched = [ReplicaProbe(dsn, self._backend.schema, stack) for dsn in replicas]
            deadline = time.monotonic() + REPLAY_WAIT_S
            behind = [r for r in watched if r.lag(target) != 0]
            while behind and time.monotonic() < deadline:
                time.sleep(_POLL_S)
                behind = [r for r in behind if r.lag(target) != 0]
        if not behind:
            return Reclaimed(True, 0, {Layer.WAL: LayerEntry(LayerState.DONE, {"replicas": len(replicas)})})
        lag = max(r.last_lag or 0 for r in behind)
        unreachable = sorted(r.server for r in behind if r.last_lag is None)
        gap = (
            f"{len(behind)} of {len(replicas)} replica(s) have not replayed past the purge's commit: "
            + ", ".join(r.described() for r in behind)
        )
        evidence: dict[str, object] = {
            "replicas": len(replicas),
            "replicas_behind": len(behind),
            "behind": [r.server for r in behind],
            "wal_bytes": lag,
            "gap": gap,
            "release": _REPLICA_RELEASE,
        }
        if unreachable:
            evidence["unreachable"] = unreachable
        return Reclaimed(False, lag, {Layer.WAL: LayerEntry(LayerState.PENDING, evidence)})

    def rewrite(self) -> bool:
        """``VACUUM FULL`` of every table of the store's schema: each rebuilt from its live rows."""
        self._backend.vacuum_full()
        return True

    def scan_sources(self) -> ScanSources:
        return ScanSources({}, (_SERVER_FILES,))

    def is_database_file(self, name: str) -> bool:
        return False  # no file the scan reads is the server's

    def snapshot(self, directory: Path) -> set[int]:
        """A logical dump of the store's schema, in one snapshot (``dump.write_dump``)."""
        schema = self._backend.schema
        return self._backend._autocommit(lambda conn: write_dump(conn, schema, directory))

    def blocked_wait_s(self) -> float:
        return busy_timeout_ms() / 1000


class ReplicaProbe:
    """One replica polled during a reclaim (or by the doctor), on one connection (opened on
    first use, again after it broke)."""

    def __init__(self, dsn: str, schema: str, stack: ExitStack) -> None:
        self._dsn = dsn
        self._schema = schema
        self._stack = stack
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self.server = endpoint(dsn, schema).server
        self.last_lag: int | None = None  # None: not reached (yet)
        self.paused = False  # its replay was paused (pg_wal_replay_pause) when last asked
        self.reason: str | None = None  # why it could not be reached, as libpq said (no password)

    def lag(self, target: str) -> int | None:
        """Bytes still to replay up to ``target`` (0: past it), None if the replica cannot be
        reached now; a server that is no replica at all is a StorageError."""
        try:
            if self._conn is None:
                self._conn = self._stack.enter_context(
                    psycopg.connect(self._dsn, autocommit=True, connect_timeout=5)
                )
            self.last_lag, self.paused = _replay(self._conn, target, self._dsn, self._schema)
        except psycopg.OperationalError as exc:
            self._conn = None
            self.last_lag = None
            self.reason = connect_reason(exc, endpoint(self._dsn, self._schema))
        return self.last_lag

    def described(self) -> str:
        """``host:port`` and what keeps it behind, for a gap."""
        if self.last_lag is None:
            return f"{self.server} (unreachable)"
        if self.paused:
            return f"{self.server} (replay paused, {self.last_lag} bytes behind)"
        return f"{self.server} (lagging, {self.last_lag} bytes behind)"


_REPLICA_RELEASE = (
    "resume replay on a paused replica (pg_wal_replay_resume), wait for a lagging one, make an "
    "unreachable one reachable or stop listing it (replicas=), then run store.purge()"
)


def _replay(
    conn: psycopg.Connection[tuple[object, ...]], target: str, dsn: str, schema: str
) -> tuple[int, bool]:
    """(bytes to replay up to ``target``, whether replay is paused) on the replica ``conn``."""
    row = conn.execute(
        "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())::bigint, "
        "CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() END",
        (target,),
    ).fetchone()
    if row is None or row[0] is None:  # not a replica at all: it never replays
        where = endpoint(dsn, schema)
        raise StorageError(f"the replica at {where.server} is not in recovery; list only streaming replicas")
    return max(0, int(str(row[0]))), bool(row[1])


def _lag(conn: psycopg.Connection[tuple[object, ...]], target: str, dsn: str, schema: str) -> int:
    return _replay(conn, target, dsn, schema)[0]


def replay_lag(dsn: str, target: str, schema: str) -> int:
    """How many bytes of WAL the replica at ``dsn`` has still to replay to reach ``target`` (0:
    replayed past it). A replica that cannot be reached is a StorageError naming it."""
    where = endpoint(dsn, schema)
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            return _lag(conn, target, dsn, schema)
    except psycopg.OperationalError as exc:
        raise translate_connect(exc, where) from exc
    except psycopg.Error as exc:
        raise translate(exc, where) from exc
