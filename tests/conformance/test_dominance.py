"""Tombstones dominate writes; reauthorization tokens; compare-and-set; subjects."""

from __future__ import annotations

import pytest
from tests.conformance._scopes import MODES, S1, S2, T, U, V
from tests.kit.clock import ManualClock
from tests.kit.stores import StoreFactory

from cenotaph import Store
from cenotaph.errors import ForgottenError, StaleWriteError


def _value(store: Store, scope: str, key: str) -> object:
    record = store.read(scope, key, fallthrough=False)
    assert record is not None, f"expected a record at {scope} / {key}"
    return record.value


@pytest.mark.parametrize("mode", MODES)
def test_a_forgotten_key_rejects_writes_with_the_forget_version(store: Store, mode: str) -> None:
    store.write(U, "k", "old")
    request = store.forget(U, "k", mode=mode)

    with pytest.raises(ForgottenError) as info:
        store.write(U, "k", "new")
    assert info.value.version == request.version
    assert str(info.value)
    with pytest.raises(ForgottenError) as info:
        store.write(S1, "k", "new")  # the key tombstone covers the subtree
    assert info.value.version == request.version
    store.write(U, "other", "fine")  # other keys are untouched
    store.write(V, "k", "fine")  # and so are siblings
    assert store.read(U, "k", fallthrough=False) is None


def test_a_forget_of_a_never_written_key_still_blocks(store: Store) -> None:
    request = store.forget(U, "never")
    with pytest.raises(ForgottenError) as info:
        store.write(U, "never", 1)
    assert info.value.version == request.version


def test_reauthorization_lets_one_write_in_then_no_token_until_the_next_forget(store: Store) -> None:
    store.write(U, "k", "v1")
    first = store.forget(U, "k")
    token = store.reauthorize(U, "k")
    assert isinstance(token, str) and token

    rec = store.write(U, "k", "v2", reauthorization=token)
    assert rec.version > first.version
    assert _value(store, U, "k") == "v2"
    store.write(U, "k", "v3")  # no token needed any more
    assert _value(store, U, "k") == "v3"

    second = store.forget(U, "k")
    with pytest.raises(ForgottenError) as info:
        store.write(U, "k", "v4")
    assert info.value.version == second.version
    with pytest.raises(ForgottenError):
        store.write(U, "k", "v4", reauthorization=token)  # single use: already consumed
    store.write(U, "k", "v4", reauthorization=store.reauthorize(U, "k"))
    assert _value(store, U, "k") == "v4"


def test_a_token_issued_before_a_forget_does_not_work_after_it(store: Store) -> None:
    store.write(U, "k", "v1")
    early = store.reauthorize(U, "k")
    request = store.forget(U, "k")
    with pytest.raises(ForgottenError) as info:
        store.write(U, "k", "v2", reauthorization=early)
    assert info.value.version == request.version
    assert store.read(U, "k") is None


def test_an_unknown_token_does_not_lift_anything(store: Store) -> None:
    store.forget(U, "k")
    with pytest.raises(ForgottenError):
        store.write(U, "k", 1, reauthorization="crt_" + "A" * 43)


def test_a_stale_base_version_is_rejected_even_with_a_token_and_keeps_the_token(store: Store) -> None:
    old = store.write(U, "k", "v1")
    request = store.forget(U, "k")
    token = store.reauthorize(U, "k")

    with pytest.raises(StaleWriteError) as info:
        store.write(U, "k", "v2", base_version=old.version, reauthorization=token)
    assert str(info.value)
    assert old.version < request.version
    assert store.read(U, "k") is None

    rec = store.write(U, "k", "v2", base_version=request.version, reauthorization=token)
    assert _value(store, U, "k") == "v2"
    assert rec.version > request.version


def test_a_write_rejected_by_compare_and_set_does_not_consume_the_token(store: Store) -> None:
    subject = "idp:cas"
    request = store.forget_subject(subject)
    current = store.write(U, "k", "current")  # carries no idp:cas, so it is not blocked
    token = store.reauthorize(U, subject=subject)

    # dominance passes (token valid, base_version >= v_f) but the slot moved on: StaleWriteError
    assert request.version <= current.version - 1
    with pytest.raises(StaleWriteError):
        store.write(U, "k", "x", subjects=[subject], base_version=current.version - 1, reauthorization=token)
    assert _value(store, U, "k") == "current"

    store.write(U, "k", "y", subjects=[subject], base_version=current.version, reauthorization=token)
    got = store.read(U, "k")
    assert got is not None and got.value == "y" and subject in got.subjects


