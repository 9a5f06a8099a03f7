"""A large forget commits its plan's head with its ledger entry, then hides and destroys its
records in bounded chunks, and sweeps its target for anything the enumeration missed (W1, W2,
W3, W7 hold throughout); purge removes rows in chunks too, with statements that use an index.

Chunks are lowered to a few records here (``ledger.CHUNK_RECORDS``), so a forget of a dozen
records takes several transactions; the same code runs with 2,000 per chunk in production.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from tests.erasure._erasure_data import (
    DB,
    A,
    B,
    Written,
    assert_gone,
    assert_readable,
    assert_write_refused,
    cells,
    populate,
)
from tests.kit.oracle import residue, sql
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph.backends.sqlite.backend import SQLiteTxn
from cenotaph.erasure.planning.planner import ForgetPlanner
from cenotaph.erasure.purge import chunks as applier
from cenotaph.errors import DerivedFromForgottenError, ErasureNotProvableError, ForgottenError
from cenotaph.ledger import journal as ledger

CHUNK = 4
OTHER = "tenant:t/user:c/session:x"
BIG_TABLES = ("records", "lineage", "record_subjects", "derivations")


@pytest.fixture
def chunks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Chunks of CHUNK records; returns the list of chunk boundaries reached (one per commit)."""
    monkeypatch.setattr(ledger, "CHUNK_RECORDS", CHUNK)
    reached: list[str] = []
    monkeypatch.setattr(applier, "fault_point", reached.append)
    return reached


def _derived(store: cenotaph.Store, written: Written) -> cenotaph.Record:
    """A record in another subject's scope, derived from one of ``written``'s (W3)."""
    return store.write(OTHER, "summary", "a summary of the forgotten note", derived_from=[written.ids[0]])


@pytest.mark.sqlite_only
@pytest.mark.parametrize("target", ["subject", "scope"])
def test_a_large_compliance_forget_is_applied_in_chunks_and_leaves_nothing(
    store_factory: StoreFactory, chunks: list[str], target: str
) -> None:
    store = store_factory()
    data = store_factory.data_dir(store)
    a = populate(store, A, "A", short=13, long=1)
    b = populate(store, B, "B", short=3, long=0)
    derived = _derived(store, a)
    a_cells = cells(data / DB, a.ids)
    request = store.forget_subject(A) if target == "subject" else store.forget(A)
    planned = len(a.ids) + 1  # and the derived record
    assert chunks == ["forget.chunk"] * (math.ceil(planned / CHUNK) + 1), "chunks, then the last step"
    assert request.status().state == "shredded"
    assert request.status().layers["keys"].state == "done"
    assert_gone(store, a)
    assert store.get(derived.id) is None and store.read(OTHER, "summary") is None
    assert_write_refused(store, a)
    with pytest.raises(DerivedFromForgottenError):
        store.write(OTHER, "again", "x", derived_from=[a.ids[1]])
    assert_readable(store, b)
    assert request.wait(timeout=60).state == "verified"
    assert store.confirm_erasure(request.id).layers["scan"].evidence["probes"] > 0
    found = residue(data, texts=[a.canary], blobs=a_cells)
    assert found["text_hits"] == [] and found["window_hits"] == [], found
    assert_readable(store, b)


def test_a_large_operational_forget_hides_in_chunks_and_never_reports_erasure(
    store: cenotaph.Store, chunks: list[str]
) -> None:
    a = populate(store, A, "A", short=10, long=0)
    request = store.forget(A, mode="operational")
    assert len(chunks) == math.ceil(len(a.ids) / CHUNK) + 1
    assert request.status().state == "tombstoned"
    assert_gone(store, a)
    assert_write_refused(store, a)
    report = store.purge()
    assert report.requests[request.id] == "tombstoned"
    assert request.status().layers["reclaim"].state == "done"
    assert request.status().layers["reclaim"].evidence["rows_removed"] == len(a.ids)
    with pytest.raises(ErasureNotProvableError):
        store.confirm_erasure(request.id)


def _write_during_the_survey(
    monkeypatch: pytest.MonkeyPatch, store_factory: StoreFactory, store: cenotaph.Store
) -> dict[str, Any]:
    """After the survey ran (outside the write lock) and before the forget's transaction, another
    store writes a record into the target and one derived from a target record elsewhere."""
    written: dict[str, Any] = {}
    survey = ForgetPlanner.survey

    def survey_then_write(self: ForgetPlanner, *args: Any, **kwargs: Any) -> Any:
        found = survey(self, *args, **kwargs)
        with store_factory.twin(store) as other:
            source = other.list(A, include_descendants=True)[0]
            written["late"] = other.write(f"{A}/session:late", "note", "written after the survey")
            written["derived"] = other.write(OTHER, "late-summary", "derived late", derived_from=[source.id])
        return found

    monkeypatch.setattr(ForgetPlanner, "survey", survey_then_write)
    return written


