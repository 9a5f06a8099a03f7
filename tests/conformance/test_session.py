"""Session taint and derived state through sessions and derived_from."""

from __future__ import annotations

import pytest
from tests.conformance._scopes import U, V

from cenotaph import Store
from cenotaph.errors import DerivedFromForgottenError, ForgottenError

DOC = "tenant:t/doc:summary"


def test_session_reads_become_derived_from_of_session_writes(store: Store) -> None:
    a = store.write(U, "a", "alpha")
    b = store.write(V, "b", "beta")
    c = store.write(U, "c", "gamma")
    store.write(U, "unread", "not read")

    with store.session(DOC) as s:
        assert s.read(U, "a") == a
        assert s.get(b.id) == b
        assert s.read(U, "missing") is None
        first = s.write(DOC, "summary", "alpha+beta")
        second = s.write(DOC, "more", "with c", derived_from=[c.id])

    assert set(first.derived_from) == {a.id, b.id}
    assert set(second.derived_from) == {a.id, b.id, c.id}
    assert set(first.subjects) == {U, V}  # inherited from the sources
    stored = store.get(first.id)
    assert stored is not None and set(stored.derived_from) == {a.id, b.id}
    assert set(stored.subjects) == {U, V}


def test_a_compliance_forget_of_a_source_forgets_session_derived_records(store: Store) -> None:
    source = store.write(U, "fact", "likes tea")
    unrelated = store.write(V, "fact", "likes coffee")
    with store.session(DOC) as s:
        s.read(U, "fact")
        derived = s.write(DOC, "summary", "the user likes tea")
    transitively = store.write("tenant:t/doc:other", "k", "from summary", derived_from=[derived.id])
    independent = store.write(DOC, "independent", "no lineage")

    request = store.forget(U, "fact")

    for rec in (source, derived, transitively):
        assert store.get(rec.id) is None
    assert store.read(DOC, "summary") is None
    assert store.read("tenant:t/doc:other", "k") is None
    assert store.get(unrelated.id) == unrelated
    assert store.get(independent.id) == independent

    for gone in (source.id, derived.id, transitively.id):
        with pytest.raises(DerivedFromForgottenError) as info:
            store.write("tenant:t/doc:later", "k", "x", derived_from=[gone])
        assert isinstance(info.value, ForgottenError)
        assert info.value.version == request.version
        assert str(info.value)
    with store.session(DOC) as s, pytest.raises(DerivedFromForgottenError):
        s.write(DOC, "k", "x", derived_from=[source.id])
    assert store.read("tenant:t/doc:later", "k") is None


def test_a_write_derived_from_an_operationally_forgotten_record_is_refused(store: Store) -> None:
    source = store.write(U, "fact", 1)
    store.forget(U, "fact", mode="operational")
    with pytest.raises(DerivedFromForgottenError):
        store.write(DOC, "k", 2, derived_from=[source.id])


def test_derived_records_inherit_subjects_so_forget_subject_reaches_them(store: Store) -> None:
    source = store.write(U, "fact", "about u", subjects=["idp:u"])
    with store.session(DOC) as s:
        s.get(source.id)
        derived = s.write(DOC, "summary", "about u too", subjects=["idp:extra"])
    assert set(derived.subjects) == {U, "idp:u", "idp:extra"}  # caller subjects add, never remove
    other = store.write(DOC, "other", "no lineage")

    store.forget_subject("idp:u")

    assert store.get(source.id) is None
    assert store.get(derived.id) is None
    assert store.read(DOC, "summary") is None
    assert store.get(other.id) == other
    with pytest.raises(ForgottenError):
        store.write(DOC, "summary", "again", subjects=["idp:u"])


def test_a_session_does_not_taint_across_sessions(store: Store) -> None:
    a = store.write(U, "a", 1)
    with store.session(DOC) as s:
        s.read(U, "a")
    with store.session(DOC) as s2:
        rec = s2.write(DOC, "k", "clean")
    assert rec.derived_from == ()
    store.forget(U, "a")
    assert store.get(rec.id) == rec
    assert store.get(a.id) is None
