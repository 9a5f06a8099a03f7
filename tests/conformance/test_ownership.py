"""Forgets carry an owner; ``reauthorize(..., owner=...)`` reopens only that owner's forgets.

The rule every surface uses (an HTTP agent key, an MCP connection, the LangGraph store, the
memory tool): a token for an owner is issued only if every forget it could lift -- every version
of every target it covers, and for a scope token every forget in or above its subtree -- is that
owner's, and (``through``) none came after the caller's write was issued.
"""

from __future__ import annotations

import pytest
from tests.conformance._scopes import S1, S2, U, V
from tests.kit.stores import StoreFactory

from cenotaph import Store
from cenotaph.errors import ForgottenError, InvalidValueError, StaleWriteError

ME, OTHER = "agent:me", "agent:other"


def _reopened(store: Store, scope: str, key: str, owner: str = ME) -> bool:
    try:
        token = store.reauthorize(scope, key, owner=owner)
    except ForgottenError:
        return False
    store.write(scope, key, "again", reauthorization=token)
    return True


def test_an_owner_reopens_its_own_forget(store: Store) -> None:
    store.write(U, "diet", "tea")
    store.forget(U, "diet", mode="operational", owner=ME)
    with pytest.raises(ForgottenError):
        store.write(U, "diet", "coffee")
    assert _reopened(store, U, "diet")
    read = store.read(U, "diet")
    assert read is not None and read.value == "again"


def test_someone_elses_forget_is_not_reopened(store: Store) -> None:
    store.write(U, "diet", "tea")
    store.forget(U, "diet", mode="operational", owner=OTHER)
    assert not _reopened(store, U, "diet")
    store.forget(U, "other", mode="operational")  # no owner: nobody's to reopen
    assert not _reopened(store, U, "other")


def test_forgetting_again_does_not_make_an_older_forget_mine(store: Store) -> None:
    """Every forget of a target is kept, not only the newest: re-forgetting what someone else
    forgot, then asking for a token, is refused (the regression the rule exists for)."""
    store.write(U, "diet", "tea")
    store.forget(U, "diet", mode="operational", owner=OTHER)
    store.forget(U, "diet", mode="operational", owner=ME)
    assert not _reopened(store, U, "diet")
    assert store.forgets_blocking(U, "diet") == sorted(
        r.version for r in store.erasures() if r.target_kind == "key"
    )
    # an unowned token (whoever may lift anyone's) reopens it; afterwards my new forget is mine alone
    store.write(U, "diet", "v", reauthorization=store.reauthorize(U, "diet"))
    store.forget(U, "diet", mode="operational", owner=ME)
    assert _reopened(store, U, "diet")


def test_a_scope_token_needs_every_forget_in_and_above_the_subtree_to_be_mine(store: Store) -> None:
    store.write(S1, "a", 1)
    store.forget(S1, mode="operational", owner=ME)
    store.forget(f"{S1}/doc:d", "deep", mode="operational", owner=OTHER)  # inside the subtree
    with pytest.raises(ForgottenError, match="someone else"):
        store.reauthorize(S1, owner=ME)
    assert _reopened(store, S1, "a")  # a key token of a key the other forget does not cover
    store.forget(S2, mode="operational", owner=ME)
    store.reauthorize(S2, owner=ME)  # beside the other's forget: mine alone
    store.forget(U, "b", mode="operational", owner=OTHER)  # a key forget above: covers S2's "b"
    with pytest.raises(ForgottenError):
        store.reauthorize(S2, owner=ME)
    store.forget(f"{V}/session:y", "x", mode="operational", owner=OTHER)  # a sibling's: no matter
    store.forget(V, "x", mode="operational", owner=OTHER, exact=True)  # one slot above: no matter
    store.forget(f"{V}/session:z", mode="operational", owner=ME)
    store.reauthorize(f"{V}/session:z", owner=ME)
    store.forget(V, "x", mode="operational", owner=OTHER)  # the key in V's whole subtree: it matters
    with pytest.raises(ForgottenError):
        store.reauthorize(f"{V}/session:z", owner=ME)


