"""Sessions with an owner: their forgets are that owner's, their writes reopen only those.

The one session rule every surface uses (an MCP connection, the LangGraph store, the memory
tool): a write issued after the owner's own forget returned re-creates what it forgot; anyone
else's forget, a subject erasure and a write issued before the forget returned are refused; a
rewrite of a slot the session itself forgot replaces what it read there; an operational forget
of its own blocks no later write; listings taint.
"""

from __future__ import annotations

import threading

import pytest
from tests.conformance._scopes import S1, U, V

from cenotaph import Store
from cenotaph.errors import DerivedFromForgottenError, ForgottenError, InvalidValueError, StaleWriteError

OWNER = "adapter:test"


def test_a_session_reopens_what_its_owner_forgot(store: Store) -> None:
    with store.session(S1, owner=OWNER) as s:
        s.write(S1, "k", 1)
        s.forget(S1, "k", mode="operational")
        record, reopened = s.reopening_write(S1, "k", 2)
        assert reopened and record.value == 2
        again, reopened = s.reopening_write(S1, "k", 3)  # the lift holds until the next forget
        assert not reopened and again.value == 3


def test_a_session_without_owner_reopens_nothing(store: Store) -> None:
    with store.session(S1) as s:
        s.write(S1, "k", 1)
        s.forget(S1, "k", mode="operational")
        with pytest.raises(ForgottenError):
            s.write(S1, "k", 2)


def test_another_writers_forget_is_not_reopened_even_after_forgetting_it_again(store: Store) -> None:
    store.write(S1, "k", 1)
    store.forget(S1, "k", mode="operational")  # another writer (the library, no owner)
    with store.session(S1, owner=OWNER) as s:
        s.forget(S1, "k", mode="operational")  # the session's own no-op delete of it
        with pytest.raises(ForgottenError, match="someone else"):
            s.write(S1, "k", 2)
    assert store.read(S1, "k") is None


def test_the_same_owner_in_another_session_reopens_too(store: Store) -> None:
    """Ownership is the store's (the ledger's), not the session object's: a framework's store
    opened again (a restart) still re-creates what it deleted before."""
    with store.session(S1, owner=OWNER) as first:
        first.write(S1, "k", 1)
        first.forget(S1, "k", mode="operational")
    with store.session(S1, owner=OWNER) as second:
        assert second.write(S1, "k", 2).value == 2


def test_a_subject_erasure_is_never_reopened(store: Store) -> None:
    with store.session(S1, owner=OWNER) as s:
        s.write(S1, "k", 1)
        store.forget_subject(U, owner=OWNER)  # even one made under the same owner
        with pytest.raises(ForgottenError):
            s.write(S1, "k", 2)


def test_a_write_issued_before_the_forget_returned_is_refused(store: Store) -> None:
    """A stale write: issued, then the owner's forget of its target commits and returns, then the
    write reaches the store. It is refused, never reopened."""
    store.write(S1, "k", 1)
    session = store.session(S1, owner=OWNER)
    issued, forgotten = threading.Event(), threading.Event()
    real = store.known_version

    def known_version() -> int:  # the write's issue, held until the forget has returned
        version = real()
        issued.set()
        assert forgotten.wait(30)
        return version

    def delete() -> None:
        assert issued.wait(30)
        session.forget(S1, "k", mode="operational")
        forgotten.set()

    deleter = threading.Thread(target=delete)
    deleter.start()
    store.known_version = known_version  # type: ignore[method-assign]
    try:
        with pytest.raises(StaleWriteError, match="after this write was issued"):
            session.write(S1, "k", 2)
    finally:
        del store.known_version
        deleter.join(30)
    assert session.write(S1, "k", 3).value == 3  # issued after: reopened
    session.close()


def test_a_rewrite_of_its_own_forgotten_slot_does_not_derive_from_the_old_copy(store: Store) -> None:
    old = store.write(S1, "note", "old")
    other = store.write(V, "fact", "kept")
    with store.session(S1, owner=OWNER) as s:
        s.read(S1, "note")
        s.read(V, "fact")
        s.forget(S1, "note")  # compliance: the copy it read is erased
        new = s.write(S1, "note", "new")
        assert old.id not in new.derived_from and other.id in new.derived_from
        with pytest.raises(DerivedFromForgottenError):  # anything else it writes derives from it
            s.write(S1, "summary", "from the old note")


def test_an_operational_forget_of_its_own_blocks_no_later_write(store: Store) -> None:
    store.write(S1, "a", 1)
    store.write(S1, "b", 2)
    with store.session(S1, owner=OWNER) as s:
        listed = s.list(S1)  # a listing taints
        assert {r.id for r in listed} == set(s.read_set)
        s.forget(S1, "a", mode="operational")
        written = s.write(S1, "c", 3)
        kept = next(r for r in listed if r.key == "b")
        assert written.derived_from == (kept.id,)


def test_a_forget_by_someone_else_of_what_the_session_read_still_blocks(store: Store) -> None:
    store.write(S1, "a", 1)
    with store.session(S1, owner=OWNER) as s:
        s.read(S1, "a")
        store.forget(S1, "a", mode="operational")  # not the session's
        with pytest.raises(DerivedFromForgottenError):
            s.write(S1, "c", 3)


def test_write_many_reopens_each_item_once(store: Store) -> None:
    with store.session(S1, owner=OWNER) as s:
        s.write_many([{"scope": S1, "key": k, "value": 0} for k in ("a", "b")])
        s.forget(S1, "a", mode="operational")
        s.forget(S1, "b", mode="operational")
        records = s.write_many([{"scope": S1, "key": k, "value": 1} for k in ("a", "b", "c")])
        assert [r.value for r in records] == [1, 1, 1]
        with pytest.raises(InvalidValueError):
            s.write_many(["not a dict"])  # type: ignore[list-item]


def test_a_closed_session_refuses(store: Store) -> None:
    session = store.session(S1, owner=OWNER)
    session.close()
    with pytest.raises(InvalidValueError, match="ended"):
        session.forget(S1, "k")
    assert store.erasures() == []
