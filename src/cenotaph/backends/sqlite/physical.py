"""SQLite's physical erasure: what happens to bytes after a row is deleted, and the files of a
data directory (see ``backends/physical.py`` for the contract).

With ``secure_delete=ON`` SQLite zeroes every cell and page it frees, in place; the deleted
content still sits in the WAL until a TRUNCATE checkpoint succeeds (:meth:`SQLitePhysical.reclaim`).
A page SQLite reorganized earlier can keep a stale fragment in its unallocated space, which only
``VACUUM`` removes (:meth:`SQLitePhysical.rewrite`). A backup is ``VACUUM INTO``: unlike the online
backup API or a file copy, it carries no freelist residue.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ...durable import fsync
from ...errors import CenotaphError
from ...model import Layer, LayerState
from ..base import LayerEntry, busy_timeout_ms
from ..physical import Check, LayerProof, Reclaimed, ScanSources
from ..sql import epochs_in_use
from .backend import DB_NAME, SQLiteBackend, read_only, unwritable
from .errors import translate

__all__ = ["SQLITE_FORMAT", "SQLiteFormat", "SQLitePhysical"]

_WAL_BLOCKED = "an open reader blocks wal_checkpoint(TRUNCATE); close it and purge again"

_LAYERS = (
    LayerProof(Layer.ROWS, "rows deleted with secure_delete=ON: SQLite zeroes every freed cell and page"),
    LayerProof(
        Layer.WAL, "wal_checkpoint(TRUNCATE) empties the WAL, which holds the deleted pages' old images"
    ),
    LayerProof(
        Layer.INDEX,
        "the sealed search vectors are rows of the database, deleted with their records; the "
        "in-memory index zeroes its entries",
    ),
    LayerProof(
        Layer.SCAN,
        f"every file under the data directory is scanned for the request's probes; residue in "
        f"{DB_NAME}* is rewritten away once (VACUUM, then a TRUNCATE checkpoint) and scanned again",
    ),
)


class SQLiteFormat:
    """A data directory as SQLite keeps it: ``cenotaph.db`` and its ``-wal``, ``-shm`` (and a
    rollback ``-journal`` only if something else opened it so)."""

    restored_files = frozenset({DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal"})

    def holds_store(self, directory: Path) -> bool:
        return (directory / DB_NAME).is_file()

    def unwritable(self, directory: Path) -> list[Path]:
        return unwritable(directory)

    def snapshot_files(self, directory: Path) -> list[Path]:
        return [directory / DB_NAME]

    def holds_snapshot(self, directory: Path) -> bool:
        return (directory / DB_NAME).is_file()

    def install_snapshot(self, src: Path, target: Path) -> None:
        shutil.copyfile(src / DB_NAME, target / DB_NAME)
        fsync(target / DB_NAME)

    def settings_checks(self, directory: Path) -> list[Check]:
        with _database(directory) as (path, which):
            try:
                conn = SQLiteBackend.connect(path)
            except (CenotaphError, sqlite3.Error) as exc:
                reason = " ".join(str(exc).split())
                return [Check("sqlite connection", "fail", f"{which}: {reason}")]
            try:
                secure = int(conn.execute("PRAGMA secure_delete").fetchone()[0])
                journal = _journal_mode(conn, path)
            finally:
                conn.close()
        return [
            Check(
                "sqlite secure_delete",
                "ok" if secure == 1 else "fail",
                f"{secure} on a fresh connection ({which})",
            ),
            Check("sqlite journal_mode", "ok" if journal == "wal" else "fail", f"{journal} ({which})"),
        ]

    def integrity_check(self, directory: Path) -> Check:
        with contextlib.closing(SQLiteBackend.connect(directory / DB_NAME)) as conn:
            quick = str(conn.execute("PRAGMA quick_check").fetchone()[0])
        return Check("database integrity", "ok" if quick == "ok" else "fail", f"quick_check: {quick}")

    def version_checks(self) -> list[Check]:
        return [Check("sqlite version", "ok", sqlite3.sqlite_version)]

    def tombstone_targets(self, directory: Path) -> list[bytes]:
        conn = SQLiteBackend.connect(directory / DB_NAME)
        try:
            return [bytes(row[0]) for row in conn.execute("SELECT target FROM tombstones")]
        finally:
            conn.close()


SQLITE_FORMAT = SQLiteFormat()


@contextlib.contextmanager
def _database(data: Path) -> Iterator[tuple[Path, str]]:
    """The store's database if it exists, else a throwaway one (to check this SQLite build)."""
    if (data / DB_NAME).is_file():
        yield data / DB_NAME, "store database"
        return
    with tempfile.TemporaryDirectory(prefix="cenotaph-doctor-") as tmp:
        yield Path(tmp) / DB_NAME, "a temporary database"


