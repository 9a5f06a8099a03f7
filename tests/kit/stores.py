"""One store factory over every backend, for every suite that opens stores.

The fixtures live in ``tests/conftest.py``: ``backend`` is parametrised over :data:`BACKENDS`
(a test marked ``@pytest.mark.sqlite_only`` gets only ``"sqlite"``), ``store_factory`` is a
:class:`StoreFactory` of that backend and ``store`` is ``store_factory()``::

    def test_a_forget_survives_a_restart(store_factory: StoreFactory) -> None:
        store = store_factory()                   # fresh and empty, auto_purge "off"
        store.write(SCOPE, "k", 1)
        store.forget(SCOPE, "k")
        store = store_factory.reopen(store)       # closed, then opened again with the same options
        assert store.read(SCOPE, "k") is None

``store_factory(purge=True)`` purges inside every compliance forget (``"sync"``); ``purge`` also
takes an ``auto_purge`` mode by name, and further keywords go to ``cenotaph.open``.
``twin(store)`` opens the same location a second time, side by side; ``location(store)`` says
where a store lives as JSON-able data, for a child process (:func:`open_location`). Every store
the factory opened is closed at teardown.

Inspectors of what is at rest are backend-specific: ``files(store)`` and ``data_dir(store)``
skip the test on any backend but SQLite (a PostgreSQL store has no files of its own); ``raw(store)``
is a plain SQLite connection, or on PostgreSQL one to the store's schema taking the same calls.
A PostgreSQL store lives in a fresh schema (dropped at teardown) with a keyring of its own.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.locations import KEYRING_OPTION, Location, open_location

from cenotaph import Store

__all__ = ["BACKENDS", "SQLITE_ONLY", "Location", "StoreFactory", "open_location", "skip_or_fail_postgres"]

BACKENDS = ("sqlite", "postgres")
SQLITE_ONLY = "sqlite_only"  # the marker of a test about SQLite's files or rows
PG_DSN_ENV = "CENOTAPH_TEST_PG_DSN"
CI_ENV = "CENOTAPH_CI"
DB_FILE = "cenotaph.db"
PURGE_MODES = {True: "sync", False: "off"}

# A default store purges and verifies (a scan in a child process, ~0.5 s) in the background after
# every compliance forget. Most rules tested are about what a forget guarantees *when it returns*,
# so the factory opens stores with ``auto_purge="off"``: the stricter case for R2/W1/W2/S2, since
# the ciphertext is still on disk and only tombstones and destroyed keys stand between it and a
# reader (and nothing changes the store behind a test's back). ``purge=True`` purges inside the
# forget (``"sync"``). Every backend must accept every mode: a backend that ignored it fails here,
# loudly, instead of silently turning the suites into ones that only ever see verified forgets.


def skip_or_fail_postgres() -> None:
    """Decide what a ``postgres`` parametrisation does on this machine: run it when the shared
    server is configured; else skip, or fail under CI (``CENOTAPH_CI`` set), where a skipped
    PostgreSQL run would hide the backend."""
    if not os.environ.get(PG_DSN_ENV):
        if os.environ.get(CI_ENV):
            pytest.fail(f"{CI_ENV} is set but {PG_DSN_ENV} is not: CI must run the PostgreSQL backend")
        pytest.skip(f"{PG_DSN_ENV} is not set")


class StoreFactory:
    """Opens stores of one backend and remembers where each lives, to reopen or inspect it."""

    def __init__(self, backend: str, base: Path) -> None:
        self.backend = backend
        self.base = base
        self._count = 0
        self._stores: list[Store] = []
        self._opened: dict[int, tuple[Location, dict[str, Any]]] = {}
        self._schemas: list[str] = []  # postgres: one fresh schema per store, dropped at teardown

    def __call__(self, *, purge: bool | str = False, **options: Any) -> Store:
        """A fresh, empty store; ``purge=True``: every compliance forget purges before it returns
        (``auto_purge="sync"``), ``False``: nothing purges until a test asks (``"off"``); a
        string is the ``auto_purge`` mode itself. ``options`` go to ``cenotaph.open``."""
        self._count += 1
        mode = PURGE_MODES[purge] if isinstance(purge, bool) else purge
        store = self._open(self._new_location(), {**options, "auto_purge": mode})
        assert store.purge_mode == mode and store.auto_purge is (mode != "off"), (
            "the store ignored auto_purge"
        )
        return store

    def _new_location(self) -> Location:
        """A fresh location of this backend, unique within the test."""
        if self.backend == "sqlite":
            return Location(str(self.base / f"store{self._count}"))
        if self.backend == "postgres":
            # a fresh schema per store (the URL's ?schema=), dropped at teardown, and a keyring
            # of its own beside the test's files
            schema = f"t_{uuid.uuid4().hex[:12]}_{self._count}"
            self._schemas.append(schema)
            dsn = os.environ[PG_DSN_ENV]
            target = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
            return Location(target, {KEYRING_OPTION: str(self.base / f"keyring{self._count}")})
        raise AssertionError(f"no location scheme for backend {self.backend!r}")  # pragma: no cover

    def _open(self, location: Location, options: dict[str, Any]) -> Store:
        store = open_location(location, **options)
        self._stores.append(store)
        self._opened[id(store)] = (location, options)
        return store

    def location(self, store: Store) -> Location:
        return self._opened[id(store)][0]

    def reopen(self, store: Store) -> Store:
        """Close ``store`` and open the same location again, with the same options (a restart)."""
        location, options = self._opened[id(store)]
        store.close()
        return self._open(location, options)

    def twin(self, store: Store) -> Store:
        """A second store open on the same location at the same time (another process's view)."""
        location, options = self._opened[id(store)]
        return self._open(location, options)

    # -- at-rest inspection (backend-specific; the rules they check are not) --------------
    def data_dir(self, store: Store) -> Path:
        if self.backend != "sqlite":
            pytest.skip(f"the {self.backend} backend keeps no files of its own to inspect (its server does)")
        return Path(self.location(store).target)

    def files(self, store: Store) -> list[Path]:
        """Every file under the data directory (database, -wal, -shm, keyring/, anything else)."""
        return sorted(p for p in self.data_dir(store).rglob("*") if p.is_file())

    @contextlib.contextmanager
    def raw(self, store: Store) -> Iterator[sqlite3.Connection]:
        """A plain connection to the store's database, for reading (or tampering with) rows.
        Only while no store of this process has it open, or reading: see ``tests.kit.oracle``.
        On PostgreSQL, a connection to the store's schema that takes the calls the tests make."""
        if self.backend == "postgres":
            with _postgres_rows(self.location(store).target) as rows:
                yield rows  # type: ignore[misc]  # the sqlite3.Connection calls the tests make
            return
        path = self.data_dir(store) / DB_FILE
        assert path.is_file(), f"expected the SQLite database at {path}"
        with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=30.0)) as conn:
            yield conn

    def close_all(self) -> None:
        for store in self._stores:
            store.close()
        if self._schemas:
            _drop_schemas(os.environ[PG_DSN_ENV], self._schemas)


class _PostgresRows:
    """The few ``sqlite3.Connection`` calls the at-rest tests make, over a store's schema in
    autocommit: ``?`` placeholders become ``%s``, and the one catalog query (the tables) is asked
    of PostgreSQL's catalog."""

    _TABLES = "SELECT name FROM sqlite_master WHERE type='table'"
    _PG_TABLES = (
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
    )

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> Any:
        query = self._PG_TABLES if sql == self._TABLES else sql.replace("?", "%s")
        return self._conn.execute(query, params)


@contextlib.contextmanager
def _postgres_rows(location: str) -> Iterator[_PostgresRows]:
    import psycopg  # the postgres parametrisation alone needs the driver
    from psycopg import sql

    from cenotaph.backends.postgres import split_schema

    dsn, schema = split_schema(location)
    assert schema is not None, "a factory store's URL names its schema"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        yield _PostgresRows(conn)


def _drop_schemas(dsn: str, schemas: list[str]) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
