"""An erasure request's status reads the database in one transaction of as many statements
however many other requests are pending (it once asked for each pending request's probe key, one
by one, in a second transaction). Counted on
the database connection itself: psycopg's cursor on PostgreSQL, SQLite's trace callback."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from tests.kit.stores import StoreFactory

from cenotaph import Store
from cenotaph.backends.sqlite.backend import SQLiteBackend


@contextmanager
def counted(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements the store sends to its database while the block runs."""
    sent: list[str] = []
    inner = store._backend.inner
    if isinstance(inner, SQLiteBackend):
        conn: sqlite3.Connection = inner._conn
        conn.set_trace_callback(sent.append)
        try:
            yield sent
        finally:
            conn.set_trace_callback(None)
        return
    original: Callable[..., Any] = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return original(self, query, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", execute)
        yield sent


def test_status_sends_as_many_statements_with_twenty_pending_requests_as_with_one(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_factory(purge=False)  # every compliance request stays pending (shredded)
    for i in range(21):
        store.write(f"tenant:t/user:u{i}", "note", f"a note of user {i}, long enough to sample probes")
    request = store.forget("tenant:t/user:u0", "note")
    request.status()  # whatever a first call warms up
    with counted(store, monkeypatch) as alone:
        assert request.status().state == "shredded"
    others = [store.forget(f"tenant:t/user:u{i}", "note") for i in range(1, 21)]
    assert all(r.status().state == "shredded" for r in others)
    request.status()
    with counted(store, monkeypatch) as crowded:
        status = request.status()
    assert status.state == "shredded" and status.layers["horizon"].state == "pending"
    assert "pending erasure's probes" in status.layers["horizon"].evidence["reason"]  # it saw the others
    assert len(alone) > 0
    assert len(crowded) == len(alone), crowded
    assert sum(s.startswith("BEGIN") for s in crowded) == 1, crowded  # one read transaction


def test_every_requests_status_is_one_transaction_of_as_many_statements_with_twenty_requests(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``erasure_statuses`` (``cenotaph status``, the doctor, the HTTP listings): one read
    transaction for every request, the same statements however many there are (it once asked
    each request's status, a transaction each), and each status as the request's own says."""
    store = store_factory(purge=False)  # every compliance request stays pending (shredded)
    for i in range(21):
        store.write(f"tenant:t/user:u{i}", "note", f"a note of user {i}, long enough to sample probes")
    store.forget("tenant:t/user:u0", "note")
    store.forget("tenant:t/user:u0", "other", mode="operational")
    store.erasure_statuses()  # whatever a first call warms up
    with counted(store, monkeypatch) as alone:
        assert len(store.erasure_statuses()) == 2
    for i in range(1, 21):
        store.forget(f"tenant:t/user:u{i}", "note")
    store.erasure_statuses()
    with counted(store, monkeypatch) as crowded:
        listed = store.erasure_statuses()
    assert len(listed) == 22
    assert [(r.id, s) for r, s in listed] == [(r.id, r.status()) for r, _ in listed]
    assert [r.id for r, _ in listed] == [r.id for r in store.erasures()]  # oldest first
    assert len(alone) > 0
    assert len(crowded) == len(alone), crowded
    assert sum(s.startswith("BEGIN") for s in crowded) == 1, crowded  # one read transaction
