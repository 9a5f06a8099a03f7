"""The shim that retargets LangGraph's own store tests (vendored beside it) at a store.

``CENOTAPH_PEER_TARGET=cenotaph`` (the default) gives the tests cenotaph's ``CenotaphStore``
wherever they build ``InMemoryStore`` or ``SqliteStore``, and ``AsyncCenotaphStore`` wherever they
build ``AsyncSqliteStore`` (the shim adds only ``setup()``, a no-op, and ``from_conn_string``, a
fresh data directory; every other method the tests call is the store's own); ``sqlite`` gives
them LangGraph's own ``SqliteStore`` / ``AsyncSqliteStore`` (``InMemoryStore`` too becomes a
``SqliteStore`` over ``:memory:``), the baseline the counts in docs/integrations.md compare with.
Each cenotaph store lives in its own temporary data directory. SQLite-specific helpers the tests
import (``NS_MATCH_FUNCTION``, ``_escape_glob_literal``...) are LangGraph's own under both targets.

SqliteStore's vector search loads the sqlite-vec extension, which this Python's ``sqlite3`` cannot
(it is built without ``enable_load_extension``); the baseline therefore runs SqliteStore on
``pysqlite3`` (the same DB-API over a full SQLite build) when that is installed, as its users do.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import aiosqlite.core
from langgraph.store import sqlite as lg_sqlite
from langgraph.store.sqlite import base as lg_sqlite_base
from langgraph.store.sqlite.base import (
    NS_MATCH_FUNCTION,
    BaseSqliteStore,
    SqliteIndexConfig,
    _escape_glob_literal,
    _namespace_match_pattern,
)

from cenotaph.integrations.langgraph import AsyncCenotaphStore, BaseCenotaphStore, CenotaphStore

__all__ = [
    "NS_MATCH_FUNCTION",
    "TARGET",
    "AsyncSqliteStore",
    "BaseSqliteStore",
    "InMemoryStore",
    "SqliteIndexConfig",
    "SqliteStore",
    "_escape_glob_literal",
    "_namespace_match_pattern",
]

TARGET = os.environ.get("CENOTAPH_PEER_TARGET", "cenotaph")
if TARGET not in ("cenotaph", "sqlite"):
    raise RuntimeError("CENOTAPH_PEER_TARGET must be 'cenotaph' or 'sqlite'")

_open: list[tuple[BaseCenotaphStore, str]] = []


def full_sqlite() -> Any:
    """A ``sqlite3`` module that can load extensions (pysqlite3 if installed, else the stdlib's)."""
    try:
        import pysqlite3.dbapi2 as full
    except ImportError:
        return sqlite3
    return full


def _new_store(cls: type[CenotaphStore] | type[AsyncCenotaphStore], **options: Any) -> Any:
    directory = tempfile.mkdtemp(prefix="cenotaph-peer-")
    store = cls(directory, **options)
    _open.append((store, directory))
    return store


def _forget_directory(store: BaseCenotaphStore) -> str | None:
    for i, (candidate, directory) in enumerate(_open):
        if candidate is store:
            del _open[i]
            return directory
    return None


def _dispose(store: CenotaphStore | AsyncCenotaphStore) -> None:
    directory = _forget_directory(store)
    if directory is not None:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)


async def _adispose(store: AsyncCenotaphStore) -> None:
    directory = _forget_directory(store)
    if directory is not None:
        await store.aclose()
        shutil.rmtree(directory, ignore_errors=True)


@atexit.register
def _dispose_all() -> None:
    while _open:
        store = _open[-1][0]
        assert isinstance(store, CenotaphStore | AsyncCenotaphStore)
        _dispose(store)  # no event loop runs at exit: the async store's close() is allowed


class _PeerStore(CenotaphStore):
    """CenotaphStore with the SqliteStore surface the tests call (``setup``)."""

    def setup(self) -> None:
        """Nothing to set up: a cenotaph data directory is ready when opened."""

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **options: Any) -> Iterator[_PeerStore]:
        store = _new_store(cls, **options)  # ':memory:' and file names alike get a fresh directory
        try:
            yield store
        finally:
            _dispose(store)


class _AsyncPeerStore(AsyncCenotaphStore):
    """AsyncCenotaphStore with the AsyncSqliteStore surface the tests call (``setup``)."""

    async def setup(self) -> None:
        """Nothing to set up."""

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, conn_string: str, **options: Any) -> AsyncIterator[_AsyncPeerStore]:
        store = _new_store(cls, **options)
        try:
            yield store
        finally:
            await _adispose(store)


class _SqliteInMemoryStore(lg_sqlite.SqliteStore):
    """LangGraph's SqliteStore over ``:memory:``, built the way InMemoryStore is (no arguments)."""

    def __init__(self, **options: Any) -> None:
        conn = full_sqlite().connect(":memory:", check_same_thread=False, isolation_level=None)
        super().__init__(conn, **options)
        self.setup()


class _CenotaphInMemoryStore(_PeerStore):
    """CenotaphStore in a fresh temporary data directory, built the way InMemoryStore is."""

    def __init__(self, **options: Any) -> None:
        directory = tempfile.mkdtemp(prefix="cenotaph-peer-")
        super().__init__(directory, **options)
        _open.append((self, directory))


if TARGET == "sqlite":
    lg_sqlite_base.sqlite3 = aiosqlite.core.sqlite3 = full_sqlite()  # type: ignore[attr-defined]
    SqliteStore: Any = lg_sqlite.SqliteStore
    AsyncSqliteStore: Any = lg_sqlite.AsyncSqliteStore
    InMemoryStore: Any = _SqliteInMemoryStore
else:
    SqliteStore = _PeerStore
    AsyncSqliteStore = _AsyncPeerStore
    InMemoryStore = _CenotaphInMemoryStore
