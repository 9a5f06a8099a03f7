"""Scope closure -- a forget covers the subtree and fails closed on ancestor copies."""

from __future__ import annotations

import pytest
from tests.conformance._scopes import MODES, S1, S2, T, U, V
from tests.kit.clock import ManualClock
from tests.kit.stores import StoreFactory

from cenotaph import Store
from cenotaph.errors import ErasureNotProvableError, ForgottenError, ScopeClosureError
from cenotaph.ledger import journal as ledger
from cenotaph.ledger import plan as forget_module

ALL = (T, U, S1, S2, V)


def _snapshot(store: Store) -> list[tuple[str, str, object, int]]:
    return [(r.scope, r.key, r.value, r.version) for r in store.list(T, include_descendants=True)]


def _reads(store: Store, key: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for scope in ALL:
        rec = store.read(scope, key)
        out[scope] = None if rec is None else (rec.scope, rec.value)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_key_forget_covers_every_descendant(store: Store, mode: str) -> None:
    store.write(U, "k", "u")
    store.write(S1, "k", "s1")
    store.write("tenant:t/user:u/session:s1/turn:9", "k", "deep")
    store.write(S2, "other", "kept")
    store.write(V, "k", "v")

    store.forget(U, "k", mode=mode)

    for scope in (U, S1, S2, "tenant:t/user:u/session:s1/turn:9", "tenant:t/user:u/session:unseen"):
        assert store.read(scope, "k") is None
        with pytest.raises(ForgottenError):
            store.write(scope, "k", "again")
    assert store.read(S2, "other") is not None
    v = store.read(V, "k")
    assert v is not None and v.value == "v"


@pytest.mark.parametrize("mode", MODES)
def test_an_ancestor_copy_fails_closed_and_changes_nothing(store_factory: StoreFactory, mode: str) -> None:
    store = store_factory()
    store.write(T, "k", "tenant copy")
    store.write(U, "k", "user copy")
    store.write(S1, "k", "session copy")
    before = _snapshot(store)
    reads_before = _reads(store, "k")

    with pytest.raises(ScopeClosureError) as info:
        store.forget(S1, "k", mode=mode)
    assert set(info.value.ancestors) == {T, U}
    assert T in str(info.value) and U in str(info.value)
    assert "include_ancestors" in str(info.value)

    assert _snapshot(store) == before
    assert _reads(store, "k") == reads_before
    store.write(S1, "k", "still writable without a token")
    store.write(U, "k", "user copy 2")

    with store_factory.raw(store) as db:
        assert db.execute("SELECT count(*) FROM tombstones").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM erasures").fetchone()[0] == 0


def test_an_expired_or_forgotten_ancestor_copy_does_not_block(
    store_factory: StoreFactory, clock: ManualClock
) -> None:
    store = store_factory(clock=clock)
    expiring = store.write(T, "k", "expires", ttl=60)
    store.write(U, "k", "user")
    clock.advance_past(expiring)
    store.forget(U, "k")  # the expired ancestor copy is not readable: nothing to close
    assert store.read(S1, "k") is None

    store.write(T, "j", "tenant")
    store.write(U, "j", "user")
    store.forget(T, "j")  # covers U too
    store.write(U, "j", "user again", reauthorization=store.reauthorize(U, "j"))
    store.forget(U, "j")  # T's copy is forgotten: nothing to close
    assert store.read(S1, "j") is None


@pytest.mark.parametrize("mode", MODES)
def test_include_ancestors_forgets_exact_ancestor_copies_only(store: Store, mode: str) -> None:
    store.write(T, "k", "tenant copy")
    store.write(T, "other", "tenant other")
    store.write(U, "k", "user copy")
    store.write(V, "k", "sibling copy")
    store.write(V, "other", "sibling other")

    store.forget(U, "k", mode=mode, include_ancestors=True)

    for scope in (T, U, S1):
        assert store.read(scope, "k") is None
    sibling = store.read(V, "k")
    assert sibling is not None and sibling.value == "sibling copy"  # not the ancestor's subtree
    assert store.read(U, "other") is not None
    assert store.read(V, "other") is not None
    # the ancestor tombstone covers the ancestor's own key ...
    with pytest.raises(ForgottenError):
        store.write(T, "k", "again")
    with pytest.raises(ForgottenError):
        store.write(S1, "k", "again")
    # ... not its subtree: a sibling scope, or a new one under the ancestor, may write the key
    store.write(V, "k", "sibling rewrite")
    store.write("tenant:t/user:w", "k", "new sibling")
    assert store.read("tenant:t/user:w", "k") is not None
    store.write(T, "other", "tenant other 2")


@pytest.mark.parametrize("mode", MODES)
def test_a_scope_forget_cascades_to_every_child_and_blocks_the_subtree(store: Store, mode: str) -> None:
    store.write(T, "k", "tenant")
    store.write(U, "a", 1)
    store.write(S1, "b", 2)
    store.write("tenant:t/user:u/session:s1/turn:1", "c", 3)
    store.write(V, "d", 4)

    request = store.forget(U, mode=mode)

    assert store.list(U, include_descendants=True) == []
    for scope, key in ((U, "a"), (S1, "b"), ("tenant:t/user:u/session:s1/turn:1", "c")):
        assert store.read(scope, key) is None
    for scope in (U, S1, S2, "tenant:t/user:u/session:s1/turn:1", "tenant:t/user:u/new:x/deeper:y"):
        with pytest.raises(ForgottenError) as info:
            store.write(scope, "z", 0)
        assert info.value.version == request.version
    store.write(V, "e", 5)
    store.write(T, "f", 6)
    assert [(r.scope, r.key) for r in store.list(T, include_descendants=True)] == [
        (T, "f"),
        (T, "k"),
        (V, "d"),
        (V, "e"),
    ]


def test_forgetting_a_parent_scope_covers_children_written_later_elsewhere_in_the_tree(store: Store) -> None:
    store.forget(T)
    for scope in (T, U, S1, V, "tenant:t/doc:1"):
        with pytest.raises(ForgottenError):
            store.write(scope, "k", 1)
    store.write("tenant:t2", "k", 1)  # a prefix string match is not a scope prefix
    store.write("tenant:tt/user:u", "k", 1)
    assert store.read("tenant:tt/user:u", "k") is not None


FORGETS = [
    ("key", "compliance"),
    ("key", "operational"),
    ("scope", "compliance"),
    ("scope", "operational"),
    ("subject", "compliance"),
]


@pytest.mark.parametrize(("kind", "mode"), FORGETS, ids=lambda v: str(v))
def test_a_forget_that_would_leave_a_record_readable_fails_closed_and_changes_nothing(
    store: Store, kind: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The W2/W3 postcondition is checked inside the forget's transaction: if applying the plan
    left any covered record readable (here a fault makes it skip one), the forget raises
    ErasureNotProvableError, and nothing of it -- tombstone, hidden rows, destroyed keys, request,
    ledger entry -- remains. Run again without the fault, it succeeds."""
    for scope in (U, S1, S2):
        store.write(scope, "k", f"value in {scope}")
    store.write(S1, "other", "beside it")
    before = _snapshot(store)

    def leaky(txn, plan):  # type: ignore[no-untyped-def]
        skipped = plan.hide[0]
        hide, destroy = plan.hide, plan.destroy_records
        plan.hide = [i for i in hide if i != skipped]
        plan.destroy_records = [i for i in destroy if i != skipped]
        try:
            real_apply(txn, plan)
        finally:
            plan.hide, plan.destroy_records = hide, destroy

    real_apply = forget_module.apply_plan  # what ledger.apply_plan is
    monkeypatch.setattr(ledger, "apply_plan", leaky)

    def forget() -> object:
        if kind == "key":
            return store.forget(U, "k", mode=mode)
        if kind == "scope":
            return store.forget(U, mode=mode)
        return store.forget_subject(U)

    with pytest.raises(ErasureNotProvableError) as info:
        forget()
    assert list(info.value.gaps) == ["postcondition"]
    assert _snapshot(store) == before
    assert store.erasures() == []
    assert store.write(S2, "k", "still writable: no tombstone landed").value.startswith("still")

    monkeypatch.setattr(ledger, "apply_plan", real_apply)
    request = forget()
    assert [r.id for r in store.erasures()] == [request.id]  # type: ignore[attr-defined]
    assert store.read(S1, "k", fallthrough=False) is None
    assert store.read(S2, "k", fallthrough=False) is None
