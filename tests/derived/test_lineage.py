"""W3 derived state, R3 expiry vs. lineage, subject inheritance (§1), and the cryptographic cascade.

Lineage is checked two ways: through the API (nothing derived from a compliance-forgotten record is
readable) and at rest, in the SQLite file of the closed store (the derived rows' keys are destroyed:
``lineage.wrapped IS NULL``, or the rows are gone once purged).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.kit.checks import present
from tests.kit.clock import ManualClock
from tests.kit.stores import StoreFactory

from cenotaph import Record, Store
from cenotaph.errors import DerivedFromForgottenError, ForgottenError

from ._helpers import assert_unreadable, raw_db, visible_ids

A_SCOPE = "tenant:acme/user:alice/session:s1"
B_SCOPE = "tenant:acme/user:bob"  # another user of the same tenant
C_SCOPE = "tenant:globex/doc:quarterly"  # another tenant altogether
ALICE = "tenant:acme/user:alice"
BOB = "tenant:acme/user:bob"
PURGE = pytest.mark.parametrize("purge", [False, True], ids=["no-purge", "auto-purge"])


def _chain(store: Store) -> tuple[Record, Record, Record]:
    a = store.write(A_SCOPE, "note", "alpha: alice has a cardiology appointment")
    b = store.write(B_SCOPE, "summary", "beta: a colleague has a cardiology appointment", derived_from=[a.id])
    c = store.write(
        C_SCOPE, "digest", "gamma: staff cardiology appointments this quarter", derived_from=[b.id]
    )
    return a, b, c


def _lineage_rows(
    directory: Path, ids: list[str]
) -> tuple[dict[str, tuple[Any, ...]], dict[str, tuple[Any, ...]], dict[str, Any]]:
    with raw_db(directory) as conn:
        marks = ",".join("?" * len(ids))
        lineage = {
            r[0]: r[1:]
            for r in conn.execute(
                f"SELECT record_id, wrapped, subjects, destroyed_version FROM lineage WHERE record_id IN ({marks})",
                ids,
            )
        }
        records = {
            r[0]: r[1:]
            for r in conn.execute(
                f"SELECT id, wrapped, hidden_version FROM records WHERE id IN ({marks})", ids
            )
        }
        erased = {
            r[0]: r[1]
            for r in conn.execute(
                f"SELECT record_id, version FROM erased_records WHERE record_id IN ({marks})", ids
            )
        }
    return lineage, records, erased


@pytest.mark.sqlite_only
@PURGE
def test_compliance_forget_cascades_three_levels_across_scopes_and_tenants(
    store_factory: StoreFactory, purge: bool
) -> None:
    store = store_factory(purge=purge)
    a, b, c = _chain(store)
    d = store.write(B_SCOPE, "unrelated", "delta: bob's own cardiology notes")
    assert b.derived_from == (a.id,) and c.derived_from == (b.id,)

    request = store.forget(A_SCOPE, "note")

    for record in (a, b, c):
        assert_unreadable(store, record, "cardiology appointment")
    assert present(store.read(B_SCOPE, "unrelated")).id == d.id
    assert visible_ids(store, "tenant:acme", "cardiology") == {d.id}
    assert visible_ids(store, "tenant:globex", "cardiology") == set()
    for record in (b, c):  # nothing can be derived from the cascaded records either
        with pytest.raises(DerivedFromForgottenError):
            store.write(B_SCOPE, "again", "x", derived_from=[record.id])
    directory = store_factory.data_dir(store)
    store.close()

    ids = [a.id, b.id, c.id, d.id]
    lineage, records, erased = _lineage_rows(directory, ids)
    assert lineage[d.id][0] is not None and records[d.id][0] is not None  # control: d's keys live
    for record in (a, b, c):
        if purge:  # rows purged; the ids are remembered (content-free) to refuse late derived writes
            assert record.id not in lineage and record.id not in records
            assert erased[record.id] == request.version
        else:  # rows still there, keys destroyed in the forget's transaction
            wrapped, subjects, destroyed = lineage[record.id]
            assert wrapped is None and subjects is None and destroyed == request.version
            assert records[record.id][0] is None and records[record.id][1] == request.version

    store = store_factory.reopen(store)
    for record in (a, b, c):
        assert_unreadable(store, record, "cardiology appointment")
    assert present(store.read(B_SCOPE, "unrelated")).id == d.id


@pytest.mark.sqlite_only
@PURGE
def test_operational_forget_does_not_cascade(store_factory: StoreFactory, purge: bool) -> None:
    store = store_factory(purge=purge)
    a, b, c = _chain(store)

    request = store.forget(A_SCOPE, "note", mode="operational")
    store.purge()  # reclaims a's row; its lineage key must survive (W3)

    assert_unreadable(store, a, "cardiology appointment")
    for record in (b, c):
        assert store.get(record.id) == record
        assert store.read(record.scope, record.key) == record
        assert record.id in visible_ids(store, record.scope, "cardiology appointment")
    assert request.status().state == "tombstoned"
    directory = store_factory.data_dir(store)
    store.close()
    lineage, _, _ = _lineage_rows(directory, [a.id])
    assert lineage[a.id][0] is not None and lineage[a.id][2] is None  # lineage key kept through it

    store = store_factory.reopen(store)
    assert store.get(b.id) == b and store.get(c.id) == c
    # A later compliance forget of the (already hidden, reclaimed) source still cascades.
    store.forget(A_SCOPE, "note")
    for record in (a, b, c):
        assert_unreadable(store, record, "cardiology appointment")


def test_expiry_of_a_source_does_not_forget_what_was_derived_from_it(
    store_factory: StoreFactory, clock: ManualClock
) -> None:
    """R3: "a record derived from an expired source is not forgotten by that expiry"."""
    store = store_factory(clock=clock)
    a = store.write(A_SCOPE, "note", "alpha: alice has a cardiology appointment", ttl=60)
    b = store.write(B_SCOPE, "summary", "beta: derived from alpha", derived_from=[a.id])
    assert set(b.subjects) == {BOB, ALICE}
    clock.advance_past(a)

    assert store.read(A_SCOPE, "note") is None and store.get(a.id) is None  # expired at once
    assert store.get(b.id) == b
    store.purge()  # sweeps a's expired row; its lineage key stays
    assert store.get(b.id) == b
    store = store_factory.reopen(store)
    assert store.get(b.id) == b
    assert store.read(B_SCOPE, "summary") == b

    # Expiry is not a forget: a write derived from the expired source is still accepted, and it
    # still inherits the source's subjects (sealed in the source's lineage row).
    c = store.write(C_SCOPE, "digest", "gamma: derived from expired alpha", derived_from=[a.id])
    assert ALICE in c.subjects
    assert store.get(c.id) == c

    # A compliance forget of the expired source still cascades through its lineage.
    store.forget(A_SCOPE, "note")
    for record in (b, c):
        assert_unreadable(store, record)


def test_derived_records_inherit_the_sources_subjects(store_factory: StoreFactory) -> None:
    store = store_factory()
    a = store.write(ALICE, "fact", "alice prefers tea over coffee")
    b = store.write(BOB, "overheard", "bob heard alice prefers tea", derived_from=[a.id])
    assert set(b.subjects) == {BOB, ALICE}
    # explicit subjects add to inherited ones
    c = store.write(
        "tenant:acme/doc:shared", "memo", "team drinks memo", derived_from=[b.id], subjects=["idp:77"]
    )
    assert set(c.subjects) == {BOB, ALICE, "idp:77"}
    # ... and never remove them (an empty list, or naming only the writer's own subject)
    d = store.write(BOB, "note2", "bob's note on tea", derived_from=[a.id], subjects=[])
    e = store.write(BOB, "note3", "bob's other note on tea", derived_from=[a.id], subjects=[BOB])
    assert set(d.subjects) == set(e.subjects) == {BOB, ALICE}
    own = store.write(BOB, "own", "bob's own memory, about nobody else")
    assert own.subjects == (BOB,)

    export = store.export_subject(ALICE)
    assert [r["id"] for r in export["records"]] == [a.id]
    assert {r["id"] for r in export["derived_records"]} == {b.id, c.id, d.id, e.id}

    request = store.forget_subject(ALICE)
    assert request.mode == "compliance" and request.target_kind == "subject"

    for record in (a, b, c, d, e):
        assert_unreadable(store, record)
    assert store.get(own.id) == own
    assert [r.id for r in store.list(BOB)] == [own.id]
    export = store.export_subject(ALICE)
    assert export["records"] == [] and export["derived_records"] == []
    assert [r["id"] for r in export["erasure_requests"]] == [request.id]
    assert [r["id"] for r in store.export_subject(BOB)["records"]] == [own.id]
    # a record carrying the forgotten subject cannot be written again without a token (W1)
    with pytest.raises(ForgottenError):
        store.write(BOB, "new", "about alice again", subjects=[ALICE])
    store = store_factory.reopen(store)
    for record in (a, b, c, d, e):
        assert_unreadable(store, record)


@PURGE
def test_write_derived_from_a_compliance_forgotten_record_is_refused(
    store_factory: StoreFactory, purge: bool
) -> None:
    store = store_factory(purge=purge)
    a = store.write(A_SCOPE, "note", "alpha")
    live = store.write(BOB, "live", "a live source")
    request = store.forget(A_SCOPE, "note")
    if purge:
        assert request.status().state == "verified"  # rows are gone: only erased_records remembers
    before = [(r.id, r.version) for r in store.list("tenant:acme", include_descendants=True)]

    with pytest.raises(DerivedFromForgottenError) as caught:
        store.write(BOB, "late", "derived from alpha", derived_from=[a.id])
    assert caught.value.version == request.version
    assert "derived" in str(caught.value).lower()
    with pytest.raises(DerivedFromForgottenError):  # one bad source spoils the write
        store.write(BOB, "late", "derived from both", derived_from=[live.id, a.id])
    with pytest.raises(DerivedFromForgottenError):  # write_many is all or nothing
        store.write_many(
            [
                {"scope": BOB, "key": "ok", "value": "fine"},
                {"scope": BOB, "key": "late", "value": "derived", "derived_from": [a.id]},
            ]
        )
    with store.session(BOB) as session, pytest.raises(DerivedFromForgottenError):
        session.write(BOB, "late", "explicitly derived", derived_from=[a.id])
    assert [(r.id, r.version) for r in store.list("tenant:acme", include_descendants=True)] == before

    store = store_factory.reopen(store)
    with pytest.raises(DerivedFromForgottenError):
        store.write(BOB, "late", "derived from alpha", derived_from=[a.id])


@pytest.mark.parametrize("purged", [False, True], ids=["before-purge", "after-purge"])
def test_write_derived_from_an_operationally_forgotten_record_is_refused(
    store_factory: StoreFactory, purged: bool
) -> None:
    store = store_factory()
    a = store.write(A_SCOPE, "note", "alpha: a fact alice asked the agent to stop recalling")
    store.forget(A_SCOPE, "note", mode="operational")
    if purged:
        store.purge()
    with pytest.raises(DerivedFromForgottenError):
        store.write(BOB, "late", "derived from alpha", derived_from=[a.id])


@pytest.mark.parametrize("forget", ["key", "scope"])
def test_an_operational_forget_covers_overwritten_and_expired_versions_as_sources(
    store_factory: StoreFactory, clock: ManualClock, forget: str
) -> None:
    """Every version ever written under the forgotten target is forgotten, not only the live one:
    neither an overwritten version (read by a session before the overwrite) nor an expired and
    swept one may be a ``derived_from`` source afterwards."""
    store = store_factory(clock=clock)
    with store.session(ALICE + "/session:agent") as session:
        first = store.write(A_SCOPE, "note", "v1: alice's first note")
        assert session.read(A_SCOPE, "note") == first
        store.write(A_SCOPE, "note", "v2: overwritten")
        expired = store.write(A_SCOPE, "soon", "gone by itself", ttl=60)
        clock.advance_past(expired)
        assert store.purge().reclaimed >= 1  # the expired record's row is swept; its lineage stays
        if forget == "key":
            store.forget(A_SCOPE, "note", mode="operational")
            store.forget(A_SCOPE, "soon", mode="operational")
        else:
            store.forget(A_SCOPE, mode="operational")
        with pytest.raises(DerivedFromForgottenError):
            session.write(ALICE + "/session:agent", "summary", "based on v1")
    for source in (first, expired):
        with pytest.raises(DerivedFromForgottenError):
            store.write(BOB, "late", "derived", derived_from=[source.id])


@pytest.mark.sqlite_only
@PURGE
def test_cascade_is_cryptographic_even_when_the_lineage_index_misses_a_copy(
    store_factory: StoreFactory, purge: bool
) -> None:
    """W3/S2: B's key depends on A's lineage key, so destroying A's keys shreds B (and C) even if the
    derivations table lost the edges and the forget could not enumerate them."""
    store = store_factory(purge=purge)
    a, b, c = _chain(store)
    d = store.write(B_SCOPE, "unrelated", "delta: bob's own cardiology notes")
    directory = store_factory.data_dir(store)
    store.close()
    with raw_db(directory) as conn:
        deleted = conn.execute("DELETE FROM derivations").rowcount
    assert deleted == 2  # a -> b and b -> c

    store = store_factory.reopen(store)
    assert store.get(b.id) == b and store.get(c.id) == c  # still readable: the keys are intact
    assert {b.id, c.id} <= visible_ids(store, "tenant:acme", "cardiology") | visible_ids(
        store, "tenant:globex", "cardiology"
    )

    request = store.forget(A_SCOPE, "note")
    plan = request.status().layers["lineage"].evidence
    assert plan["cascaded"] == 1  # only a: the enumeration really missed b and c

    for record in (a, b, c):
        assert_unreadable(store, record, "cardiology appointment")
    assert store.get(d.id) == d
    with pytest.raises(DerivedFromForgottenError):
        store.write(BOB, "again", "derived from b", derived_from=[b.id])
    store.close()
    lineage, _, _ = _lineage_rows(directory, [b.id, c.id])
    assert lineage[b.id][0] is not None  # b's own row is untouched: only cryptography stands here

    store = store_factory.reopen(store)
    for record in (a, b, c):
        assert_unreadable(store, record, "cardiology appointment")
    assert "cardiology appointment" not in json.dumps(store.export_subject(BOB))
    assert store.get(d.id) == d


def test_cascade_reaches_records_derived_from_an_overwritten_version(store_factory: StoreFactory) -> None:
    """B was derived from A's first version; A was overwritten since. Forgetting A's key for compliance
    still takes B (the old version's lineage row outlives its replaced content)."""
    store = store_factory()
    a1 = store.write(A_SCOPE, "note", "first version: cardiology appointment")
    b = store.write(B_SCOPE, "summary", "derived from the first version", derived_from=[a1.id])
    a2 = store.write(A_SCOPE, "note", "second version: dentist appointment")
    assert store.get(a1.id) is None and store.read(A_SCOPE, "note") == a2
    assert store.get(b.id) == b  # replacing a source is not forgetting it

    store.forget(A_SCOPE, "note")
    for record in (a1, a2, b):
        assert_unreadable(store, record)
    with pytest.raises(DerivedFromForgottenError):
        store.write(BOB, "late", "derived from the first version", derived_from=[a1.id])


def test_repeated_operational_forgets_of_one_key_do_not_relist_its_history(
    store_factory: StoreFactory,
) -> None:
    """Each operational forget marks only the versions no forget marked yet: the plan (which
    goes into the key provider's ledger) grows with the forgotten data, not the key's history."""
    store = store_factory()
    sizes = []
    for i in range(5):
        token = store.reauthorize(A_SCOPE, "note") if i else None
        store.write(A_SCOPE, "note", f"version {i}", reauthorization=token)
        request = store.forget(A_SCOPE, "note", mode="operational")
        sizes.append(len(json.loads(store._erasure.row(request.id).plan)["hide"]))
    assert sizes == [1, 1, 1, 1, 1]
