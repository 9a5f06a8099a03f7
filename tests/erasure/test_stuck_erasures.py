"""No pending erasure holds the others hostage without saying so, and nothing waits for ever.

A request that cannot verify by purging again is *stuck*: its status says so, names why and what
releases it; ``wait()`` raises ``ErasureNotProvableError`` instead of hanging; ``rotate_keys``,
``Store.retention()``, the CLI's ``status``, ``rotate-keys`` (JSON and ``--table``) and ``doctor``
name the request that keeps a KEK epoch alive (never a backup when none is registered). Ways to
get stuck tried here, on real SQLite files with the keyring outside the data directory:

- bytes of the erased value in a file the store does not write (the data directory is scanned);
- a live copy in the database that no rewrite removes (a table someone added);
- a row of the target planted in the database after the forget (no erasure will remove it);
- an earlier, stuck erasure of the same target, for a request that found nothing to erase.

And one way that used to get stuck and must not: an erased value that quoted an id the store
keeps in its own bookkeeping (its probe matches the audit log and the request row, for ever).
An open reader blocking WAL truncation is not stuck -- it clears when the reader goes -- but
``wait()`` without a timeout gives up after the busy timeout rather than waiting for ever.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.kit.oracle import write_sql
from tests.kit.proc import spawn
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph.crypto.tokens import TokenMaker
from cenotaph.errors import ErasureNotProvableError

SUBJECT = "tenant:acme/user:alice"
SESSION = f"{SUBJECT}/session:s1"
OTHER = "tenant:acme/user:bob/session:b1"
TEXT = "cardiology appointment on Tuesday at the Hopital Saint-Louis, room 4172"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``root/data`` and, outside it, ``root/keyring`` (also what the CLI uses)."""
    monkeypatch.setenv("CENOTAPH_KEYRING", str(tmp_path / "keyring"))
    return tmp_path


def _open(root: Path, **options: bool | str) -> cenotaph.Store:
    # forgets purge before they return unless a test says otherwise (these tests are about what
    # a purge concludes, not about when it runs)
    options.setdefault("auto_purge", "sync")
    return cenotaph.open(root / "data", key_provider=cenotaph.LocalKeyring(root / "keyring"), **options)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Ran:
    exit_code: int
    stdout: str
    stderr: str


