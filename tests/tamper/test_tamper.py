"""The database is a cache of the key provider's ledger, not the authority.

Each test edits the real SQLite file (or a backup's copy) with the stdlib ``sqlite3`` module,
with the keyring outside the data directory and out of the attacker's reach, and checks that
the edit is refused (nothing forgotten or expired is served, no forgotten target reopens, no
state is faked) and detected (``verify_audit`` raises, ``cenotaph audit verify`` and
``cenotaph doctor`` exit non-zero naming it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.kit.checks import present
from tests.kit.clock import ManualClock

import cenotaph
from cenotaph.errors import ErasureNotProvableError, ForgottenError, StorageError

from .conftest import OTHER, SCOPE, Setup, edit, reopened, rows

TAMPERED = "the database was altered"


def _detected(setup: Setup, what: str) -> None:
    """``verify_audit``, ``cenotaph audit verify`` and ``cenotaph doctor`` all name the edit."""
    with reopened(setup) as store, pytest.raises(StorageError, match=what):
        store.verify_audit()
    audit = setup.cli("audit", "verify")
    assert audit.exit_code != 0 and what in " ".join(audit.output.split()), audit.output
    doctor = setup.cli("doctor")
    assert doctor.exit_code == 1, doctor.output
    failed = [c for c in json.loads(doctor.output)["checks"] if c["status"] == "fail"]
    assert any(what in c["detail"] for c in failed), failed


def _forgotten(setup: Setup, mode: str, *, purge: bool = False) -> tuple[str, str]:
    """A record under SCOPE/k, forgotten; returns (record id, request id). Another record stays."""
    with reopened(setup, auto_purge="sync" if purge else "off") as store:
        rec = store.write(SCOPE, "k", "the secret value")
        store.write(OTHER, "k", "unrelated")
        request = store.forget(SCOPE, "k", mode=mode)
        assert store.read(SCOPE, "k") is None
    return rec.id, request.id


# -- forgotten records must stay unreadable -------------------------------------------------------
@pytest.mark.parametrize("mode", ["operational", "compliance"])
def test_deleting_tombstones_and_clearing_hidden_marks_resurrects_nothing(setup: Setup, mode: str) -> None:
    record_id, _ = _forgotten(setup, mode)
    edit(
        setup.db,
        [
            "DELETE FROM tombstones",
            "UPDATE records SET hidden_version=NULL, hidden_mode=NULL",
            "UPDATE lineage SET forgotten_version=NULL",
            "UPDATE meta SET value=0 WHERE name='forget_epoch'",
        ],
    )
    with reopened(setup) as store:
        assert store.read(SCOPE, "k") is None
        assert store.get(record_id) is None
        assert store.list(SCOPE) == []
        assert store.search(SCOPE, "the secret value") == []
        assert store.read(OTHER, "k") is not None  # the rest of the store still serves
    _detected(setup, "tombstone")


def test_restoring_destroyed_keys_from_an_older_copy_resurrects_nothing(setup: Setup, tmp_path: Path) -> None:
    """Compliance forget, not yet purged: its wrapped key bytes come back from a copy taken before
    it (the KEK epoch that wrapped them is still live until rotation)."""
    with reopened(setup, auto_purge="off") as store:
        rec = store.write(SCOPE, "k", "the secret value")
    old = tmp_path / "old.db"
    old.write_bytes(setup.db.read_bytes())
    with reopened(setup, auto_purge="off") as store:
        store.forget(SCOPE, "k")
    edit(
        setup.db,
        [
            (f"ATTACH DATABASE '{old}' AS old", ()),
            "DELETE FROM tombstones",
            "UPDATE records SET wrapped=(SELECT wrapped FROM old.records o WHERE o.id=records.id), "
            "epoch=(SELECT epoch FROM old.records o WHERE o.id=records.id), hidden_version=NULL, hidden_mode=NULL",
            "UPDATE lineage SET wrapped=(SELECT wrapped FROM old.lineage o WHERE o.record_id=lineage.record_id), "
            "subjects=(SELECT subjects FROM old.lineage o WHERE o.record_id=lineage.record_id), "
            "epoch=(SELECT epoch FROM old.lineage o WHERE o.record_id=lineage.record_id), "
            "destroyed_version=NULL, forgotten_version=NULL",
        ],
    )
    with reopened(setup) as store:
        assert store.get(rec.id) is None
        assert store.read(SCOPE, "k") is None
    _detected(setup, "destroyed key")


def test_reinserting_purged_rows_from_an_older_copy_resurrects_nothing(setup: Setup, tmp_path: Path) -> None:
    with reopened(setup) as store:
        rec = store.write(SCOPE, "k", "the secret value")
    old = tmp_path / "old.db"
    old.write_bytes(setup.db.read_bytes())
    with reopened(setup) as store:
        request = store.forget(SCOPE, "k")
        assert request.status().state == "verified"
    edit(
        setup.db,
        [
            (f"ATTACH DATABASE '{old}' AS old", ()),
            "DELETE FROM tombstones",
            "DELETE FROM erased_records",
            "INSERT OR REPLACE INTO records SELECT * FROM old.records",
            "INSERT OR REPLACE INTO lineage SELECT * FROM old.lineage",
            "INSERT OR REPLACE INTO record_subjects SELECT * FROM old.record_subjects",
        ],
    )
    with reopened(setup) as store:
        assert store.get(rec.id) is None
        assert store.read(SCOPE, "k") is None
        with pytest.raises(ForgottenError):
            store.write(SCOPE, "k2", "derived", derived_from=[rec.id])
    _detected(setup, "tombstone")


def test_raising_a_forgotten_records_version_past_its_tombstone_resurrects_nothing(setup: Setup) -> None:
    record_id, _ = _forgotten(setup, "operational")
    edit(
        setup.db,
        [
            "UPDATE records SET hidden_version=NULL, hidden_mode=NULL, version=version+1000000",
            "UPDATE lineage SET forgotten_version=NULL",
        ],
    )
    with reopened(setup) as store:
        assert store.read(SCOPE, "k") is None
        assert store.get(record_id) is None
    # a record row is found through the lineage row of its version: the moved row belongs to no
    # record any more, and opening it (its version is bound to its ciphertext) fails
    _detected(setup, "fail authentication")


def test_a_records_version_is_bound_to_its_ciphertext(setup: Setup) -> None:
    """A live record whose version column is edited no longer opens (fail closed)."""
    with reopened(setup) as store:
        rec = store.write(SCOPE, "k", "value")
    edit(setup.db, [("UPDATE records SET version=version+1000000 WHERE id=?", (rec.id,))])
    with reopened(setup) as store:
        assert store.get(rec.id) is None
    _detected(setup, "fail authentication")


# -- expiry ----------------------------------------------------------------------------------------
def test_extending_an_expiry_column_does_not_serve_an_expired_record(
    setup: Setup, clock: ManualClock
) -> None:
    with reopened(setup, clock=clock) as store:
        rec = store.write(SCOPE, "k", "short-lived", ttl=60)
        kept = store.write(SCOPE, "k2", "long-lived", ttl=3600)
    clock.advance_past(rec)
    edit(setup.db, ["UPDATE records SET expires_at = expires_at + 1000000"])
    with reopened(setup, clock=clock) as store:
        assert store.read(SCOPE, "k") is None
        assert store.get(rec.id) is None
        assert [r.key for r in store.list(SCOPE)] == ["k2"]
        assert store.get(kept.id) is not None  # the payload's own expiry decides, not the column
    _detected(setup, "expiry")


# -- re-opening a forgotten target to writes -------------------------------------------------------
@pytest.mark.parametrize("kind", ["key", "scope", "subject"])
def test_deleting_tombstones_does_not_reopen_a_target(setup: Setup, kind: str) -> None:
    with reopened(setup) as store:
        store.write(SCOPE, "k", "v")
        if kind == "key":
            store.forget(SCOPE, "k")
        elif kind == "scope":
            store.forget(SCOPE)
        else:
            store.forget_subject("tenant:acme/user:alice")
    edit(setup.db, ["DELETE FROM tombstones", "UPDATE meta SET value=0 WHERE name='forget_epoch'"])
    with reopened(setup) as store:
        with pytest.raises(ForgottenError):
            store.write(SCOPE, "k", "back again")
        assert store.read(SCOPE, "k") is None
    _detected(setup, "tombstone")


def test_a_planted_lift_does_not_reopen_a_target(setup: Setup) -> None:
    _forgotten(setup, "compliance", purge=True)
    ((target, version),) = rows(setup.db, "SELECT target, version FROM tombstones")
    edit(setup.db, [("INSERT INTO lifts VALUES (?, ?)", (target, version + 1000))])
    with reopened(setup) as store, pytest.raises(ForgottenError):
        store.write(SCOPE, "k", "back again")
    _detected(setup, "lift")


def test_a_used_reauthorization_token_cannot_be_revived_in_the_database(setup: Setup) -> None:
    """An insider who once held a token resets its row after a second forget."""
    with reopened(setup) as store:
        store.write(SCOPE, "k", "v")
        store.forget(SCOPE, "k")
        token = store.reauthorize(SCOPE, "k")
        store.write(SCOPE, "k", "v2", reauthorization=token)
        store.forget(SCOPE, "k")
    edit(setup.db, ["UPDATE reauth_tokens SET consumed_version=NULL, issued_version=issued_version+1000000"])
    with reopened(setup) as store, pytest.raises(ForgottenError):
        store.write(SCOPE, "k", "v3", reauthorization=token)
    _detected(setup, "reauthorization")


def test_a_planted_reauthorization_row_is_no_token(setup: Setup) -> None:
    """A row copied from a used token with a fresh issue version does not make that token new."""
    with reopened(setup) as store:
        store.write(SCOPE, "k", "v")
        store.forget(SCOPE, "k")
        token = store.reauthorize(SCOPE, "k")
        store.write(SCOPE, "k", "v2", reauthorization=token)
        store.forget(SCOPE, "k")
        digest = store._tokens.reauth(token)  # what the insider's token looks like in the database
    ((kind, target),) = rows(setup.db, "SELECT kind, target FROM reauth_tokens WHERE digest=?", (digest,))
    edit(
        setup.db,
        [
            ("DELETE FROM reauth_tokens WHERE digest=?", (digest,)),
            (
                "INSERT INTO reauth_tokens (digest, kind, target, issued_version) VALUES (?, ?, ?, 1000000)",
                (digest, kind, target),
            ),
        ],
    )
    with reopened(setup) as store, pytest.raises(ForgottenError):
        store.write(SCOPE, "k", "v3", reauthorization=token)
    _detected(setup, "reauthorization")


# -- erasure states --------------------------------------------------------------------------------
def test_a_request_row_set_to_verified_is_not_confirmed(setup: Setup) -> None:
    _, request_id = _forgotten(setup, "compliance")  # auto_purge off: it stays shredded
    ((layers,),) = rows(setup.db, "SELECT layers FROM erasures WHERE id=?", (request_id,))
    done = {name: {"state": "done", "evidence": {}} for name in json.loads(layers)}
    edit(
        setup.db,
        [
            (
                "UPDATE erasures SET state='verified', layers=?, verified_at='2025-01-01T00:00:00+00:00', "
                "probes=NULL WHERE id=?",
                (json.dumps(done), request_id),
            )
        ],
    )
    with reopened(setup) as store:
        with pytest.raises(StorageError, match="no scan that verified"):
            store.confirm_erasure(request_id)
        with pytest.raises((ErasureNotProvableError, StorageError)):
            store.attest(request_id)
    _detected(setup, "verified")


# -- restore ---------------------------------------------------------------------------------------
def test_a_planted_request_row_in_a_backup_does_not_skip_the_replay(setup: Setup, tmp_path: Path) -> None:
    with reopened(setup) as store:
        rec = store.write(SCOPE, "k", "the secret value")
        backup = store.backup(tmp_path / "bk")
        request = store.forget(SCOPE, "k")  # after the backup: restore must replay it
    copy = Path(backup.path) / "cenotaph.db"
    ((plan_row,),) = rows(setup.db, "SELECT plan FROM erasures WHERE id=?", (request.id,))
    edit(
        copy,
        [
            (
                "INSERT INTO erasures (id, mode, target_kind, target, version, requested_at, state, layers, plan) "
                "VALUES (?, 'compliance', 'key', x'00', 1, '2025-01-01', 'verified', '{}', ?)",
                (request.id, plan_row),
            )
        ],
    )
    try:
        restored = cenotaph.restore(backup.path, tmp_path / "restored", key_provider=setup.provider())
    except StorageError as exc:  # refusing the restore is fail-closed too
        assert TAMPERED in str(exc) or "altered" in str(exc)
        return
    with restored:
        assert restored.get(rec.id) is None
        assert restored.read(SCOPE, "k") is None
        restored.verify_audit()  # the replay made the copy whole again


def test_a_backup_whose_audit_log_was_rewritten_is_not_restored(setup: Setup, tmp_path: Path) -> None:
    with reopened(setup) as store:
        store.write(SCOPE, "k", "v")
        store.forget(OTHER, "nothing-here")
        backup = store.backup(tmp_path / "bk")
    copy = Path(backup.path) / "cenotaph.db"
    edit(copy, ['UPDATE audit SET entry=replace(entry, \'"at": "20\', \'"at": "19\') WHERE seq=1'])
    with pytest.raises(StorageError, match="audit"):
        cenotaph.restore(backup.path, tmp_path / "restored", key_provider=setup.provider())
    assert not (tmp_path / "restored" / "cenotaph.db").exists()


# -- an untouched store stays green ----------------------------------------------------------------
def test_an_untouched_store_verifies(setup: Setup, tmp_path: Path) -> None:
    with reopened(setup) as store:
        store.write(SCOPE, "k", "v", ttl=3600)
        store.write(SCOPE, "gone", "v")
        store.forget(SCOPE, "gone")
        token = store.reauthorize(SCOPE, "gone")
        store.write(SCOPE, "gone", "again", reauthorization=token)
        store.forget(OTHER, mode="operational")
        store.verify_audit()
        backup = store.backup(tmp_path / "bk")
    assert setup.cli("audit", "verify").exit_code == 0
    doctor = setup.cli("doctor")
    assert doctor.exit_code == 0, doctor.output
    with cenotaph.restore(backup.path, tmp_path / "restored", key_provider=setup.provider()) as restored:
        assert present(restored.read(SCOPE, "gone")).value == "again"
        restored.verify_audit()
