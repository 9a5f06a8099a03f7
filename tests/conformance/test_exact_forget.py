"""``forget(scope, key, exact=True)``: one slot, in both modes.

What an adapter's leaf scope needs: its delete of a key must not fail because an ancestor holds
the same key (no fall-through read is made there), and must not reach a descendant's copy.
"""

from __future__ import annotations

import time

import pytest
from tests.conformance._scopes import MODES, S1, U
from tests.kit.stores import StoreFactory

from cenotaph import Store
from cenotaph.errors import ForgottenError, InvalidValueError, ScopeClosureError


@pytest.mark.parametrize("mode", MODES)
def test_an_exact_forget_takes_the_slot_only(store: Store, mode: str) -> None:
    above = store.write(U, "k", "ancestor's")
    store.write(S1, "k", "mine")
    below = store.write(f"{S1}/doc:d", "k", "descendant's")
    with pytest.raises(ScopeClosureError):
        store.forget(S1, "k", mode=mode)  # the subtree form fails closed: the ancestor holds it
    request = store.forget(S1, "k", mode=mode, exact=True)
    assert request.target_kind == "key"
    assert store.read(S1, "k", fallthrough=False) is None
    assert store.read(S1, "k") == above  # a fall-through read finds the ancestor, as it should
    assert store.read(f"{S1}/doc:d", "k", fallthrough=False) == below
    with pytest.raises(ForgottenError):
        store.write(S1, "k", "again")
    store.write(f"{S1}/doc:d", "k", "still writable")
    store.write(U, "k", "still writable")


def test_an_exact_compliance_forget_verifies(store: Store) -> None:
    store.write(U, "k", "ancestor's")
    gone = store.write(S1, "k", "mine")
    request = store.forget(S1, "k", exact=True)
    assert request.wait(60).state == "verified"
    assert store.get(gone.id) is None
    certificate = store.attest(request.id)
    assert certificate.to_dict()["target_kind"] == "key"


def test_an_exact_forget_covers_what_was_written_before_it_only(store: Store) -> None:
    store.write(S1, "k", "first")
    store.forget(S1, "k", mode="operational", exact=True)
    token = store.reauthorize(S1, "k")
    store.write(S1, "k", "second", reauthorization=token)
    record = store.read(S1, "k", fallthrough=False)
    assert record is not None and record.value == "second"


def test_exact_needs_a_key_and_no_ancestors(store: Store) -> None:
    with pytest.raises(InvalidValueError, match="exact forget"):
        store.forget(S1, exact=True)
    with pytest.raises(InvalidValueError, match="exact forget"):
        store.forget(S1, "k", exact=True, include_ancestors=True)
    with pytest.raises(InvalidValueError, match="exact"):
        store.forget(S1, "k", exact="yes")  # type: ignore[arg-type]
    assert store.erasures() == []


def test_an_operational_forget_is_reclaimed_by_the_worker(store_factory: StoreFactory) -> None:
    """Nobody calls purge: the store's background worker reclaims an operational forget's rows
    too (its request stays ``tombstoned``: an operational forget never reports erasure)."""
    store = store_factory(purge="background")
    store.write(S1, "k", "x")
    request = store.forget(S1, "k", mode="operational", exact=True)
    deadline = time.monotonic() + 60
    while request.status().layers["reclaim"].state != "done":
        assert time.monotonic() < deadline, request.status()
        time.sleep(0.01)  # polling a condition, with a deadline
    assert request.status().state == "tombstoned"
