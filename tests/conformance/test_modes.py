"""Modes: operational forgets never report erasure; compliance forgets return shredded or later."""

from __future__ import annotations

import pytest
from tests.conformance._scopes import U
from tests.kit.stores import StoreFactory

from cenotaph import ErasureRequest, Store
from cenotaph.errors import ErasureNotProvableError, InvalidValueError

STATES = ("tombstoned", "shredded", "purged", "verified")
AT_LEAST_SHREDDED = STATES[1:]


def _forgets(store: Store, mode: str) -> list[ErasureRequest]:
    store.write(U, "k", 1)
    store.write("tenant:t/user:w/session:1", "x", 2)
    return [store.forget(U, "k", mode=mode), store.forget("tenant:t/user:w", mode=mode)]


def test_an_operational_forget_stays_tombstoned_and_never_reports_erasure(
    store_factory: StoreFactory,
) -> None:
    store = store_factory()
    requests = _forgets(store, "operational")
    for request in requests:
        assert request.mode == "operational"
        status = request.status()
        assert status.state == "tombstoned"
        assert status.horizon is None
        assert any("operational" in gap for gap in status.gaps), status.gaps
        assert status.layers["tombstone"].state == "done"
        assert "keys" not in status.layers or status.layers["keys"].state != "done"

    store = store_factory.reopen(store)
    for request in requests:
        status = store.erasure(request.id).status()
        assert status.state == "tombstoned"
        assert any("operational" in gap for gap in status.gaps)


def test_an_operational_forget_never_reports_erasure_even_after_purge(store: Store) -> None:
    store.write(U, "k", 1)
    request = store.forget(U, "k", mode="operational")
    for call in (store.confirm_erasure, store.attest):
        with pytest.raises(ErasureNotProvableError) as info:
            call(request.id)
        assert any("operational" in gap for gap in info.value.gaps)
    report = store.purge()
    assert report.requests[request.id] == "tombstoned"
    status = request.status()
    assert status.state == "tombstoned"
    assert status.layers["reclaim"].state == "done"  # purge reclaims space ...
    for call in (store.confirm_erasure, store.attest):  # ... and still never calls it erasure
        with pytest.raises(ErasureNotProvableError) as info:
            call(request.id)
        assert any("operational" in gap for gap in info.value.gaps)


def test_a_compliance_forget_is_not_reported_erased_before_evidence(store: Store) -> None:
    store.write(U, "k", 1)
    request = store.forget(U, "k")
    assert request.status().state == "shredded"  # no purge ran: nothing is proved yet
    for call in (store.confirm_erasure, store.attest):
        with pytest.raises(ErasureNotProvableError) as info:
            call(request.id)
        assert info.value.gaps
        assert str(info.value)
    store.purge()  # evidence: rows removed, WAL truncated, files scanned
    assert request.status().state == "verified"
    assert store.confirm_erasure(request.id).state == "verified"
    assert store.attest(request.id)["request_id"] == request.id


def test_a_compliance_forget_returns_at_shredded_or_later(store: Store) -> None:
    requests = [*_forgets(store, "compliance")]
    store.write("tenant:t/user:z", "k", 1, subjects=["idp:z"])
    requests.append(store.forget_subject("idp:z"))
    for request in requests:
        assert request.mode == "compliance"
        status = request.status()
        assert status.state in AT_LEAST_SHREDDED
        assert status.layers["tombstone"].state == "done"
        assert status.layers["keys"].state == "done"
        if status.state != "verified":
            assert status.gaps  # not verified: it says why
    assert [r.target_kind for r in requests] == ["key", "scope", "subject"]
    assert len({r.id for r in requests}) == 3
    assert requests[0].version < requests[1].version < requests[2].version


def test_the_default_mode_is_compliance(store: Store) -> None:
    store.write(U, "k", 1)
    request = store.forget(U, "k")
    assert request.mode == "compliance"
    assert request.status().state in AT_LEAST_SHREDDED
    again = store.erasure(request.id)
    assert (again.id, again.version, again.mode) == (request.id, request.version, "compliance")


@pytest.mark.parametrize("mode", ["", "Compliance", "delete", "hard", None, 1])
def test_an_invalid_mode_is_rejected_and_changes_nothing(store: Store, mode: object) -> None:
    rec = store.write(U, "k", 1)
    with pytest.raises(InvalidValueError) as info:
        store.forget(U, "k", mode=mode)  # type: ignore[arg-type]
    assert "compliance" in str(info.value) and "operational" in str(info.value)
    assert store.read(U, "k") == rec
    store.write(U, "k", 2)  # no tombstone was written


def test_an_unknown_request_id_is_an_invalid_value(store: Store) -> None:
    with pytest.raises(InvalidValueError):
        store.erasure("er_" + "0" * 24)