def test_an_ancestor_scope_forget_by_someone_else_blocks_a_key_token(store: Store) -> None:
    store.write(S1, "a", 1)
    store.forget(S1, "a", mode="operational", owner=ME)
    store.forget(U, mode="operational", owner=OTHER)
    assert not _reopened(store, S1, "a")


def test_a_lifted_forget_no_longer_counts(store: Store) -> None:
    store.write(U, "k", 1)
    store.forget(U, "k", mode="operational", owner=OTHER)
    store.write(U, "k", 2, reauthorization=store.reauthorize(U, "k"))  # the other's forget is lifted
    store.forget(U, "k", mode="operational", owner=ME)
    assert _reopened(store, U, "k")


def test_a_subject_erasure_is_reopened_only_with_subject_and_owner(store: Store) -> None:
    store.write(U, "k", 1)
    store.forget_subject(U, owner=OTHER)
    with pytest.raises(ForgottenError):
        store.write(U, "k", 2, reauthorization=store.reauthorize(U, "k", owner=ME))  # subject not lifted
    with pytest.raises(ForgottenError):
        store.reauthorize(U, "k", subject=U, owner=ME)
    store.forget_subject(V, owner=ME)
    store.write(V, "k", 2, reauthorization=store.reauthorize(V, "k", subject=V, owner=ME))


def test_through_refuses_a_forget_newer_than_the_write(store: Store) -> None:
    store.write(U, "k", 1)
    issued = store.known_version()  # a write is issued here ...
    store.forget(U, "k", mode="operational", owner=ME)  # ... and my forget returns after it
    with pytest.raises(StaleWriteError, match="after this write was issued"):
        store.reauthorize(U, "k", owner=ME, through=issued)
    store.reauthorize(U, "k", owner=ME, through=store.known_version())


def test_ownership_is_the_ledgers_across_restarts_and_processes(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.write(U, "mine", 1)
    store.write(U, "theirs", 1)
    store.forget(U, "mine", mode="operational", owner=ME)
    twin = store_factory.twin(store)  # another process's view, through the ledger
    twin.forget(U, "theirs", mode="operational", owner=OTHER)
    reopened = store_factory.reopen(store)
    assert _reopened(reopened, U, "mine")
    assert not _reopened(reopened, U, "theirs")


def test_bad_owners_are_refused(store: Store) -> None:
    for owner in ("", "x" * 201, "tab\there", 7):
        with pytest.raises(InvalidValueError, match="owner"):
            store.forget(U, "k", owner=owner)  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError, match="owner"):
            store.reauthorize(U, "k", owner=owner)  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match="through"):
        store.reauthorize(U, "k", owner=ME, through=-1)
    assert store.erasures() == []


@pytest.mark.sqlite_only
def test_the_owner_is_kept_as_a_token_only(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.write(U, "k", 1)
    owner = "owner-canary-8c1f"
    store.forget(U, "k", owner=owner).wait(30)
    store.close()
    files = store_factory.files(store)
    assert any(p.name == "cenotaph.db" for p in files)
    for path in files:
        data = path.read_bytes()
        for form in (owner.encode(), owner.encode().hex().encode(), owner.encode("utf-16-le")):
            assert form not in data, path.name


def test_blocking_erasures_say_what_refuses_a_write(store: Store) -> None:
    store.write(U, "k", 1, subjects=["idp:42"])
    key = store.forget(U, "k", mode="operational", owner=ME)
    assert [r.id for r in store.blocking_erasures(U, "k")] == [key.id]
    subject = store.forget_subject("idp:42")
    assert store.blocking_erasures(U, "k") == [store.erasure(key.id)]  # not the write's subject
    found = store.blocking_erasures(U, "k", subjects=["idp:42"])
    assert [(r.id, r.target_kind) for r in found] == [(key.id, "key"), (subject.id, "subject")]
    assert store.forgets_blocking(U, "k", subjects=["idp:42"]) == [key.version, subject.version]
    assert store.blocking_erasures(U, "free") == []
