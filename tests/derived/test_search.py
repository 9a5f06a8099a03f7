"""Search through the public API: relevance, k, scope semantics (R1), metadata filters, the final
materialization step after forgets in this process and in another one (R2), session taint (W6), and
bad input (InvalidValueError, store unchanged)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.kit.checks import present
from tests.kit.stores import StoreFactory

from cenotaph import SearchHit
from cenotaph.errors import CenotaphError, InvalidScopeError, InvalidValueError

from ._helpers import assert_unreadable, forget_in_child, write_in_child

TENANT = "tenant:acme"
USER = f"{TENANT}/user:alice"
S1 = f"{USER}/session:s1"
S2 = f"{USER}/session:s2"
BOB = f"{TENANT}/user:bob"


def _ids(hits: list[SearchHit]) -> list[str]:
    return [h.record.id for h in hits]


def test_relevance_ranks_lexical_overlap_first(store_factory: StoreFactory) -> None:
    store = store_factory()
    cardio = store.write(USER, "cardio", "Cardiology appointment with Dr Heart on Tuesday")
    car = store.write(USER, "car", "Car service appointment next week")
    groceries = store.write(USER, "groceries", "Buy milk, eggs and bread at the grocery store")
    hits = store.search(USER, "cardiology appointment")
    assert _ids(hits)[:2] == [cardio.id, car.id]
    assert all(h.score > 0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].score > hits[1].score
    assert groceries.id not in _ids(hits)[:2]
    assert hits[0].record == cardio  # the hit carries the whole decrypted record
    assert _ids(store.search(USER, "milk and bread"))[0] == groceries.id
    # the value's JSON structure is searchable too (value_text: keys and leaves)
    nested = store.write(USER, "nested", {"topic": "holiday", "places": ["Lisbon", "Porto"]})
    assert _ids(store.search(USER, "porto holiday"))[0] == nested.id
    # nothing in common: no hits at all rather than noise
    assert store.search(USER, "zzqx") == []


def test_k_is_respected(store_factory: StoreFactory) -> None:
    store = store_factory()
    records = store.write_many(
        [{"scope": USER, "key": f"k{i}", "value": f"project note number {i}"} for i in range(15)]
    )
    assert len(store.search(USER, "project note")) == 10  # the default
    for k in (1, 5, 15, 1000):
        hits = store.search(USER, "project note", k=k)
        assert len(hits) == min(k, 15)
    assert set(_ids(store.search(USER, "project note", k=1000))) == {r.id for r in records}
    # the best hit for a specific query is the exact one, whatever k
    assert _ids(store.search(USER, "project note number 7", k=1)) == [records[7].id]


def test_fallthrough_and_include_descendants(store_factory: StoreFactory) -> None:
    store = store_factory()
    rec = {
        scope: store.write(scope, "memo", f"project memo for {scope.split(':')[-1]}")
        for scope in (TENANT, USER, S1, S2, BOB, "tenant:globex/user:alice")
    }

    def found(scope: str, **options: Any) -> set[str]:
        return {h.record.scope for h in store.search(scope, "project memo", k=1000, **options)}

    assert found(S1) == {S1, USER, TENANT}
    assert found(S1, fallthrough=False) == {S1}
    assert found(USER) == {USER, TENANT}
    assert found(USER, include_descendants=True) == {USER, TENANT, S1, S2}
    assert found(USER, fallthrough=False, include_descendants=True) == {USER, S1, S2}
    assert found(TENANT, include_descendants=True) == {TENANT, USER, S1, S2, BOB}
    # a scope never written falls through to its ancestors; without fallthrough it has nothing
    assert found(f"{USER}/session:new") == {USER, TENANT}
    assert found(f"{USER}/session:new", fallthrough=False) == set()
    assert found(f"{USER}/session:new", fallthrough=False, include_descendants=True) == set()
    assert len(rec) == 6


FILTER_CASES = [
    pytest.param({"topic": "health"}, {"r1"}),
    pytest.param({"topic": {"$eq": "food"}}, {"r2"}),
    pytest.param({"prio": {"$eq": 2}}, {"r2"}),
    pytest.param({"prio": {"$ne": 2}}, {"r1", "r3", "r4"}),
    pytest.param({"topic": {"$ne": "health"}}, {"r2", "r3", "r4"}),
    pytest.param({"topic": {"$in": ["health", "food"]}}, {"r1", "r2"}),
    pytest.param({"topic": {"$nin": ["health"]}}, {"r2", "r3", "r4"}),
    pytest.param({"topic": {"$exists": False}}, {"r3"}),
    pytest.param({"topic": {"$exists": True}}, {"r1", "r2", "r4"}),
    pytest.param({"topic": None}, {"r4"}),
    pytest.param({"topic": "food", "prio": 2}, {"r2"}),
    pytest.param({"topic": "food", "prio": 1}, set()),
    pytest.param({"prio": {"$exists": True, "$ne": 1}}, {"r2"}),
    pytest.param({"tags": ["a", "b"]}, {"r1"}),
    pytest.param({"nested": {"$eq": {"x": 1}}}, {"r2"}),
    pytest.param({}, {"r1", "r2", "r3", "r4"}),
]


@pytest.mark.parametrize(
    ("conditions", "expected"), FILTER_CASES, ids=[str(c.values[0]) for c in FILTER_CASES]
)
def test_metadata_filters(
    store_factory: StoreFactory, conditions: dict[str, Any], expected: set[str]
) -> None:
    store = store_factory()
    store.write(USER, "r1", "meeting notes one", metadata={"topic": "health", "prio": 1, "tags": ["a", "b"]})
    store.write(USER, "r2", "meeting notes two", metadata={"topic": "food", "prio": 2, "nested": {"x": 1}})
    store.write(USER, "r3", "meeting notes three", metadata={})
    store.write(USER, "r4", "meeting notes four", metadata={"topic": None})
    hits = store.search(USER, "meeting notes", k=1000, filter=conditions)
    assert len(hits) == len(expected)
    assert {h.record.key for h in hits} == expected
    assert all(h.record.metadata == present(store.read(USER, h.record.key)).metadata for h in hits)


def test_filter_applies_before_k(store_factory: StoreFactory) -> None:
    """k counts records that pass the filter, not raw candidates: the best match is filtered out."""
    store = store_factory()
    store.write(USER, "best", "cardiology appointment cardiology", metadata={"topic": "health"})
    for i in range(30):
        store.write(USER, f"h{i}", f"cardiology appointment {i}", metadata={"topic": "health"})
    wanted = store.write(USER, "food", "an appointment at the bakery", metadata={"topic": "food"})
    hits = store.search(USER, "cardiology appointment", k=1, filter={"topic": "food"})
    assert _ids(hits) == [wanted.id]


@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_forgotten_record_never_appears_in_this_process(store_factory: StoreFactory, mode: str) -> None:
    store = store_factory()
    note = store.write(S1, "cardio", "cardiology appointment on Tuesday", metadata={"topic": "health"})
    keep = store.write(S1, "dentist", "dentist appointment on Friday", metadata={"topic": "health"})
    # warm everything: the index, the decrypted cache, a session
    assert _ids(store.search(S1, "cardiology appointment"))[0] == note.id
    assert store.read(S1, "cardio") == note and store.get(note.id) == note

    store.forget(S1, "cardio", mode=mode)

    assert_unreadable(store, note, "cardiology appointment")
    for options in (
        {},
        {"fallthrough": False},
        {"include_descendants": True},
        {"filter": {"topic": "health"}},
    ):
        assert _ids(store.search(S1, "cardiology appointment", k=1000, **options)) == [keep.id]
    store = store_factory.reopen(store)
    assert_unreadable(store, note, "cardiology appointment")
    assert _ids(store.search(S1, "cardiology appointment", k=1000)) == [keep.id]


@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_forgotten_in_another_process_never_appears_here(store_factory: StoreFactory, mode: str) -> None:
    """Store B (this process) has a warm index and cache; a child process forgets; B's very next
    search / read / get must not return the record (the index is reset before the read returns)."""
    store = store_factory()
    location = store_factory.location(store)
    note = store.write(S1, "cardio", "cardiology appointment on Tuesday")
    keep = store.write(S1, "dentist", "dentist appointment on Friday")
    assert _ids(store.search(S1, "cardiology appointment", k=1000)) == [note.id, keep.id]
    assert store.read(S1, "cardio") == note
    assert note.id in store._search._vectors  # warm: the vector is in this process's index

    forget_in_child(location, S1, "cardio", mode, purge=mode == "compliance")

    assert _ids(store.search(S1, "cardiology appointment", k=1000)) == [keep.id]  # first call after
    assert store.read(S1, "cardio") is None
    assert store.get(note.id) is None
    assert_unreadable(store, note, "cardiology appointment")
    assert store.read(S1, "dentist") == keep


def test_index_catches_up_with_another_process_writes(store_factory: StoreFactory) -> None:
    store = store_factory()
    location = store_factory.location(store)
    first = store.write(S1, "first", "cardiology appointment one")
    assert _ids(store.search(S1, "cardiology appointment")) == [first.id]
    child = write_in_child(location, S1, "second", "cardiology appointment two")
    hits = store.search(S1, "cardiology appointment two", k=10)
    assert _ids(hits) == [child["id"], first.id]
    forget_in_child(location, S1, "second", "operational")
    assert _ids(store.search(S1, "cardiology appointment two", k=10)) == [first.id]


def test_session_search_taints(store_factory: StoreFactory) -> None:
    store = store_factory()
    cardio = store.write(S1, "cardio", "cardiology appointment on Tuesday")
    dentist = store.write(USER, "dentist", "dentist appointment on Friday")
    store.write(USER, "groceries", "milk eggs bread")
    with store.session(S1) as session:
        assert session.search(S1, "zzqx") == []  # no hit, no taint
        assert session.read_set == ()
        hits = session.search(S1, "appointment", k=10)
        # (the lexical embedder may add low-score hits through hash collisions: they taint too)
        assert {cardio.id, dentist.id} <= set(_ids(hits))
        assert session.read_set == tuple(_ids(hits))
        summary = session.write(USER, "summary", "two appointments this week")
    assert summary.derived_from == tuple(_ids(hits))
    with store.session(S1) as session:
        session.search(S1, "appointment", k=1, filter={"nothing": {"$nin": ["x"]}})
        assert len(session.read_set) == 1
    # the taint is lineage: forgetting a searched record takes the summary with it
    store.forget(S1, "cardio")
    assert store.get(summary.id) is None


BAD_INPUT = [
    ({"query": ""}, "query"),
    ({"query": "   \n\t "}, "query"),
    ({"query": "x" * 10_001}, "query"),
    ({"query": None}, "query"),
    ({"query": 42}, "query"),
    ({"query": b"cardiology"}, "query"),
    ({"k": 0}, "k"),
    ({"k": -1}, "k"),
    ({"k": 1001}, "k"),
    ({"k": "3"}, "k"),
    ({"k": True}, "k"),
    ({"k": 3.0}, "k"),
    ({"k": None}, "k"),
    ({"filter": {"topic": {"$regex": "he.*"}}}, "operator"),
    ({"filter": {"topic": {}}}, "operator"),
    ({"filter": {"topic": {"$in": "health"}}}, "$in"),
    ({"filter": {"topic": {"$nin": "health"}}}, "$nin"),
    ({"filter": ["topic"]}, "filter"),
    ({"filter": "topic=health"}, "filter"),
    ({"filter": {1: "health"}}, "filter"),
]


@pytest.mark.parametrize(("options", "word"), BAD_INPUT, ids=[repr(o)[:40] for o, _ in BAD_INPUT])
def test_bad_input_is_refused_and_changes_nothing(
    store_factory: StoreFactory, options: dict[str, Any], word: str
) -> None:
    store = store_factory()
    store.write(USER, "cardio", "cardiology appointment", metadata={"topic": "health"})
    store.write(USER, "dentist", "dentist appointment", metadata={"topic": "teeth"})
    before = [(r.id, r.version) for r in store.list(TENANT, include_descendants=True)]
    hits_before = [(h.record.id, h.score) for h in store.search(USER, "appointment")]
    call = {"query": "cardiology appointment", **options}
    query = call.pop("query")
    with pytest.raises(InvalidValueError) as caught:
        store.search(USER, query, **call)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, CenotaphError)
    message = str(caught.value)
    assert word in message
    assert len(message) < 300  # says what to do, does not echo a huge query back
    assert [(r.id, r.version) for r in store.list(TENANT, include_descendants=True)] == before
    assert [(h.record.id, h.score) for h in store.search(USER, "appointment")] == hits_before
    with store.session(USER) as session, pytest.raises(InvalidValueError):
        session.search(USER, query, **call)
    assert session.read_set == ()


def test_boundaries_are_accepted(store_factory: StoreFactory) -> None:
    store = store_factory()
    rec = store.write(USER, "cardio", "cardiology appointment")
    assert _ids(store.search(USER, "cardiology " + "x" * (10_000 - 11), k=1000)) == [rec.id]
    assert _ids(store.search(USER, "cardiology", k=1)) == [rec.id]
    assert store.search(USER, "!!! ???") == []  # no words: valid, matches nothing


@pytest.mark.parametrize("scope", ["", "/tenant:acme", "tenant:acme/", "Tenant:acme", "tenant:"])
def test_bad_scope_is_refused(store_factory: StoreFactory, scope: str) -> None:
    store = store_factory()
    store.write(USER, "cardio", "cardiology appointment")
    with pytest.raises(InvalidScopeError) as caught:
        store.search(scope, "cardiology")
    assert isinstance(caught.value, ValueError) and str(caught.value)