def test_a_rejected_write_does_not_consume_the_token(store: Store) -> None:
    store.forget(U, "k")
    token = store.reauthorize(U, "k")
    store.forget(V, "k")
    with pytest.raises(ForgottenError):
        store.write(V, "k", "elsewhere", reauthorization=token)  # a token covers only its own target
    with pytest.raises(ForgottenError):
        store.write(S1, "k", "below", reauthorization=token)  # a key token is not a subtree token
    store.write(U, "k", "here", reauthorization=token)
    assert _value(store, U, "k") == "here"


def test_a_write_many_rejected_by_dominance_keeps_the_token(store: Store) -> None:
    store.forget(U, "k")
    store.forget(V, "k")
    token = store.reauthorize(U, "k")
    with pytest.raises(ForgottenError):
        store.write_many(
            [
                {"scope": U, "key": "k", "value": 1, "reauthorization": token},  # would be let in ...
                {"scope": V, "key": "k", "value": 2},  # ... but this one is forgotten: all roll back
            ]
        )
    assert store.read(U, "k") is None
    with pytest.raises(ForgottenError):
        store.write(U, "k", 3)  # no lift was recorded
    store.write(U, "k", 3, reauthorization=token)  # and the token was not consumed
    assert _value(store, U, "k") == 3


def test_compare_and_set_on_a_live_record(store: Store) -> None:
    first = store.write(U, "k", 1)
    second = store.write(U, "k", 2, base_version=first.version)
    with pytest.raises(StaleWriteError):
        store.write(U, "k", 3, base_version=first.version)
    assert _value(store, U, "k") == 2
    store.write(U, "k", 3, base_version=second.version)
    assert _value(store, U, "k") == 3
    store.write(U, "fresh", 1, base_version=0)  # nothing there yet: any base is current


def test_a_scope_token_covers_the_subtree(store: Store) -> None:
    store.write(S1, "k", 1)
    request = store.forget(U)
    for scope in (U, S1, S2, "tenant:t/user:u/session:new"):
        with pytest.raises(ForgottenError) as info:
            store.write(scope, "any", 1)
        assert info.value.version == request.version

    token = store.reauthorize(U)
    store.write(S2, "k", "via token", reauthorization=token)
    for scope in (U, S1, S2, "tenant:t/user:u/session:new"):  # the lift covers the whole subtree
        store.write(scope, "after", scope)
    assert _value(store, S1, "after") == S1
    assert store.read(S1, "k", fallthrough=False) is None  # nothing forgotten came back


def test_a_scope_token_for_a_child_does_not_cover_a_sibling(store: Store) -> None:
    store.forget(U)
    token = store.reauthorize(S1)
    store.write(S1, "k", 1, reauthorization=token)
    with pytest.raises(ForgottenError):
        store.write(S2, "k", 1)
    with pytest.raises(ForgottenError):
        store.write(U, "k", 1)


@pytest.mark.parametrize("later", ["scope", "key", "compliance key"])
def test_a_scope_token_never_lifts_a_forget_newer_than_the_token(store: Store, later: str) -> None:
    """Token for U issued after a forget of S1; then S2 is forgotten. Used in S1 (its own older
    tombstone), the token must not reopen S2, alone or in the same write_many, in either order."""
    store.write(S1, "k", "old")
    store.write(S2, "k", "secret")
    store.forget(S1)
    token = store.reauthorize(U)
    if later == "scope":
        newer = store.forget(S2)
    else:
        newer = store.forget(S2, "k", mode="compliance" if later == "compliance key" else "operational")
    with pytest.raises(ForgottenError) as info:
        store.write(S2, "k", "direct", reauthorization=token)
    assert info.value.version == newer.version
    with pytest.raises(ForgottenError):  # one batch: the token's item first, then the later target
        store.write_many(
            [
                {"scope": S1, "key": "k", "value": "new", "reauthorization": token},
                {"scope": S2, "key": "k", "value": "sneaked in"},
            ]
        )
    store.write(S1, "k", "new", reauthorization=token)
    with pytest.raises(ForgottenError) as info:
        store.write(S2, "k", "without a token")
    assert info.value.version == newer.version
    assert store.read(S2, "k", fallthrough=False) is None
    store.write(S1, "other", "the lift still covers what the token did cover")


