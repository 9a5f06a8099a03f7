"""Fixtures of the backend-neutral conformance suite (SPEC §6: one suite, every backend).

``store_factory`` is parametrised over every backend. ``store_factory()`` opens a fresh, empty
store; ``store_factory.reopen(store)`` closes it and opens the same location again (a restart);
``store_factory.twin(store)`` opens the same location a second time, side by side;
every store it opened is closed at teardown. ``store`` is ``store_factory()``.

Tests that inspect what is at rest (files, raw rows) call ``store_factory.raw(store)`` or
``store_factory.files(store)``; a backend without such an inspector skips them (PostgreSQL has
rows, through ``raw``, but no files of the store's: the server keeps them).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import cenotaph
from cenotaph import Store

BACKENDS = ("sqlite", "postgres")
PG_DSN_ENV = "CENOTAPH_TEST_PG_DSN"
CI_ENV = "CENOTAPH_CI"
DB_FILE = "cenotaph.db"

# A default store purges and verifies (a scan in a child process, ~0.5 s) in the background after
# every compliance forget. The rules here are about what a forget guarantees *when it returns*, so
# most tests open stores with ``auto_purge="off"``: the stricter case for R2/W1/W2/S2, since the
# ciphertext is still on disk and only tombstones and destroyed keys stand between it and a reader
# (and nothing changes the store behind a test's back). The at-rest tests (S1, S2, W4) run both
# ways via ``store_factory(purge=True)``, which purges inside the forget (``"sync"``). Every
# backend must accept both: a backend without them fails here, loudly, instead of silently turning
# the suite into one that only ever sees verified forgets.

# `cenotaph.open("postgresql://...")` exists: CI (CENOTAPH_CI set) must provide
# CENOTAPH_TEST_PG_DSN, and a skipped postgres run there is a failure.
POSTGRES_BACKEND_BUILT = True


def skip_or_fail_postgres() -> None:
    """Decide what a ``postgres`` parametrisation does on this machine: run it when the shared
    server is configured; else skip, or fail under CI."""
    dsn = os.environ.get(PG_DSN_ENV)
    if not dsn:
        if POSTGRES_BACKEND_BUILT and os.environ.get(CI_ENV):
            pytest.fail(f"{CI_ENV} is set but {PG_DSN_ENV} is not: CI must run the PostgreSQL backend")
        pytest.skip(f"{PG_DSN_ENV} is not set")
    if not POSTGRES_BACKEND_BUILT:  # pragma: no cover - kept for a backend that is not built
        pytest.skip("PostgreSQL backend not built yet")


class StoreFactory:
    """Opens stores of one backend and remembers where each lives, to reopen or inspect it."""

    def __init__(self, backend: str, base: Path) -> None:
        self.backend = backend
        self.base = base
        self._count = 0
        self._stores: list[Store] = []
        self._schemas: list[str] = []  # postgres: one fresh schema per store, dropped at teardown
        self._locations: dict[int, tuple[str, dict[str, object]]] = {}

    def __call__(self, *, purge: bool = False) -> Store:
        """A fresh, empty store; ``purge=True``: every compliance forget purges before it returns
        (``auto_purge="sync"``), else nothing purges until a test asks (``"off"``)."""
        self._count += 1
        mode = "sync" if purge else "off"
        options: dict[str, object] = {"auto_purge": mode}
        if self.backend == "postgres":  # no data directory to hold the default keyring
            options["key_provider"] = cenotaph.LocalKeyring(self.base / f"keyring{self._count}")
        store = self._open(self._new_location(), options)
        assert store.purge_mode == mode and store.auto_purge is purge, "the store ignored auto_purge"
        return store

    def _new_location(self) -> str:
        if self.backend == "sqlite":
            return str(self.base / f"store{self._count}")
        if self.backend == "postgres":
            schema = f"conformance_{uuid.uuid4().hex[:12]}_{self._count}"
            self._schemas.append(schema)
            dsn = os.environ[PG_DSN_ENV]
            return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
        raise AssertionError(f"no location scheme for backend {self.backend!r}")  # pragma: no cover

    def _open(self, location: str, options: dict[str, object]) -> Store:
        store = cenotaph.open(location, **options)  # type: ignore[arg-type]
        self._stores.append(store)
        self._locations[id(store)] = (location, options)
        return store

    def location(self, store: Store) -> str:
        return self._locations[id(store)][0]

    def reopen(self, store: Store) -> Store:
        """Close ``store`` and open the same location again, with the same options (a restart)."""
        location, options = self._locations[id(store)]
        store.close()
        return self._open(location, options)

    def twin(self, store: Store) -> Store:
        """A second store open on the same location at the same time (another process's view)."""
        location, options = self._locations[id(store)]
        return self._open(location, options)

    # -- at-rest inspection (backend-specific; the rules they check are not) --------------
    def data_dir(self, store: Store) -> Path:
        if self.backend != "sqlite":
            pytest.skip(f"the {self.backend} backend keeps no files of its own to inspect (its server does)")
        return Path(self.location(store))

    def files(self, store: Store) -> list[Path]:
        """Every file under the data directory (database, -wal, -shm, keyring/, anything else)."""
        return sorted(p for p in self.data_dir(store).rglob("*") if p.is_file())

    @contextlib.contextmanager
    def raw(self, store: Store) -> Iterator[sqlite3.Connection]:
        """A plain connection to the store's database, for reading (or tampering with) rows."""
        if self.backend == "postgres":
            with _postgres_rows(self.location(store)) as rows:
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

    def __init__(self, conn: object) -> None:
        self._conn = conn

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> object:
        query = self._PG_TABLES if sql == self._TABLES else sql.replace("?", "%s")
        return self._conn.execute(query, params)  # type: ignore[attr-defined]


@contextlib.contextmanager
def _postgres_rows(location: str) -> Iterator[_PostgresRows]:
    import psycopg
    from psycopg import sql

    from cenotaph.backends.postgres import split_schema

    dsn, schema = split_schema(location)
    assert schema is not None, "a conformance store's URL names its schema"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        yield _PostgresRows(conn)


def _drop_schemas(dsn: str, schemas: list[str]) -> None:
    import psycopg  # the postgres parametrisation alone needs the driver
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(autouse=True)
def _default_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default key provider: ``<dir>/keyring``, unsealed, whatever the caller's shell says."""
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "postgres":
        skip_or_fail_postgres()
    return name


@pytest.fixture
def store_factory(backend: str, tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory(backend, tmp_path)
    try:
        yield factory
    finally:
        factory.close_all()


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    return store_factory()