def _journal_mode(conn: sqlite3.Connection, path: Path) -> str:
    """The database's journal mode. A read-only connection may be opened immutable, which reports
    its own mode; the file header says what the file is (bytes 18 and 19 are 2 in WAL mode)."""
    if not read_only(path.parent):
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    with open(path, "rb") as handle:
        header = handle.read(20)
    return "wal" if header[18:20] == b"\x02\x02" else "delete"


class SQLitePhysical:
    """The physical erasure of one open :class:`SQLiteBackend`, on its connection and lock."""

    format = SQLITE_FORMAT
    layers = _LAYERS

    def __init__(self, backend: SQLiteBackend) -> None:
        self._backend = backend

    def reclaim(self) -> Reclaimed:
        done, left = self.checkpoint_truncate()
        entry = (
            LayerEntry(LayerState.DONE, {"wal_bytes": 0})
            if done
            else LayerEntry(LayerState.PENDING, {"wal_bytes": left, "gap": _WAL_BLOCKED})
        )
        return Reclaimed(done, left, {Layer.WAL: entry})

    def scan_sources(self) -> ScanSources:
        return ScanSources({"": self._backend.directory.resolve()})

    def is_database_file(self, name: str) -> bool:
        return name.rsplit("/", 1)[-1].startswith(DB_NAME)

    def snapshot(self, directory: Path) -> set[int]:
        target = directory / DB_NAME
        target.unlink(missing_ok=True)  # VACUUM INTO refuses an existing file
        return self.vacuum_into(target)

    def blocked_wait_s(self) -> float:
        return busy_timeout_ms() / 1000

    def checkpoint_truncate(self, attempts: int = 20) -> tuple[bool, int]:
        """``wal_checkpoint(TRUNCATE)`` until it succeeds; (done, wal bytes left). An open reader
        anywhere keeps it busy, and then the WAL layer stays pending."""
        backend = self._backend
        wal = backend.path.with_name(backend.path.name + "-wal")
        for attempt in range(attempts):
            with backend._lock:
                try:
                    # TRUNCATE would wait out busy_timeout for every reader; poll without waiting
                    backend._conn.execute("PRAGMA busy_timeout=0")
                    busy = backend._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                except sqlite3.Error as exc:
                    raise translate(exc, backend.path) from exc
                finally:
                    backend._conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms()}")
            if busy == 0:  # the WAL was emptied (later commits append only new frames)
                return True, 0
            time.sleep(min(0.005 * (attempt + 1), 0.05))
        return False, wal.stat().st_size if wal.exists() else 0

    def rewrite(self) -> bool:
        """``VACUUM`` (every page rebuilt from live cells only), then a TRUNCATE checkpoint so the
        old pages leave the WAL too. False if an open reader keeps the WAL."""
        backend = self._backend
        with backend._lock:
            try:
                backend._conn.execute("VACUUM")
            except sqlite3.Error as exc:
                raise translate(exc, backend.path) from exc
        return self.checkpoint_truncate()[0]

    def vacuum_into(self, target: Path) -> set[int]:
        """A consistent, compact copy with no freelist residue; returns the KEK epochs
        the copy's wrapped keys use (read from the copy itself: a rotation may have committed
        since anyone last looked)."""
        backend = self._backend
        with backend._lock:
            try:
                backend._conn.execute("VACUUM INTO ?", (str(target),))
                with contextlib.closing(sqlite3.connect(f"{target.as_uri()}?mode=ro", uri=True)) as copy:
                    return epochs_in_use(copy.execute)
            except sqlite3.Error as exc:
                raise translate(exc, backend.path) from exc

    def owned_files(self) -> list[Path]:
        return sorted(p for p in self._backend.directory.rglob("*") if p.is_file())
