"""Round trips per operation on PostgreSQL, counted on the wire (the benchmark's relay in its own
process between the store and the server): what each operation costs over a network is how many
times it waits for the server, so a statement that stops sharing a round trip shows here.

- a read whose keys are cached: 1 (BEGIN, the one statement, COMMIT in one pipeline)
- a search: 2 whatever k is (the clock and the marker; then every hit's row and lineage at once,
  with the COMMIT)
- a write transaction's statements whose answers nobody reads wait for none: a forget's writes
  ride with its next read; the forget's whole count is pinned so that it only goes down
- an operational key forget: 4 (its hiding reads no row count)
- a compliance scope forget: as many whatever the child scopes its records are in
- every request's status for a listing: as many round trips with twenty requests as with one
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.kit.wire import Wire, relayed, settle

import cenotaph
from cenotaph import LocalKeyring, Store
from cenotaph.backends.postgres import PostgresBackend

SCOPE = "tenant:acme/user:u1"
RUNS = 8
# measured 4 for a one-key compliance forget (12 before its survey took the clock, the change
# marker and its statement in one round trip, its sample, the keys that open it and the consumers'
# takes went with its lock and its forget epoch was derived; 15 before "written since", the audit
# log's tail and the audit chain id went with its lock, 17 before its probes read no empty list
# of scope and subject keys, 18 before the consumers' requests were read only where a consumer
# took a record, 22 before its sample's reads were one statement, 26 before its first reads went
# with its lock, 36 before its survey and its postcondition were one statement each, 49 before its
# writes were pipelined)
FORGET_ROUND_TRIPS = 5
# measured 5 for a compliance scope forget of records in one or four child scopes (9 and 12 before
# the subtree's scopes rows and the records' lineage tokens went with its lock)
SCOPE_FORGET_ROUND_TRIPS = 5


@pytest.fixture
def wire(pg_dsn: str) -> Iterator[Wire]:
    with relayed(pg_dsn) as counted:
        yield counted


@pytest.fixture
def store(wire: Wire, pg_schema: str, tmp_path: Path) -> Iterator[Store]:
    opened = cenotaph.open(
        f"{wire.dsn}?schema={pg_schema}", key_provider=LocalKeyring(tmp_path / "keyring"), auto_purge="off"
    )
    try:
        yield opened
    finally:
        opened.close()


def _counting(store: Store, wire: Wire) -> AbstractContextManager[list[int]]:
    """The round trips of the block, once the store's pool opens no connection in the background."""
    backend = store._backend.inner
    assert isinstance(backend, PostgresBackend)
    settle(backend._pool)
    return wire.counting()


def _each(store: Store, wire: Wire, runs: int, op: Callable[[int], object]) -> int:
    """The round trips of ``op`` run ``runs`` times, all told."""
    with _counting(store, wire) as trips:
        for i in range(runs):
            op(i)
    return trips[0]


def _about(counted: int, expected: int) -> bool:
    """``counted`` is ``expected`` to the wire's noise: psycopg sometimes ends a pipeline with a
    flush request the server has nothing to answer, and on a busy machine the wire may count it
    as the client speaking once more (at most one in two operations here; a statement more per
    operation is a whole ``RUNS`` more)."""
    return abs(counted - expected) <= RUNS // 2


def _fill(store: Store, n: int = 12) -> None:
    store.write_many(
        [
            {"scope": SCOPE, "key": f"k{i}", "value": f"note {i} about the garden and the orchard, row {i}"}
            for i in range(n)
        ]
    )


def test_a_read_of_cached_keys_is_one_round_trip(store: Store, wire: Wire) -> None:
    _fill(store)
    store._caches.records.clear()  # no record written is answered from memory
    assert store.read(SCOPE, "k0") is not None  # opened: the scope's and subjects' keys, cached from here

    def read(i: int) -> None:
        assert store.read(SCOPE, f"k{1 + i}") is not None

    assert _about(_each(store, wire, RUNS, read), RUNS)
    assert _about(_each(store, wire, RUNS, lambda i: store.read(SCOPE, f"absent{i}")), RUNS)


@pytest.mark.parametrize("k", [1, 5, 10])
def test_a_search_is_two_round_trips_whatever_k_is(store: Store, wire: Wire, k: int) -> None:
    _fill(store)
    assert store.search(SCOPE, "garden orchard", k=k)  # builds the index

    def search(i: int) -> None:
        store._caches.records.clear()  # every hit is read and opened again
        assert len(store.search(SCOPE, "garden orchard", k=k)) == k

    assert _about(_each(store, wire, RUNS, search), 2 * RUNS)


def test_a_search_after_a_forget_leaves_its_record_out_then_is_two_round_trips_again(
    store: Store, wire: Wire
) -> None:
    _fill(store)
    first = store.search(SCOPE, "garden orchard", k=3)
    store.forget(SCOPE, first[0].record.key)
    hits = store.search(SCOPE, "garden orchard", k=3)  # syncs with the ledger, catches the index up
    assert first[0].record.id not in {h.record.id for h in hits} and len(hits) == 3

    def search(i: int) -> None:
        again = store.search(SCOPE, "garden orchard", k=3)
        assert [h.record.id for h in again] == [h.record.id for h in hits]

    assert _about(_each(store, wire, RUNS, search), 2 * RUNS)