def _cli(root: Path, *args: str) -> Ran:
    """The real ``cenotaph`` command in a child process (keyring outside the data directory; a
    wide terminal, so a table's cells are not folded across lines)."""
    env = {**os.environ, "CENOTAPH_KEYRING": str(root / "keyring"), "COLUMNS": "400"}
    proc = subprocess.run(
        [sys.executable, "-m", "cenotaph.cli.main", *args, "--data", str(root / "data")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr)


def _cli_json(root: Path, *args: str) -> Any:
    result = _cli(root, *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _wait_in_thread(request: cenotaph.ErasureRequest, timeout: float | None = None) -> object:
    """``request.wait(timeout)`` in a thread: its status, or the exception it raised; fails the
    test if it has not returned within a minute (it would hang for ever)."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(request.wait(timeout))
        except Exception as exc:  # handed to the test to inspect
            outcome.append(exc)

    waiter = threading.Thread(target=run, daemon=True)
    waiter.start()
    waiter.join(60)
    assert not waiter.is_alive(), "wait() did not return: it hangs on a request that cannot verify"
    return outcome[0]


@pytest.fixture
def stray(root: Path) -> Iterator[tuple[cenotaph.Store, cenotaph.ErasureRequest, Path]]:
    """A store whose subject erasure is stuck: a copy of the erased text sits in a file of the
    data directory that the store does not write (a user's notes, say)."""
    store = _open(root, auto_purge="off")
    try:
        store.write(SESSION, "note", TEXT)
        store.write(OTHER, "note", "bob's note")
        copy = root / "data" / "notes.txt"
        copy.write_text(f"pasted by hand: {TEXT}\n")
        request = store.forget_subject(SUBJECT)
        store.purge()
        yield store, request, copy
    finally:
        store.close()


@pytest.mark.sqlite_only
def test_a_stray_copy_makes_the_request_stuck_and_it_says_what_releases_it(
    stray: tuple[cenotaph.Store, cenotaph.ErasureRequest, Path],
) -> None:
    store, request, copy = stray
    status = request.status()
    assert status.state == "purged" and status.stuck
    assert any("notes.txt" in gap for gap in status.gaps)
    assert (
        status.next_step is not None
        and "remove or move" in status.next_step
        and "notes.txt" in status.next_step
    )
    with pytest.raises(ErasureNotProvableError, match="purging again will not change this") as refused:
        store.confirm_erasure(request.id)
    assert TEXT not in str(refused.value)
    with pytest.raises(ErasureNotProvableError, match="purging again will not change this"):
        store.attest(request.id)
    raised = _wait_in_thread(request)
    assert isinstance(raised, ErasureNotProvableError) and "cannot verify by waiting" in str(raised)
    raised = _wait_in_thread(request, timeout=30)  # with a timeout too: it cannot succeed, so no waiting
    assert isinstance(raised, ErasureNotProvableError)

    copy.unlink()  # what its release said: the next wait (one purge) verifies it
    done = _wait_in_thread(request)
    assert isinstance(done, cenotaph.ErasureStatus) and done.state == "verified" and not done.stuck


@pytest.mark.sqlite_only
def test_a_stuck_request_is_named_as_the_holder_of_its_epoch_not_a_backup(
    stray: tuple[cenotaph.Store, cenotaph.ErasureRequest, Path],
) -> None:
    store, request, copy = stray
    other = store.forget(OTHER, "note")
    assert store.purge().requests[other.id] == "verified"
    assert store.backups() == {}
    report = store.rotate_keys()
    assert report.retained_epochs == (1,) and 1 not in report.destroyed_epochs
    (held,) = report.retained
    assert (held.epoch, held.holder, held.id, held.stuck) == (1, "erasure", request.id, True)
    assert "notes.txt" in held.reason and "remove or move" in held.release
    assert store.retention() == [held]
    status = other.status()  # verified, but its horizon waits for the stuck request's epoch
    assert status.state == "verified" and status.horizon is None
    assert status.retained_by == (held,)
    reason = str(status.layers["horizon"].evidence["reason"])
    assert request.id in reason and "backup" not in reason

    copy.unlink()
    assert store.purge().requests[request.id] == "verified"
    assert store.retention() == []
    assert 1 in store.rotate_keys().destroyed_epochs
    assert other.status().horizon is not None and request.status().horizon is not None


@pytest.mark.sqlite_only
def test_the_cli_names_the_request_that_holds_an_epoch(
    root: Path, stray: tuple[cenotaph.Store, cenotaph.ErasureRequest, Path]
) -> None:
    store, request, _ = stray
    store.close()  # the CLI opens the directory itself
    rotation = _cli_json(root, "rotate-keys")
    assert rotation["retained_epochs"] == [1]
    (held,) = rotation["retained"]
    assert held["holder"] == "erasure" and held["id"] == request.id and held["stuck"] is True
    assert "rotate_keys()" in held["release"]  # JSON is the store's own document
    table = _cli(root, "rotate-keys", "--table")
    assert table.exit_code == 0 and request.id in table.stdout and "backup" not in table.stdout.lower()
    assert "`cenotaph rotate-keys`" in table.stdout and "rotate_keys()" not in table.stdout  # speaks CLI

    summary = _cli_json(root, "status")
    assert [r["id"] for r in summary["retained"]] == [request.id]
    assert [r["stuck"] for r in summary["requests"]] == [True]
    one = _cli_json(root, "status", request.id)["status"]
    assert one["stuck"] is True and "remove or move" in one["next_step"]
    assert request.id in _cli(root, "status", "--table").stdout

    doctor = _cli(root, "doctor")
    assert doctor.exit_code == 1
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert (
        checks["erasure requests"]["status"] == "fail"
        and "remove or move" in checks["erasure requests"]["detail"]
    )
    assert checks["epoch retention"]["status"] == "fail" and request.id in checks["epoch retention"]["detail"]
    assert "next: remove or move" in checks["erasure requests"]["detail"]  # not a purge that changes nothing

    attest = _cli(root, "attest", request.id)
    assert attest.exit_code == 1 and "purging again will not change this" in attest.stderr


@pytest.mark.sqlite_only
def test_a_registered_backup_is_named_as_what_it_is(root: Path) -> None:
    with _open(root) as store:
        store.write(SESSION, "note", TEXT)
        info = store.backup(root / "backup")
        request = store.forget_subject(SUBJECT)
        report = store.rotate_keys()
        (held,) = report.retained
        assert (held.holder, held.id, held.stuck) == ("backup", info.id, False)
        assert "release_backup()" in held.release
        assert request.status().retained_by == (held,)
    table = _cli(root, "rotate-keys", "--table")
    assert info.id in table.stdout and "`cenotaph release-backup ID`" in table.stdout.replace("\n", "")
    doctor = {c["name"]: c for c in json.loads(_cli(root, "doctor").stdout)["checks"]}
    assert doctor["epoch retention"]["status"] == "warn" and info.id in doctor["epoch retention"]["detail"]


@pytest.mark.sqlite_only
def test_a_request_that_found_nothing_says_it_waits_for_a_stuck_earlier_one(
    stray: tuple[cenotaph.Store, cenotaph.ErasureRequest, Path],
) -> None:
    store, first, copy = stray
    again = store.forget_subject(SUBJECT)  # a repeated access request: nothing left to erase
    store.purge()
    status = again.status()
    assert status.state == "purged" and status.stuck
    assert any(first.id in gap for gap in status.gaps)
    assert status.next_step is not None and first.id in status.next_step
    raised = _wait_in_thread(again)
    assert isinstance(raised, ErasureNotProvableError) and first.id in str(raised)
    copy.unlink()
    assert store.purge().requests == {first.id: "verified", again.id: "verified"}
    assert again.status().layers["scan"].evidence["nothing_to_erase"] is True


@pytest.mark.sqlite_only
def test_a_row_of_the_target_planted_after_the_forget_is_reported_not_verified(root: Path) -> None:
    """Someone who can write the database makes one of bob's records "carry" alice after her
    erasure: the target is not empty, no erasure will empty it, and the request says so."""
    with _open(root, auto_purge="off") as store:
        store.write(SESSION, "note", TEXT)
        bob = store.write(OTHER, "note", "bob's note")
        request = store.forget_subject(SUBJECT)
        token = TokenMaker(store._provider.erasure_secret()).subject(SUBJECT)
    write_sql(root / "data" / "cenotaph.db", [("INSERT INTO record_subjects VALUES (?, ?)", [token, bob.id])])
    with _open(root) as store:
        store.purge()
        reopened = store.erasure(request.id)
        status = reopened.status()
        assert status.state == "purged" and status.stuck
        assert any("still in the database" in gap for gap in status.gaps)
        assert status.next_step is not None and "check_integrity" in status.next_step
        assert status.layers["scan"].evidence["remaining"] == {"records": 1, "keys": 1}
        with pytest.raises(ErasureNotProvableError):
            reopened.wait()


def test_an_erased_value_that_quotes_an_id_the_store_keeps_still_verifies(
    store_factory: StoreFactory,
) -> None:
    """Its probe matches the request row and the audit log (and the ledger) for ever; those hold
    content-free bookkeeping by design, so the probe is uninformative, not residue. It used to
    leave the request pending for ever, holding its epoch back."""
    keyring = cenotaph.LocalKeyring(store_factory.base / "keyring")
    with store_factory(purge="sync", key_provider=keyring) as store:
        store.write(OTHER, "k", "v")
        first = store.forget(OTHER, "k")
        store.write(SESSION, "filed", {"filed": first.id, "note": "the agent kept the request id"})
        request = store.forget_subject(SUBJECT)
        status = request.status()
        assert status.state == "verified", status.gaps
        scan = status.layers["scan"].evidence
        assert scan["matches"] == 0 and scan["uninformative_probes"] >= 1 and scan["probes"] > 0
        store.attest(request.id)
        assert 1 in store.rotate_keys().destroyed_epochs


@pytest.mark.sqlite_only
def test_an_open_reader_is_named_and_wait_gives_up_after_the_busy_timeout(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(root) as store:
        store.write(SESSION, "note", TEXT)
        with spawn("hold-reader", keep_stdin=True, db=str(root / "data" / "cenotaph.db")) as reader:
            assert reader.readline().startswith("holding "), reader.stderr
            request = store.forget_subject(SUBJECT)
            status = request.status()
            assert status.state != "verified" and not status.stuck  # it clears when the reader goes
            assert status.next_step is not None and "read transaction" in status.next_step
            (held,) = store.retention()
            assert held.id == request.id and not held.stuck and "read transaction" in held.release
            timed = _wait_in_thread(request, timeout=0.5)
            assert (
                isinstance(timed, cenotaph.ErasureStatus) and timed.state != "verified"
            )  # a timeout returns
            monkeypatch.setenv("CENOTAPH_BUSY_TIMEOUT_MS", "500")
            raised = _wait_in_thread(request)  # no timeout: not for ever
            assert isinstance(raised, ErasureNotProvableError) and "still blocked" in str(raised)
            reader.finish(timeout=30)
        done = _wait_in_thread(request)
        assert isinstance(done, cenotaph.ErasureStatus) and done.state == "verified"


@pytest.mark.sqlite_only
def test_setting_bookkeeping_probes_aside_never_hides_a_real_copy(root: Path) -> None:
    """Only windows made wholly of bytes the store keeps by design are set aside: a copy of a
    value that quoted a request id is still found by its other windows, and a copy next to the
    ledger (in the keyring's directory) is not taken for the ledger -- nor answered with "remove
    the file": nothing there is the store's to advise removing."""
    with _open(root, auto_purge="off") as store:
        store.write(OTHER, "k", "v")
        first = store.forget(OTHER, "k")
        store.write(SESSION, "filed", {"filed": first.id, "note": TEXT})
        copy = f"filed {first.id}: {TEXT}"
        (root / "data" / "copy.txt").write_text(copy)
        (root / "keyring" / "copy.txt").write_text(copy)
        request = store.forget_subject(SUBJECT)
        store.purge()
        status = request.status()
        assert status.state == "purged" and status.stuck
        scan = status.layers["scan"].evidence
        assert scan["uninformative_probes"] >= 1 and scan["matches"] > 0
        assert status.next_step is not None and "'copy.txt'" in status.next_step  # the data directory's
        (root / "data" / "copy.txt").unlink()
        store.purge()
        status = request.status()
        assert status.state == "purged" and status.stuck  # the keyring directory's copy still counts
        assert (
            status.next_step is not None
            and "check_integrity" in status.next_step
            and "remove" not in status.next_step
        )
        (root / "keyring" / "copy.txt").unlink()
        assert store.purge().requests[request.id] == "verified"