@pytest.mark.parametrize("chunked", [True, False])
def test_records_written_after_the_survey_are_caught_up_inside_the_lock(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch, chunked: bool
) -> None:
    store = store_factory()
    a = populate(store, A, "A", short=9 if chunked else 2, long=0)
    monkeypatch.setattr(ledger, "CHUNK_RECORDS", CHUNK)
    late = _write_during_the_survey(monkeypatch, store_factory, store)
    request = store.forget_subject(A)
    plan = store._ledger.view.plans[request.id]
    for record in late.values():
        assert record.id in plan["destroy_records"], "the ledgered plan names it: it decides in every process"
        assert store.get(record.id) is None
    assert store.read(f"{A}/session:late", "note") is None and store.read(OTHER, "late-summary") is None
    with pytest.raises(DerivedFromForgottenError):
        store.write(OTHER, "x", "y", derived_from=[late["late"].id])
    assert_gone(store, a)
    assert request.wait(timeout=60).state == "verified"


@pytest.mark.sqlite_only
def test_a_record_the_enumeration_missed_is_swept_and_shredded(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch, chunks: list[str]
) -> None:
    """Were the catch-up to miss a record written just before the tombstone, the ledger's
    tombstone still hides it from every read, and the sweep after the chunks destroys its keys."""
    store = store_factory()
    a = populate(store, A, "A", short=9, long=0)
    late = _write_during_the_survey(monkeypatch, store_factory, store)
    monkeypatch.setattr(SQLiteTxn, "written_since", lambda self, version: [])
    request = store.forget_subject(A)
    missed = late["late"].id
    assert missed not in store._ledger.view.plans[request.id]["destroy_records"]
    assert store.get(missed) is None and store.read(f"{A}/session:late", "note") is None
    # its keys and lineage seed are gone (the row itself waits for the purge)
    (wrapped,) = sql(
        store_factory.data_dir(store) / DB, "SELECT wrapped FROM lineage WHERE record_id=?", [missed]
    )
    assert wrapped == (None,)
    with pytest.raises(DerivedFromForgottenError):
        store.write(OTHER, "x", "y", derived_from=[missed])
    assert_gone(store, a)


@pytest.mark.sqlite_only
def test_a_small_forget_that_cannot_enumerate_its_target_fails_closed(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applied whole, the postcondition's sweep runs inside the forget's own transaction: a record
    the plan misses fails the forget, and nothing is changed."""
    store = store_factory()
    populate(store, A, "A", short=2, long=0)
    _write_during_the_survey(monkeypatch, store_factory, store)
    monkeypatch.setattr(SQLiteTxn, "written_since", lambda self, version: [])
    with pytest.raises(ErasureNotProvableError, match="nothing was changed"):
        store.forget_subject(A)
    assert store.erasures() == []
    assert store.read(f"{A}/session:late", "note") is not None
    store.write(A, "after", "not refused: the forget did not happen")


def test_a_write_racing_a_chunked_forget_lands_before_it_or_is_refused(
    store_factory: StoreFactory, chunks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between chunks another store writes to the target: refused, whatever chunk is running."""
    store = store_factory()
    populate(store, A, "A", short=12, long=0)
    outcomes: list[str] = []
    other = store_factory.twin(store)

    def write_between_chunks(point: str) -> None:
        chunks.append(point)
        try:
            other.write(f"{A}/session:s1", f"raced{len(chunks)}", "a racing write")
        except ForgottenError:
            outcomes.append("refused")
        else:
            outcomes.append("landed")

    monkeypatch.setattr(applier, "fault_point", write_between_chunks)
    try:
        request = store.forget_subject(A)
    finally:
        other.close()
    assert outcomes and set(outcomes) == {"refused"}, outcomes
    assert store.list(A, include_descendants=True) == []
    assert request.status().state == "shredded"


@pytest.mark.sqlite_only
def test_purge_and_forget_statements_use_an_index_on_every_large_table(
    store: cenotaph.Store, chunks: list[str]
) -> None:
    """No statement of a forget (survey, plan, chunks, sweep) or of its purge scans records,
    lineage, record_subjects or derivations whole: their cost follows what is forgotten, not the
    store (deleting record_subjects by record_id and derivations by derived_id once did)."""
    populate(store, A, "A", short=10, long=0)
    populate(store, B, "B", short=10, long=0)
    _derived(store, populate(store, "tenant:t/user:d", "D", short=2, long=0))
    conn = store._backend.inner._conn  # type: ignore[attr-defined]
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        store.forget(A)
        store.forget_subject("tenant:t/user:d")
        store.forget(B, "short1")
        store.purge()
    finally:
        conn.set_trace_callback(None)
    scans = set()
    for statement in statements:
        if not statement.lstrip().upper().startswith(("SELECT", "DELETE", "UPDATE", "INSERT", "WITH")):
            continue
        for *_, detail in conn.execute("EXPLAIN QUERY PLAN " + statement):
            if detail.startswith("SCAN") and detail.split()[1] in BIG_TABLES:
                scans.add((detail, statement[:120]))
    assert statements and scans == set(), sorted(scans)
