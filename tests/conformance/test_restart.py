"""W1/W2 across restarts: tombstones, lifts (dominance) and reauthorization tokens are durable."""

from __future__ import annotations

import pytest
from tests.conformance._scopes import S1, U, V
from tests.kit.stores import StoreFactory

from cenotaph.errors import ForgottenError, StaleWriteError


@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_tombstones_survive_a_restart(store_factory: StoreFactory, mode: str) -> None:
    store = store_factory()
    store.write(U, "k", 1)
    store.write(V, "x", 2)
    key_forget = store.forget(U, "k", mode=mode)
    scope_forget = store.forget(V, mode=mode)
    store.write("tenant:t/doc:1", "d", 3, subjects=["idp:1"])
    subject_forget = store.forget_subject("idp:1")

    store = store_factory.reopen(store)

    for scope, key, subjects, request in (
        (S1, "k", None, key_forget),
        (V, "x", None, scope_forget),
        ("tenant:t/user:v/session:new", "y", None, scope_forget),
        ("tenant:other", "z", ["idp:1"], subject_forget),
    ):
        with pytest.raises(ForgottenError) as info:
            store.write(scope, key, "again", subjects=subjects)
        assert info.value.version == request.version
    assert store.read(U, "k") is None
    assert store.list(V, include_descendants=True) == []
    expected = {"tombstoned"} if mode == "operational" else {"shredded", "purged", "verified"}
    for request in (key_forget, scope_forget):
        assert store.erasure(request.id).status().state in expected


def test_tokens_and_lifts_survive_restarts(store_factory: StoreFactory) -> None:
    store = store_factory()
    old = store.write(U, "k", 1)
    request = store.forget(U, "k")
    token = store.reauthorize(U, "k")

    store = store_factory.reopen(store)
    with pytest.raises(StaleWriteError):
        store.write(U, "k", 2, base_version=old.version, reauthorization=token)
    store = store_factory.reopen(store)
    store.write(U, "k", 2, reauthorization=token)  # the issued (and unconsumed) token survived

    store = store_factory.reopen(store)
    store.write(U, "k", 3)  # the lift survived: no token needed
    got = store.read(U, "k")
    assert got is not None and got.value == 3 and got.version > request.version

    store.forget(U, "k")
    store = store_factory.reopen(store)
    with pytest.raises(ForgottenError):
        store.write(U, "k", 4, reauthorization=token)  # consumed, and predates the new forget


def test_a_token_issued_before_a_restart_and_a_forget_stays_invalid(store_factory: StoreFactory) -> None:
    store = store_factory()
    early = store.reauthorize(U)
    store = store_factory.reopen(store)
    store.forget(U)
    store = store_factory.reopen(store)
    with pytest.raises(ForgottenError):
        store.write(S1, "k", 1, reauthorization=early)
    store.write(S1, "k", 1, reauthorization=store.reauthorize(U))
    store = store_factory.reopen(store)
    assert store.read(S1, "k") is not None


def test_versions_keep_increasing_across_restarts(store_factory: StoreFactory) -> None:
    store = store_factory()
    first = store.write(U, "k", 1)
    request = store.forget(V)
    store = store_factory.reopen(store)
    second = store.write(U, "k", 2, base_version=first.version)
    assert second.version > request.version > first.version


@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_a_second_open_store_sees_forgets_at_once(store_factory: StoreFactory, mode: str) -> None:
    """Two stores on one location (as two processes would be): caches never outlive a forget."""
    a = store_factory()
    b = store_factory.twin(a)
    rec = a.write(U, "k", "v")
    other = a.write(V, "j", "w")
    assert b.read(S1, "k") == rec and b.get(rec.id) == rec  # b has it cached now
    request = a.forget(U, "k", mode=mode)
    assert b.read(S1, "k") is None
    assert b.get(rec.id) is None
    with pytest.raises(ForgottenError) as info:
        b.write(U, "k", "again")
    assert info.value.version == request.version

    assert b.list(V) == [other]
    a.forget_subject(V)
    assert b.list(V) == [] and b.get(other.id) is None

    token = b.reauthorize(U, "k")  # a token issued through one store works through the other
    a.write(U, "k", "back", reauthorization=token)
    got = b.read(U, "k")
    assert got is not None and got.value == "back"