def test_a_forgets_writes_wait_for_no_round_trip_of_their_own(
    store: Store, wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(store)
    store.forget(SCOPE, "k0")  # whatever a first forget warms up
    sent: list[str] = []
    original = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return original(self, query, *args, **kwargs)

    with monkeypatch.context() as patch, _counting(store, wire) as trips:
        patch.setattr(psycopg.Cursor, "execute", execute)
        request = store.forget(SCOPE, "k1")
    assert request.status().state == "shredded"
    assert store.read(SCOPE, "k1", fallthrough=False) is None
    # a statement that writes: a plain one, or the change marker's bump (schema 5's bump_marker())
    writes = [
        s for s in sent if s.split(None, 1)[0] in ("INSERT", "UPDATE", "DELETE") or "bump_marker()" in s
    ]
    assert len(writes) >= 8  # tombstones, keys, records, the request, the audit entry, the marker...
    assert trips[0] <= len(sent) - len(writes)  # none of them waited for its own answer
    assert trips[0] <= FORGET_ROUND_TRIPS


def test_every_requests_status_is_read_in_as_many_round_trips_with_twenty_requests(
    store: Store, wire: Wire
) -> None:
    _fill(store, 21)
    store.forget(SCOPE, "k0")
    store.erasure_statuses()  # whatever a first call warms up
    alone = _each(store, wire, RUNS, lambda i: store.erasure_statuses())
    assert [s.state for _, s in store.erasure_statuses()] == ["shredded"]
    for i in range(1, 21):
        store.forget(SCOPE, f"k{i}")
    store.erasure_statuses()
    crowded = _each(store, wire, RUNS, lambda i: store.erasure_statuses())
    listed = store.erasure_statuses()
    assert len(listed) == 21
    assert [(r.id, s) for r, s in listed] == [(r.id, r.status()) for r, _ in listed]  # as each says
    # the same statements a call (one request more was one status call more: ~7 round trips)
    assert abs(crowded - alone) <= RUNS, (alone, crowded)


def test_an_operational_forget_is_four_round_trips(store: Store, wire: Wire) -> None:
    """Its survey; its locks and first reads; its writes with the read they ride with; the marker's
    bump with COMMIT. Hiding reads no row count, so it waits for nothing of its own."""
    _fill(store, RUNS + 1)
    store.forget(SCOPE, "k0", mode="operational")  # whatever a first forget warms up

    with _counting(store, wire) as trips:
        for i in range(RUNS):
            store.forget(SCOPE, f"k{i + 1}", mode="operational")
    assert _about(trips[0], 4 * RUNS), trips[0]
    assert all(store.read(SCOPE, f"k{i + 1}") is None for i in range(RUNS))


def test_a_compliance_scope_forget_reads_its_subtrees_keys_with_its_locks(store: Store, wire: Wire) -> None:
    """Records in several child scopes: the keys that open each (its scope's chain) and those the
    forget destroys (the subtree's) come with the locks, read once, as do the records' lineage
    tokens; so the count does not grow with the child scopes sampled."""
    counts = []
    for n, children in enumerate((1, 4)):
        scope = f"tenant:acme/user:s{n}"
        store.write_many(
            [
                {"scope": f"{scope}/session:c{i % children}", "key": f"k{i}", "value": f"note {i}"}
                for i in range(8)
            ]
        )
        with _counting(store, wire) as trips:
            request = store.forget(scope)
        assert request.status().state == "shredded"
        assert store.list(scope) == []
        counts.append(trips[0])
    assert counts[1] == counts[0], counts
    assert counts[1] <= SCOPE_FORGET_ROUND_TRIPS, counts


def test_a_subject_forget_does_not_walk_the_scopes_earlier_forgets_emptied(store: Store, wire: Wire) -> None:
    """Whether a scope of the subject's records is shared is asked of its whole subtree at once:
    a user with thirty sessions forgotten before costs the subject's forget what a user with one
    does: 26 round trips both (28 and 92 when it walked each session, two statements apiece)."""
    counts = []
    for n, emptied in enumerate((1, 30)):
        user = f"tenant:acme/user:w{n}"
        store.write_many(
            [{"scope": f"{user}/session:old{i}", "key": "k", "value": f"note {i}"} for i in range(emptied)]
        )
        for i in range(emptied):
            store.forget(f"{user}/session:old{i}", "k")
        person = f"person:p{n}"
        store.write(f"{user}/session:new", "about", "a note about them", subjects=[person])
        with _counting(store, wire) as trips:
            request = store.forget_subject(person)
        assert request.status().state == "shredded"
        assert store.read(f"{user}/session:new", "about") is None
        counts.append(trips[0])
    assert counts[1] == counts[0], counts