def test_a_key_token_covers_only_its_own_scope(store: Store) -> None:
    store.forget(U, "k")
    token = store.reauthorize(U, "k")
    with pytest.raises(ForgottenError):
        store.write(S1, "k", 1, reauthorization=token)
    store.write(U, "k", 1, reauthorization=token)
    with pytest.raises(ForgottenError):
        store.write(S1, "k", 1)  # the child is still covered by the key-subtree tombstone


def test_a_subject_tombstone_blocks_that_subject_in_any_scope(store: Store) -> None:
    store.write("tenant:a/doc:1", "k", 1, subjects=["idp:42"])
    request = store.forget_subject("idp:42")
    for scope in ("tenant:a/doc:1", "tenant:b/doc:2", "org:x"):
        with pytest.raises(ForgottenError) as info:
            store.write(scope, "k", 1, subjects=["idp:42"])
        assert info.value.version == request.version
        with pytest.raises(ForgottenError):
            store.write(scope, "k", 1, subjects=["idp:7", "idp:42"])
    store.write("tenant:a/doc:1", "k", "no subject")  # the scope itself is not forgotten
    assert _value(store, "tenant:a/doc:1", "k") == "no subject"


def test_a_subject_tombstone_is_lifted_only_by_a_subject_token(store: Store) -> None:
    store.write(U, "k", 1)
    request = store.forget_subject(U)
    with pytest.raises(ForgottenError) as info:
        store.write(S1, "k", 2)  # S1's default subjects include U
    assert info.value.version == request.version

    for token in (store.reauthorize(U), store.reauthorize(U, "k"), store.reauthorize(T)):
        with pytest.raises(ForgottenError):
            store.write(U, "k", 2, reauthorization=token)
    with pytest.raises(ForgottenError):
        store.write(U, "k", 2, reauthorization=store.reauthorize(U, subject="idp:other"))

    store.write(U, "k", 2, reauthorization=store.reauthorize(U, subject=U))
    assert _value(store, U, "k") == 2
    store.write(S1, "k", 3)  # lifted until the next forget
    assert _value(store, S1, "k") == 3


@pytest.mark.parametrize("mode", MODES)
def test_one_token_reopens_a_target_forgotten_by_a_scope_forget_and_a_subject_erasure(
    store: Store, mode: str
) -> None:
    """A write into S1 carries subject U: after forget(S1) and forget_subject(U) both block it,
    and a token naming S1 and U lifts both (before, no single token could, so the write was
    impossible without first landing some other write with a subject token)."""
    store.write(S1, "k", 1)
    scope_forget = store.forget(S1, mode=mode)
    early = store.reauthorize(S1, subject=U)  # issued between the two forgets
    subject_forget = store.forget_subject(U)
    assert scope_forget.version < subject_forget.version

    for token in (store.reauthorize(S1), store.reauthorize(T, subject="idp:other")):
        with pytest.raises(ForgottenError) as info:
            store.write(S1, "k", 2, reauthorization=token)
        assert info.value.version == subject_forget.version
    with pytest.raises(ForgottenError) as info:  # a token older than the subject's erasure
        store.write(S1, "k", 2, reauthorization=early)
    assert info.value.version == subject_forget.version
    token = store.reauthorize(S1, subject=U)
    store.write(S1, "k", 2, reauthorization=token)
    assert _value(store, S1, "k") == 2

    # both lifts are recorded: S1 and U's other scopes take writes with no token again
    store.write(S1, "other", 3)
    store.write(S2, "k", 4)
    assert (_value(store, S1, "other"), _value(store, S2, "k")) == (3, 4)
    store.forget(S1, "k")
    with pytest.raises(ForgottenError, match="already used"):  # and the token is spent
        store.write(S1, "k", 5, reauthorization=token)


def test_a_subject_token_is_good_only_inside_the_scope_it_names(store: Store) -> None:
    request = store.forget_subject(U)
    token = store.reauthorize(S2, subject=U)
    with pytest.raises(ForgottenError) as info:
        store.write(S1, "k", 1, reauthorization=token)  # S1 is outside S2
    assert info.value.version == request.version
    with pytest.raises(ForgottenError):
        store.write(U, "k", 1, reauthorization=token)  # and so is S2's parent
    store.write(S2, "k", 1, reauthorization=token)  # not consumed by the refusals above
    store.write(S1, "k", 2)  # the subject's lift holds everywhere until its next erasure
    assert (_value(store, S2, "k"), _value(store, S1, "k")) == (1, 2)


