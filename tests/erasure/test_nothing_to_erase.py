"""An erasure that finds nothing left to erase verifies at once, with evidence that says so.

A repeated access request is normal: forgetting a subject that was already erased, or that the
store never held, or a key or scope likewise, must not leave a request pending for ever (it would
hold its KEK epoch back from rotation, and with it the horizon of every other erasure). Each way
of reaching "nothing to erase" is tried for every target kind, on real SQLite files with the
keyring outside the data directory:

- a repeated forget, and a forget of a target the store never held;
- a forget whose records all expired (swept) or were reclaimed by an operational forget: their
  lineage keys still exist, so that one has something to erase, and verifies with probes;
- a forget replayed on a restored copy that never held the target.

The evidence of a request that found nothing: ``found`` 0 records / 0 keys (sealed with the
probes, so the database cannot forge it), ``remaining`` 0 / 0 (nothing of the target from before
the forget is in the database after the purge), and a scan of every file with a passing positive
control. Such a request also waits for an earlier, unverified erasure of the same target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.kit.clock import ManualClock
from tests.kit.stores import StoreFactory

import cenotaph

SUBJECT = "tenant:acme/user:alice"
SESSION = f"{SUBJECT}/session:s1"
OTHER = "tenant:acme/user:bob/session:b1"

Forget = Callable[[cenotaph.Store], cenotaph.ErasureRequest]
FORGETS: dict[str, Forget] = {
    "subject": lambda store: store.forget_subject(SUBJECT),
    "scope": lambda store: store.forget(SESSION),
    "key": lambda store: store.forget(SESSION, "note"),
}


def _open(store_factory: StoreFactory, purge: bool | str = "sync", **options: Any) -> cenotaph.Store:
    """A store whose keyring lives outside its data directory (then the scan covers both).
    Forgets purge before they return unless a test says otherwise (these tests are about what a
    purge concludes, not about when it runs)."""
    keyring = cenotaph.LocalKeyring(store_factory.base / "keyring")
    return store_factory(purge=purge, key_provider=keyring, **options)


def _scan(request: cenotaph.ErasureRequest) -> dict[str, object]:
    return dict(request.status().layers["scan"].evidence)


def assert_verified_with_nothing_to_erase(store: cenotaph.Store, request: cenotaph.ErasureRequest) -> None:
    status = request.status()
    assert status.state == "verified", status.gaps
    assert status.gaps == () and not status.stuck and status.next_step is None
    scan = _scan(request)
    assert scan["nothing_to_erase"] is True
    assert scan["found"] == {"records": 0, "keys": 0}
    assert scan["remaining"] == {"records": 0, "keys": 0}
    assert scan["probes"] == 0 and scan["matches"] == 0
    assert scan["positive_control"] is True
    assert int(scan["files"]) > 0 and int(scan["bytes"]) > 0  # type: ignore[call-overload]
    assert store.confirm_erasure(request.id).state == "verified"
    certificate = store.attest(request.id)
    cenotaph.verify_certificate(certificate.to_json(), store.public_key)
    assert certificate["scan"]["nothing_to_erase"] is True  # the certificate says what it proves
    assert certificate["scan"]["found"] == {"records": 0, "keys": 0}


@pytest.mark.parametrize("kind", FORGETS)
def test_a_repeated_forget_verifies_at_once(store_factory: StoreFactory, kind: str) -> None:
    store = _open(store_factory)
    store.write(SESSION, "note", "cardiology appointment on Tuesday")
    store.write(OTHER, "note", "kept")
    first = FORGETS[kind](store)
    assert first.status().state == "verified"
    assert _scan(first)["nothing_to_erase"] is False and int(_scan(first)["probes"]) > 0  # type: ignore[call-overload]
    again = FORGETS[kind](store)
    assert_verified_with_nothing_to_erase(store, again)
    assert again.wait().state == "verified"  # returns at once: nothing to wait for
    assert store.read(OTHER, "note") is not None


@pytest.mark.parametrize("kind", FORGETS)
def test_forgetting_a_target_the_store_never_held_verifies_at_once(
    store_factory: StoreFactory, kind: str
) -> None:
    store = _open(store_factory)
    store.write(OTHER, "note", "kept")
    request = FORGETS[kind](store)
    assert_verified_with_nothing_to_erase(store, request)
    assert store.read(OTHER, "note") is not None


@pytest.mark.parametrize("kind", FORGETS)
def test_a_forget_without_auto_purge_verifies_at_the_first_purge_and_wait_returns(
    store_factory: StoreFactory, kind: str
) -> None:
    store = _open(store_factory, purge=False)
    store.write(OTHER, "note", "kept")
    request = FORGETS[kind](store)
    assert request.status().state == "shredded"
    outcome: list[cenotaph.ErasureStatus] = []
    waiter = threading.Thread(target=lambda: outcome.append(request.wait()), daemon=True)
    waiter.start()
    waiter.join(60)
    assert not waiter.is_alive(), "wait() with no timeout hangs on a request with nothing to erase"
    assert outcome and outcome[0].state == "verified"
    assert_verified_with_nothing_to_erase(store, request)


@pytest.mark.parametrize("kind", FORGETS)
@pytest.mark.parametrize("how", ["expired", "operational"])
def test_a_forget_of_records_already_expired_or_reclaimed_still_erases_their_lineage(
    store_factory: StoreFactory, clock: ManualClock, kind: str, how: str
) -> None:
    """Expiry and operational forgets keep the lineage keys (derived records need them): a later
    compliance forget destroys those, so it has something to erase, takes probes and verifies."""
    store = _open(store_factory, clock=clock)
    if how == "expired":
        clock.advance_past(store.write(SESSION, "note", "cardiology appointment on Tuesday", ttl=60))
    else:
        store.write(SESSION, "note", "cardiology appointment on Tuesday")
        store.forget(SESSION, "note", mode="operational")
    assert store.purge().reclaimed >= 1  # the record row is gone, its lineage is not
    request = FORGETS[kind](store)
    assert request.status().state == "verified", request.status().gaps
    scan = _scan(request)
    assert scan["nothing_to_erase"] is False
    assert scan["found"]["keys"] > 0 and int(scan["probes"]) > 0  # type: ignore[index, call-overload]
    assert scan["remaining"] == {"records": 0, "keys": 0}
    store.attest(request.id)
    assert_verified_with_nothing_to_erase(store, FORGETS[kind](store))  # and again: nothing


@pytest.mark.sqlite_only
@pytest.mark.parametrize("kind", FORGETS)
def test_a_forget_replayed_on_a_copy_that_never_held_the_target_verifies(
    store_factory: StoreFactory, tmp_path: Path, kind: str
) -> None:
    with _open(store_factory) as store:
        store.write(OTHER, "note", "kept")
        info = store.backup(tmp_path / "backup")
        store.write(SESSION, "note", "written after the backup")
        request = FORGETS[kind](store)
        assert request.status().state == "verified"
    with cenotaph.restore(
        info.path, tmp_path / "restored", key_provider=cenotaph.LocalKeyring(tmp_path / "keyring")
    ) as restored:
        replayed = restored.erasure(request.id)
        assert_verified_with_nothing_to_erase(restored, replayed)
        assert restored.read(OTHER, "note") is not None


def test_a_request_with_nothing_to_erase_holds_no_horizon_back(store_factory: StoreFactory) -> None:
    """The old failure: a repeated subject erasure stayed pending, its probes held KEK epoch 1,
    and no other erasure in the store ever reached its horizon."""
    store = _open(store_factory)
    store.write(SESSION, "note", "cardiology appointment on Tuesday")
    store.write(OTHER, "note", "bob's note")
    requests = [store.forget_subject(SUBJECT), store.forget_subject(SUBJECT), store.forget(OTHER, "note")]
    assert [r.status().state for r in requests] == ["verified"] * 3
    assert store.retention() == []
    report = store.rotate_keys()
    assert 1 in report.destroyed_epochs and report.retained_epochs == () and report.retained == ()
    for request in requests:
        status = request.status()
        assert status.horizon is not None and status.retained_by == ()
        assert store.attest(request.id)["horizon"] is not None


def test_a_request_that_found_nothing_waits_for_an_earlier_erasure_of_the_same_target(
    store_factory: StoreFactory,
) -> None:
    """Its claim ("nothing of the target is left") holds only once the earlier request that did
    find the data is verified; both verify in the same purge."""
    store = _open(store_factory, purge=False)
    store.write(SESSION, "note", "cardiology appointment on Tuesday")
    first = store.forget_subject(SUBJECT)
    again = store.forget_subject(SUBJECT)
    assert first.status().state == again.status().state == "shredded"
    report = store.purge()
    assert report.requests == {first.id: "verified", again.id: "verified"}
    assert _scan(first)["nothing_to_erase"] is False
    assert_verified_with_nothing_to_erase(store, again)


@pytest.mark.sqlite_only
def test_the_cli_verifies_a_repeated_subject_erasure_and_its_certificate_says_what_it_proves(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "CENOTAPH_KEYRING": str(tmp_path / "keyring")}

    def run(*args: str, data: bool = True) -> dict[str, object]:
        where = ["--data", str(tmp_path / "data")] if data else []
        proc = subprocess.run(
            [sys.executable, "-m", "cenotaph.cli.main", *args, *where],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return dict(json.loads(proc.stdout))

    run("init")
    run("write", SESSION, "note", "cardiology appointment on Tuesday")
    run("forget-subject", SUBJECT)
    again = run("forget-subject", SUBJECT)
    assert again["status"]["state"] == "verified"  # type: ignore[index]
    certificate = tmp_path / "cert.json"
    run("attest", str(again["id"]), "--out", str(certificate))
    key = json.loads(certificate.read_text())["public_key"]
    checked = run("verify-cert", str(certificate), "--public-key", key, data=False)
    assert any("found nothing of its target" in claim for claim in checked["proves"])  # type: ignore[attr-defined]
