"""The read path: resolution, nothing forgotten/expired/shredded is returned, TTL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tests.conformance._scopes import MODES, S1, S2, T, U, V
from tests.kit.clock import ManualClock
from tests.kit.stores import StoreFactory

from cenotaph import Record, Store

SHORT_TTL = 60  # seconds of the store's clock, which the test advances past it


@pytest.fixture
def clocked(store_factory: StoreFactory, clock: ManualClock) -> Store:
    """A store whose TTLs run on ``clock``."""
    return store_factory(clock=clock)


def _triples(records: list[Record]) -> list[tuple[str, str, object]]:
    return [(r.scope, r.key, r.value) for r in records]


def _value(record: Record | None) -> object:
    assert record is not None, "expected a record"
    return record.value


# -- R1 -------------------------------------------------------------------------------------
def test_read_falls_through_to_the_nearest_ancestor(store: Store) -> None:
    store.write(T, "lang", "en")
    store.write(U, "diet", "vegetarian")

    got = store.read(S1, "diet")
    assert got is not None and (got.scope, got.value) == (U, "vegetarian")
    got = store.read(S1, "lang")
    assert got is not None and (got.scope, got.value) == (T, "en")
    assert store.read(V, "diet") is None  # a sibling is not an ancestor
    assert store.read("tenant:other/user:u", "lang") is None  # nor is another tenant
    assert store.read(T, "diet") is None  # reads never fall *down* to descendants


def test_fallthrough_false_reads_exactly_one_scope(store: Store) -> None:
    store.write(U, "diet", "vegetarian")
    assert store.read(S1, "diet", fallthrough=False) is None
    got = store.read(U, "diet", fallthrough=False)
    assert got is not None and got.value == "vegetarian"


def test_the_deepest_copy_wins(store: Store) -> None:
    store.write(T, "k", "tenant")
    store.write(U, "k", "user")
    store.write(S1, "k", "session")
    assert _value(store.read(S1, "k")) == "session"
    assert _value(store.read(S2, "k")) == "user"
    assert _value(store.read(U, "k")) == "user"
    assert _value(store.read(V, "k")) == "tenant"


def test_a_write_replaces_the_slot_and_bumps_the_version(store: Store) -> None:
    first = store.write(U, "k", 1)
    second = store.write(U, "k", 2)
    assert second.version > first.version
    assert second.id != first.id
    assert _value(store.read(U, "k")) == 2
    assert store.get(first.id) is None  # the replaced record is no longer served
    assert _triples(store.list(U)) == [(U, "k", 2)]


def test_list_with_and_without_descendants(store: Store) -> None:
    store.write(T, "t1", "x")
    store.write(U, "b", 2)
    store.write(U, "a", 1)
    store.write(S1, "s", 3)
    store.write(V, "v", 4)

    assert _triples(store.list(U)) == [(U, "a", 1), (U, "b", 2)]
    assert _triples(store.list(U, include_descendants=True)) == [(U, "a", 1), (U, "b", 2), (S1, "s", 3)]
    assert _triples(store.list(T, include_descendants=True)) == [
        (T, "t1", "x"),
        (U, "a", 1),
        (U, "b", 2),
        (S1, "s", 3),
        (V, "v", 4),
    ]
    assert store.list(S1) == store.list(S1, include_descendants=True)
    assert store.list("tenant:nobody") == []
    assert store.list("tenant:nobody", include_descendants=True) == []


def test_get_by_id_returns_the_whole_record(store: Store) -> None:
    src = store.write(V, "src", {"n": 1})
    rec = store.write(
        U,
        "profile",
        {"name": "Ada", "tags": ["a", "b"], "n": 1.5, "ok": True, "none": None},
        subjects=["idp:42"],
        metadata={"source": "chat", "turn": 3},
        derived_from=[src.id],
        ttl=3600,
    )
    got = store.get(rec.id)
    assert got is not None
    assert got == store.read(U, "profile")
    assert (got.id, got.scope, got.key, got.version) == (rec.id, U, "profile", rec.version)
    assert got.value == {"name": "Ada", "tags": ["a", "b"], "n": 1.5, "ok": True, "none": None}
    assert set(got.subjects) == {U, "idp:42", V}  # default + explicit + inherited from the source
    assert dict(got.metadata) == {"source": "chat", "turn": 3}
    assert got.derived_from == (src.id,)
    assert got.expires_at is not None
    assert store.get("0" * 32) is None


def test_json_values_round_trip(store: Store) -> None:
    values: list[object] = [
        0,
        -1,
        2**53,
        1.25,
        "",
        "ünïcødé ✓",
        True,
        False,
        None,
        [],
        {},
        [1, [2, {"x": []}]],
    ]
    for i, value in enumerate(values):
        store.write(U, f"k{i}", value)
    for i, value in enumerate(values):
        got = store.read(U, f"k{i}")
        assert got is not None and got.value == value and type(got.value) is type(value)


def test_changing_a_returned_record_changes_nothing_the_store_returns(store: Store) -> None:
    """Records are the caller's own: mutating a value or its metadata, on a record returned by
    write, read, get, list or search, must not alter what any later call returns (nothing was
    written). Each path is hit twice, so both a fresh decryption and a cache hit are covered."""
    original = {"diet": "vegetarian", "allergies": ["nuts"]}
    written = store.write(U, "profile", original, metadata={"source": "intake"})
    original["diet"] = "changed through the caller's own dict"
    written.value["diet"] = "changed through write's result"
    written.metadata["source"] = "changed"  # type: ignore[index]

    def mutate(record: Record | None) -> None:
        assert record is not None
        assert record.value == {"diet": "vegetarian", "allergies": ["nuts"]}
        assert record.metadata == {"source": "intake"}
        record.value["allergies"].append("mutated")
        record.metadata["source"] = "mutated"  # type: ignore[index]

    for _ in range(2):
        mutate(store.read(U, "profile"))
        mutate(store.read(S1, "profile"))  # fall-through resolution
        mutate(store.get(written.id))
        mutate(store.list(U)[0])
        mutate(store.search(U, "vegetarian nuts")[0].record)


def test_unusual_but_valid_names_round_trip(store: Store) -> None:
    scope = "doc-kind_2:id with spaces:and:colons/user:élodie ✓"
    store.write(scope, "key with spaces & ünïcødé", "v")
    got = store.read(scope, "key with spaces & ünïcødé")
    assert got is not None and got.scope == scope and got.key == "key with spaces & ünïcødé"
    assert got.subjects == (scope,)  # path up to and including the user: segment


# -- R2 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_forgotten_records_are_never_returned(store: Store, mode: str) -> None:
    keep = store.write(U, "keep", 1)
    gone = store.write(U, "gone", 2)
    gone_child = store.write(S1, "gone", 3)

    store.forget(U, "gone", mode=mode)

    for rec in (gone, gone_child):
        assert store.get(rec.id) is None
    assert store.read(U, "gone") is None
    assert store.read(S1, "gone") is None
    assert store.read(S1, "gone", fallthrough=False) is None
    assert _triples(store.list(U, include_descendants=True)) == [(U, "keep", 1)]
    assert store.get(keep.id) == keep


@pytest.mark.parametrize("mode", MODES)
def test_scope_forget_hides_the_whole_subtree(store: Store, mode: str) -> None:
    outside = store.write(V, "k", "v")
    parent = store.write(T, "p", "t")
    inside = [store.write(U, "k", 1), store.write(S1, "k", 2), store.write(S2, "other", 3)]

    store.forget(U, mode=mode)

    for rec in inside:
        assert store.get(rec.id) is None
    assert store.list(U, include_descendants=True) == []
    assert store.read(S1, "k") is None
    assert store.read(S2, "other") is None
    assert store.read(S1, "p") == parent  # an ancestor's own record is not part of the subtree
    assert _triples(store.list(T, include_descendants=True)) == [(T, "p", "t"), (V, "k", "v")]
    assert store.get(outside.id) == outside


def test_subject_forget_hides_every_record_of_the_subject(store: Store) -> None:
    a = store.write(U, "a", 1)
    b = store.write(S1, "b", 2)  # default subject of S1 is U as well
    c = store.write("tenant:t/doc:d", "c", 3, subjects=[U])
    other = store.write(V, "a", 4)

    store.forget_subject(U)

    for rec in (a, b, c):
        assert store.get(rec.id) is None
    assert store.read(S1, "b") is None
    assert store.read("tenant:t/doc:d", "c") is None
    assert _triples(store.list(T, include_descendants=True)) == [(V, "a", 4)]
    assert store.get(other.id) == other


def test_export_subject_never_returns_forgotten_or_expired_records(
    clocked: Store, clock: ManualClock
) -> None:
    store = clocked
    kept = store.write(U, "kept", 1)
    store.write(U, "gone", 2)
    store.write(S1, "op", 3)
    short = store.write(U, "short", 4, ttl=SHORT_TTL)
    store.forget(U, "gone")
    store.forget(S1, "op", mode="operational")
    assert short.id in [r["id"] for r in store.export_subject(U)["records"]]
    clock.advance_past(short)
    export = store.export_subject(U)
    exported = [*export["records"], *export["derived_records"]]
    assert [r["id"] for r in exported] == [kept.id]


def test_forgotten_records_stay_hidden_after_reopen(store_factory: StoreFactory) -> None:
    store = store_factory()
    op = store.write(U, "op", 1)
    co = store.write(U, "co", 2)
    sub = store.write(V, "sub", 3)
    store.forget(U, "op", mode="operational")
    store.forget(U, "co")
    store.forget_subject(V)

    store = store_factory.reopen(store)
    for rec in (op, co, sub):
        assert store.get(rec.id) is None
    assert store.list(T, include_descendants=True) == []


# -- R3 -------------------------------------------------------------------------------------
def test_ttl_as_seconds_and_timedelta_sets_expires_at(clocked: Store, clock: ManualClock) -> None:
    store = clocked
    a = store.write(U, "a", 1, ttl=60)
    b = store.write(U, "b", 1, ttl=90.5)
    c = store.write(U, "c", 1, ttl=timedelta(hours=2))
    d = store.write(U, "d", 1)
    for rec, seconds in ((a, 60), (b, 90.5), (c, 7200)):
        assert rec.expires_at is not None
        assert abs(rec.expires_at - datetime.fromtimestamp(clock.now() + seconds, UTC)) < timedelta(
            milliseconds=1
        )
        assert store.get(rec.id) == rec
    assert d.expires_at is None


@pytest.mark.parametrize("ttl", [SHORT_TTL, timedelta(seconds=SHORT_TTL)], ids=["float", "timedelta"])
def test_expired_records_are_never_returned_without_a_sweep(
    clocked: Store, clock: ManualClock, ttl: float | timedelta
) -> None:
    store = clocked
    short = store.write(S1, "k", "short-lived", ttl=ttl)
    store.write(U, "k", "parent")
    long = store.write(S1, "other", "long-lived", ttl=3600)
    assert store.read(S1, "k") == short
    clock.advance(SHORT_TTL - 1)
    assert store.read(S1, "k") == short  # a second before it expires: still there

    clock.advance_past(short)

    assert store.get(short.id) is None
    assert store.read(S1, "k", fallthrough=False) is None
    assert _value(store.read(S1, "k")) == "parent"  # falls through past it
    assert _triples(store.list(S1)) == [(S1, "other", "long-lived")]
    assert short.id not in {r.id for r in store.list(U, include_descendants=True)}
    assert store.get(long.id) == long


def test_expired_records_stay_expired_after_reopen(store_factory: StoreFactory, clock: ManualClock) -> None:
    store = store_factory(clock=clock)
    rec = store.write(U, "k", "v", ttl=SHORT_TTL)
    clock.advance_past(rec)
    store = store_factory.reopen(store)
    assert store.get(rec.id) is None
    assert store.read(U, "k") is None
    assert store.list(U) == []


def test_an_expired_slot_can_be_written_again(clocked: Store, clock: ManualClock) -> None:
    store = clocked
    clock.advance_past(store.write(U, "k", "old", ttl=SHORT_TTL))
    fresh = store.write(U, "k", "new")  # expiry is not a forget: no tombstone, no token needed
    assert store.read(U, "k") == fresh


def test_a_compliance_forget_of_an_expired_source_still_reaches_derived_records(
    clocked: Store, clock: ManualClock
) -> None:
    """Expiry keeps the lineage (W3): forgetting the expired source later still cascades,
    including to records derived from it after it expired."""
    store = clocked
    source = store.write(U, "fact", "short-lived", ttl=SHORT_TTL)
    before = store.write("tenant:t/doc:1", "k", "derived before expiry", derived_from=[source.id])
    clock.advance_past(source)
    after = store.write("tenant:t/doc:2", "k", "derived after expiry", derived_from=[source.id])
    assert U in after.subjects  # subjects are still inherited from an expired source
    assert store.get(before.id) == before and store.get(after.id) == after

    store.forget(U, "fact")

    assert store.get(before.id) is None
    assert store.get(after.id) is None


def test_expiry_is_operational_derived_records_survive(clocked: Store, clock: ManualClock) -> None:
    store = clocked
    source = store.write(U, "fact", "short-lived", ttl=SHORT_TTL)
    derived = store.write("tenant:t/doc:summary", "summary", "built from fact", derived_from=[source.id])
    assert U in derived.subjects

    clock.advance_past(source)

    assert store.get(source.id) is None
    assert store.read(U, "fact") is None
    got = store.get(derived.id)
    assert got is not None and got.value == "built from fact" and got.derived_from == (source.id,)
    assert store.read("tenant:t/doc:summary", "summary") == got


# -- search (R1 coverage, R2 filtering) -----------------------------------------------------
def _hits(store: Store, scope: str, query: str, **options: object) -> set[tuple[str, str]]:
    return {(h.record.scope, h.record.key) for h in store.search(scope, query, **options)}  # type: ignore[arg-type]


def test_search_covers_the_scope_its_ancestors_and_on_request_its_descendants(store: Store) -> None:
    store.write(T, "t", "green tea policy")
    store.write(U, "u", "likes green tea")
    store.write(S1, "s", "asked about green tea")
    store.write(V, "v", "green tea hater")
    assert _hits(store, U, "green tea") == {(T, "t"), (U, "u")}
    assert _hits(store, U, "green tea", fallthrough=False) == {(U, "u")}
    assert _hits(store, U, "green tea", include_descendants=True) == {(T, "t"), (U, "u"), (S1, "s")}
    assert _hits(store, U, "green tea", fallthrough=False, include_descendants=True) == {(U, "u"), (S1, "s")}


@pytest.mark.parametrize("mode", MODES)
def test_search_never_returns_forgotten_or_expired_records(
    clocked: Store, clock: ManualClock, mode: str
) -> None:
    store = clocked
    store.write(U, "kept", "likes green tea")
    store.write(U, "gone", "likes green tea a lot")
    store.write(S1, "scoped", "green tea in session")
    store.write(V, "subject", "green tea for v")
    short = store.write(U, "short", "green tea briefly", ttl=SHORT_TTL)
    store.forget(U, "gone", mode=mode)
    store.forget(S1, mode=mode)
    store.forget_subject(V)
    assert (U, "short") in _hits(store, T, "green tea", include_descendants=True)
    clock.advance_past(short)
    assert _hits(store, T, "green tea", include_descendants=True) == {(U, "kept")}
    with store.session(U) as s:
        assert {h.record.key for h in s.search(U, "green tea", include_descendants=True)} == {"kept"}