def test_a_key_and_subject_token_covers_that_key_only(store: Store) -> None:
    store.forget(U, "k")
    store.forget_subject(U)
    token = store.reauthorize(U, "k", subject=U)
    with pytest.raises(ForgottenError):
        store.write(U, "other", 1, reauthorization=token)
    with pytest.raises(ForgottenError):
        store.write(S1, "k", 1, reauthorization=token)  # a key token is not a subtree token
    store.write(U, "k", 1, reauthorization=token)
    assert _value(store, U, "k") == 1
    with pytest.raises(ForgottenError):  # the key's lift covers (U, k) only
        store.write(S1, "k", 2)


def test_default_subjects_are_per_tenant(store: Store) -> None:
    a = store.write("tenant:a/user:alice/session:1", "k", "a")
    b = store.write("tenant:b/user:alice", "k", "b")
    doc = store.write("tenant:a/doc:1", "k", "doc")
    assert a.subjects == ("tenant:a/user:alice",)
    assert b.subjects == ("tenant:b/user:alice",)
    assert doc.subjects == ()
    nested = store.write("tenant:a/user:alice/team:x/user:bob", "k", "n")
    assert set(nested.subjects) == {"tenant:a/user:alice", "tenant:a/user:alice/team:x/user:bob"}

    store.forget_subject("tenant:a/user:alice")

    assert store.get(a.id) is None
    assert store.get(nested.id) is None
    assert store.get(b.id) == b
    assert store.get(doc.id) == doc
    store.write("tenant:b/user:alice", "k2", "still writable")
    with pytest.raises(ForgottenError):
        store.write("tenant:a/user:alice", "k2", "blocked")


def test_explicit_subjects_add_to_the_defaults(store: Store) -> None:
    rec = store.write(U, "k", 1, subjects=["idp:1", "idp:2"])
    assert set(rec.subjects) == {U, "idp:1", "idp:2"}
    store.forget_subject("idp:2")
    assert store.get(rec.id) is None
    assert store.read(U, "k") is None


def test_compare_and_set_ignores_an_expired_record(store_factory: StoreFactory, clock: ManualClock) -> None:
    store = store_factory(clock=clock)
    short = store.write(U, "k", "short-lived", ttl=60)
    with pytest.raises(StaleWriteError):
        store.write(U, "k", "too early", base_version=0)  # still current: the write is stale
    clock.advance_past(short)
    assert store.read(U, "k") is None
    store.write(U, "k", "fresh", base_version=0)
    assert _value(store, U, "k") == "fresh"


def test_write_many_across_many_scopes_overwrites_exactly_the_slots_it_names(store: Store) -> None:
    scopes = [f"{T}/user:w{i}" for i in range(12)]
    first = {(s, k): store.write(s, k, "old") for s in scopes for k in ("a", "b", "c")}
    batch = [{"scope": s, "key": "abc"[i % 3], "value": f"new{i}"} for i, s in enumerate(scopes)]
    batch += [{"scope": s, "key": "fresh", "value": "f"} for s in scopes]
    written = store.write_many(batch)
    assert [r.value for r in written[: len(scopes)]] == [f"new{i}" for i in range(len(scopes))]
    for i, s in enumerate(scopes):
        for k in ("a", "b", "c"):
            got = store.read(s, k, fallthrough=False)
            assert got is not None
            if k == "abc"[i % 3]:
                assert (got.value, got.id != first[(s, k)].id) == (f"new{i}", True)
            else:
                assert (got.value, got.id) == ("old", first[(s, k)].id)
        assert sorted(r.key for r in store.list(s)) == ["a", "b", "c", "fresh"]
    # compare-and-set sees each slot's own current version, whatever else the batch names
    stale = [{"scope": scopes[0], "key": "b", "value": 1, "base_version": first[(scopes[0], "b")].version}]
    stale.append(
        {"scope": scopes[1], "key": "b", "value": 2, "base_version": first[(scopes[1], "b")].version}
    )
    with pytest.raises(StaleWriteError):
        store.write_many(stale)  # scopes[1]/b was overwritten by the batch above
    assert _value(store, scopes[0], "b") == "old"
