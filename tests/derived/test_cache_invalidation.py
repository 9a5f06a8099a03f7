"""In-process caches (decrypted records, unwrapped keys, the vector index) never outlive a forget.

Same process: the forget clears them before it returns. Another process: the next read, get or search
here must not return the record, and (the brief's stronger claim, "a forget in another process resets
the index before the next read returns") the decrypted copy and the vector must be gone from this
process's memory by then. The cache is also never a path around the final check (R2).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.kit.checks import present
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph import Record, Store

from ._helpers import assert_unreadable, forget_in_child, forget_subject_in_child, raw_db, write_in_child

SCOPE = "tenant:acme/user:alice/session:s1"
BOB = "tenant:acme/user:bob"
QUERY = "cardiology appointment"
MODES = pytest.mark.parametrize("mode", ["compliance", "operational"])


def _warm(store: Store) -> tuple[Record, Record]:
    note = store.write(SCOPE, "cardio", "cardiology appointment on Tuesday")
    keep = store.write(SCOPE, "dentist", "dentist appointment on Friday")
    assert store.read(SCOPE, "cardio") == note
    assert store.get(note.id) == note
    assert [h.record.id for h in store.search(SCOPE, QUERY, k=1000)] == [note.id, keep.id]
    assert note.id in store._caches.records  # the decrypted record is cached here
    assert note.id in store._search._vectors  # and its vector is in this process's index
    return note, keep


def _session_read(store: Store, rec: Record) -> Record | None:
    with store.session(rec.scope) as session:
        return session.read(rec.scope, rec.key)


OPS: dict[str, Callable[[Store, Record], Record | None]] = {
    "read": lambda store, rec: store.read(rec.scope, rec.key),
    "get": lambda store, rec: store.get(rec.id),
    "search": lambda store, rec: next(
        (h.record for h in store.search(rec.scope, QUERY, k=1000) if h.record.id == rec.id), None
    ),
    "list": lambda store, rec: next((r for r in store.list(rec.scope) if r.id == rec.id), None),
    "session-read": _session_read,
}


@MODES
@pytest.mark.parametrize("op", sorted(OPS))
def test_forget_in_another_process_hides_the_record_from_the_next_call(
    store_factory: StoreFactory, mode: str, op: str
) -> None:
    store = store_factory()
    note, keep = _warm(store)
    forget_in_child(store_factory.location(store), SCOPE, "cardio", mode)
    assert OPS[op](store, note) is None  # the very first call after the forget
    assert_unreadable(store, note, QUERY)
    assert store.read(SCOPE, "dentist") == keep


@MODES
def test_forget_in_another_process_drops_this_process_decrypted_copies(
    store_factory: StoreFactory, mode: str
) -> None:
    store = store_factory()
    note, _ = _warm(store)
    forget_in_child(store_factory.location(store), SCOPE, "cardio", mode)
    assert store.read(SCOPE, "cardio") is None
    assert note.id not in store._caches.records
    assert note.id not in store._search._vectors
    assert note.id not in store._keys.lineage_keys


@pytest.mark.sqlite_only
def test_other_process_compliance_forget_shreds_what_this_process_cached(store_factory: StoreFactory) -> None:
    store = store_factory()
    source = store.write(SCOPE, "note", "alpha: cardiology appointment")
    derived = store.write(
        BOB, "summary", "beta: colleague's cardiology appointment", derived_from=[source.id]
    )
    directory = store_factory.data_dir(store)
    store.close()
    with raw_db(directory) as conn:  # the lineage index misses the edge (W3: "a copy it missed")
        assert conn.execute("DELETE FROM derivations").rowcount == 1
    store = store_factory.reopen(store)
    assert store.get(derived.id) == derived  # cached here, keys unwrapped here

    forget_in_child(directory, SCOPE, "note", "compliance")

    # control: a store that never cached it cannot decrypt it (cryptography alone shreds it)
    fresh = cenotaph.open(directory, auto_purge="off")
    try:
        assert fresh.get(derived.id) is None
    finally:
        fresh.close()
    assert store.get(derived.id) is None


@MODES
def test_forget_in_this_process_clears_caches_before_it_returns(
    store_factory: StoreFactory, mode: str
) -> None:
    store = store_factory()
    note, keep = _warm(store)
    assert note.id in store._keys.lineage_keys
    store.forget(SCOPE, "cardio", mode=mode)
    # synchronously, before anything else is called
    assert note.id not in store._caches.records
    assert note.id not in store._search._vectors
    assert note.id not in store._keys.lineage_keys
    assert keep.id in store._search._vectors  # only the forgotten record's vector was removed
    assert_unreadable(store, note, QUERY)
    assert store.read(SCOPE, "dentist") == keep


@MODES
def test_a_stale_cache_entry_is_never_served(store_factory: StoreFactory, mode: str) -> None:
    """Simulate a cache that missed the invalidation: the final materialization step re-checks the
    row (and the keys) before a cached record is returned (R2)."""
    store = store_factory()
    note, keep = _warm(store)
    stale = store._caches.records[note.id]  # the decrypted entry, as the cache held it before the forget
    store.forget(SCOPE, "cardio", mode=mode)
    assert note.id not in store._caches.records
    with store._caches.lock:
        store._caches.records[note.id] = stale
    store._search.add(
        [note.id],
        store._search.embed_records([note]),
        [store._tokens.scope(cenotaph.Scope.parse(note.scope))],
    )
    for op in OPS.values():
        assert op(store, note) is None
    assert_unreadable(store, note, QUERY)
    assert store.read(SCOPE, "dentist") == keep


def test_a_stale_cache_entry_of_a_replaced_record_is_never_served(store_factory: StoreFactory) -> None:
    """Another process replaced the value: this process returns the new record, not its cached one."""
    store = store_factory()
    first = store.write(SCOPE, "diet", "vegetarian")
    assert store.read(SCOPE, "diet") == first
    child = write_in_child(store_factory.location(store), SCOPE, "diet", "vegan")
    current = present(store.read(SCOPE, "diet"))
    assert current.id == child["id"] and current.value == "vegan"
    assert store.get(first.id) is None
    assert [h.record.value for h in store.search(SCOPE, "vegetarian vegan", k=10)] == ["vegan"]


def test_subject_forget_in_another_process_hides_cached_records(store_factory: StoreFactory) -> None:
    store = store_factory()
    note = store.write(SCOPE, "cardio", "cardiology appointment on Tuesday")
    derived = store.write(BOB, "summary", "colleague's cardiology appointment", derived_from=[note.id])
    bob_own = store.write(BOB, "own", "bob's own memory")
    assert store.get(derived.id) == derived and store.read(SCOPE, "cardio") == note
    forget_subject_in_child(store_factory.location(store), "tenant:acme/user:alice")
    assert store.get(derived.id) is None
    assert store.read(SCOPE, "cardio") is None
    for record in (note, derived):
        assert_unreadable(store, record, QUERY)
    assert store.get(bob_own.id) == bob_own
