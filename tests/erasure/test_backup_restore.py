"""S5 with backups: a backup taken before a forget resurrects nothing when restored after it.

- The backup directory holds ciphertext only: no canary in any form, no keyring file, no byte of
  any key held by the key provider (KEKs, erasure secret, signing key).
- ``restore`` replays the ledger before the first read: nothing forgotten comes back through read,
  get, list, search or export_subject, and writes to the forgotten target are still refused.
- ``restore`` refuses a non-empty target and a source that is not a backup (InvalidValueError).
- A registered backup keeps its epochs alive (horizon None, naming the backup); once released,
  ``rotate_keys`` destroys them, the horizon is reached, and restoring the old backup yields no
  readable record at all: every key in it was wrapped under a destroyed epoch.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest
from tests.erasure._erasure_data import (
    DB,
    A,
    B,
    Written,
    assert_gone,
    assert_readable,
    assert_write_refused,
    populate,
)
from tests.kit.oracle import residue, sql
from tests.kit.proc import run

import cenotaph
from cenotaph.erasure.lifecycle import backup as service_module
from cenotaph.errors import InvalidValueError, StorageError

# about SQLite's files and rows (tests/kit/stores.py)
pytestmark = pytest.mark.sqlite_only

KEY_FILES = {"keyring.json", "ledger.jsonl", ".lock"}


def _key_material(keyring: Path) -> list[str]:
    """Every secret the keyring holds, as hex (KEKs of every epoch, erasure secret, signing key)."""
    doc = json.loads((keyring / "keyring.json").read_text())
    secrets_hex = [*doc["epochs"].values(), doc["erasure_secret"], doc["signing_key"]]
    assert all(len(s) == 64 for s in secrets_hex)
    return secrets_hex


def _epochs_in(db: Path) -> set[int]:
    found: set[int] = set()
    for table in ("records", "lineage", "scopes", "subjects"):
        found |= {
            int(r[0])
            for r in sql(db, f"SELECT DISTINCT epoch FROM {table} WHERE epoch IS NOT NULL", immutable=True)
        }
    return found


def test_a_backup_from_before_a_forget_resurrects_nothing_and_dies_with_its_epochs(tmp_path: Path) -> None:
    live = tmp_path / "data"
    keyring = live / "keyring"
    store = cenotaph.open(live, auto_purge="sync")
    restored: list[cenotaph.Store] = []
    try:
        a = populate(store, A, "A", short=6, long=1)
        b = populate(store, B, "B", short=6, long=1)
        key_hex = _key_material(keyring)

        info = store.backup(tmp_path / "backup")
        assert info.epochs == (1,)
        backup = Path(info.path)

        # -- the backup holds ciphertext only ------------------------------------------------
        files = {p.name for p in backup.rglob("*")}
        assert not files & KEY_FILES, f"key material files in the backup: {files & KEY_FILES}"
        assert "keyring" not in files
        leaked = residue(
            backup, texts=[a.canary, b.canary, A, B, *key_hex], blobs=[bytes.fromhex(k) for k in key_hex]
        )
        assert leaked["files"] >= 1
        assert leaked["text_hits"] == [], leaked["text_hits"]
        assert leaked["window_hits"] == [], "a raw key from the keyring is in the backup"
        # it is a real copy: a's rows are in it, as ciphertext
        assert sql(backup / DB, "SELECT count(*) FROM records", immutable=True)[0][0] == len(a.ids) + len(
            b.ids
        )

        request = store.forget_subject(A)
        assert request.status().state == "verified"

        # -- restore after the forget: nothing of a comes back --------------------------------
        target = tmp_path / "restored"
        r1 = cenotaph.restore(backup, target, key_provider=cenotaph.LocalKeyring(keyring))
        restored.append(r1)
        assert_gone(r1, a)
        assert_write_refused(r1, a)
        assert_readable(r1, b)
        assert request.id in {r.id for r in r1.erasures()}
        assert r1.erasure(request.id).status().state == "verified"
        assert not (target / "keyring").exists(), "restore copies no key material"
        r1.close()
        found = residue(target, texts=[a.canary], blobs=[])
        assert found["text_hits"] == []

        # -- restore refuses what it cannot do safely -------------------------------------------
        busy = tmp_path / "busy"
        busy.mkdir()
        (busy / "something.txt").write_text("keep me")
        with pytest.raises(InvalidValueError):
            cenotaph.restore(backup, busy, key_provider=cenotaph.LocalKeyring(keyring))
        assert sorted(p.name for p in busy.iterdir()) == ["something.txt"]
        not_backup = tmp_path / "not-a-backup"
        not_backup.mkdir()
        (not_backup / "random.bin").write_bytes(b"\0" * 100)
        for source in (not_backup, live, tmp_path / "missing"):
            with pytest.raises(InvalidValueError):
                cenotaph.restore(source, tmp_path / "t-refused", key_provider=cenotaph.LocalKeyring(keyring))
        assert not (tmp_path / "t-refused").exists() or not any((tmp_path / "t-refused").iterdir())

        # -- a registered backup holds the horizon back ------------------------------------------
        first = store.rotate_keys()
        assert 1 in first.retained_epochs and 1 not in first.destroyed_epochs
        status = request.status()
        assert status.horizon is None
        assert info.id in status.layers["horizon"].evidence["reason"]
        held = store.attest(request.id)  # verified, but the certificate says the horizon is not reached
        assert held["horizon"] is None and info.id in held["horizon_reason"]

        # -- released: rotation destroys its epochs, the horizon is reached -----------------------
        store.release_backup(info.id)
        second = store.rotate_keys()
        assert set(info.epochs) <= set(second.destroyed_epochs)
        ring = json.loads((keyring / "keyring.json").read_text())
        assert not set(map(str, info.epochs)) & set(ring["epochs"])
        assert set(info.epochs) <= set(ring["destroyed"])
        assert request.status().horizon is not None
        assert store.attest(request.id)["horizon"] is not None
        assert_readable(store, b)  # live keys were rewrapped under the new epoch

        # -- the old backup now decrypts nothing -----------------------------------------------
        assert _epochs_in(backup / DB) <= set(ring["destroyed"])
        r2 = cenotaph.restore(backup, tmp_path / "restored-late", key_provider=cenotaph.LocalKeyring(keyring))
        restored.append(r2)
        for written in (a, b):
            for record_id, (scope, key, _) in written.records.items():
                assert r2.get(record_id) is None
                assert r2.read(scope, key) is None
        assert r2.list("tenant:t", include_descendants=True) == []
        assert r2.search("tenant:t", b.canary, include_descendants=True) == []
        assert r2.export_subject(B)["records"] == []
    finally:
        for r in restored:
            r.close()
        store.close()


def test_a_backup_dir_copied_elsewhere_still_restores_without_resurrection(tmp_path: Path) -> None:
    """The backup is self-contained ciphertext: moved to another path, it restores the same way."""
    live = tmp_path / "data"
    with cenotaph.open(live) as store:
        a = populate(store, A, "A", short=3, long=0)
        b = populate(store, B, "B", short=3, long=0)
        info = store.backup(tmp_path / "backup")
        store.forget(A, mode="compliance")  # a scope forget this time
    moved = shutil.copytree(info.path, tmp_path / "moved")
    with cenotaph.restore(
        moved, tmp_path / "restored", key_provider=cenotaph.LocalKeyring(live / "keyring")
    ) as r:
        assert_gone(r, a)
        assert_write_refused(r, a)
        assert_readable(r, b)


def _chain_id(db: Path) -> int:
    ((chain,),) = sql(db, "SELECT value FROM meta WHERE name='audit_chain'", immutable=True)
    return int(chain)


def _backup_with_a_forget_after_it(tmp_path: Path) -> tuple[Path, Path, Written, Written]:
    live = tmp_path / "data"
    with cenotaph.open(live) as store:
        a = populate(store, A, "A", short=3, long=0)
        b = populate(store, B, "B", short=3, long=0)
        info = store.backup(tmp_path / "backup")
        store.forget(A, mode="compliance")
    return live, Path(info.path), a, b


def test_a_restore_killed_before_its_first_commit_is_refused_then_resumed(tmp_path: Path) -> None:
    """SIGKILL right after the copy: the target then holds the source's chain id and forgets not yet
    replayed. Opening it must be refused (it would fork the source's audit anchors and serve what
    was forgotten); running the same restore again must finish it."""
    live, backup, a, b = _backup_with_a_forget_after_it(tmp_path)
    keyring = live / "keyring"
    target = tmp_path / "restored"
    child = run(
        "restore", fault="restore.copied", backup=str(backup), target=str(target), keyring=str(keyring)
    )
    assert child.killed, child.stderr
    # the scenario is real: a whole copy of the backup, with the source's chain id
    assert _chain_id(target / DB) == _chain_id(live / DB)
    provider = cenotaph.LocalKeyring(keyring)
    with pytest.raises(StorageError, match="has not finished"):
        cenotaph.open(target, key_provider=provider)
    assert _chain_id(target / DB) == _chain_id(live / DB)  # the refused open changed nothing

    with cenotaph.restore(backup, target, key_provider=provider) as restored:
        assert_gone(restored, a)
        assert_write_refused(restored, a)
        assert_readable(restored, b)
        assert restored.verify_audit()["entries"] >= 1
    assert _chain_id(target / DB) != _chain_id(live / DB)
    with cenotaph.open(target, key_provider=provider) as reopened:  # finished: an ordinary store now
        assert_gone(reopened, a)
        assert_readable(reopened, b)
    with cenotaph.open(live) as source:  # the source's own log still verifies beside the copy
        assert source.verify_audit()["entries"] >= 1


def test_restore_still_refuses_a_target_with_other_files_even_when_marked(tmp_path: Path) -> None:
    live = tmp_path / "data"
    with cenotaph.open(live) as store:
        store.write(A, "k", "v")
        info = store.backup(tmp_path / "backup")
    target = tmp_path / "restored"
    target.mkdir()
    (target / ".restore-incomplete").write_text("")
    (target / "precious").write_text("keep me")
    with pytest.raises(InvalidValueError, match="new or empty"):
        cenotaph.restore(info.path, target, key_provider=cenotaph.LocalKeyring(live / "keyring"))
    assert (target / "precious").read_text() == "keep me"


def test_a_second_restore_into_a_target_being_restored_is_refused_and_touches_nothing(
    tmp_path: Path,
) -> None:
    """A running restore holds a flock on its target for its whole run; a second restore (say,
    someone following open's advice meanwhile) must not replace the files under it."""
    live, backup, _, _ = _backup_with_a_forget_after_it(tmp_path)
    target = tmp_path / "restored"
    target.mkdir()
    (target / ".restore-incomplete").write_text("")
    (target / DB).write_bytes(b"the running restore's copy")
    fd = os.open(target, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what the running restore holds
        with pytest.raises(InvalidValueError, match="another restore into this directory is running"):
            cenotaph.restore(backup, target, key_provider=cenotaph.LocalKeyring(live / "keyring"))
        assert (target / DB).read_bytes() == b"the running restore's copy"
    finally:
        os.close(fd)
    # once that one is gone (killed: the kernel released its lock), the same restore resumes
    with cenotaph.restore(backup, target, key_provider=cenotaph.LocalKeyring(live / "keyring")) as r:
        assert r.verify_audit()["entries"] >= 1


def test_a_restore_whose_purge_is_cut_short_leaves_a_whole_store_that_purges_later(
    tmp_path: Path,
) -> None:
    live, backup, a, b = _backup_with_a_forget_after_it(tmp_path)
    target = tmp_path / "restored"
    provider = cenotaph.LocalKeyring(live / "keyring")

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cenotaph.restore(backup, target, key_provider=provider, progress=interrupt)
    assert not (target / ".restore-incomplete").exists()
    assert _chain_id(target / DB) != _chain_id(live / DB)  # committed before the purge began
    with cenotaph.open(target, key_provider=provider) as store:
        assert_gone(store, a)
        assert_readable(store, b)
        assert store.verify_audit()["entries"] >= 1
        report = store.purge()
        assert report.requests and set(report.requests.values()) == {"verified"}


def test_a_restore_or_backup_inside_a_data_directory_is_refused(tmp_path: Path) -> None:
    """A copy inside a data directory is a file that store owns: its scans would find the copy's
    bytes for ever (or, worse, a restore there could be served by the outer store's files)."""
    live, backup, _, _ = _backup_with_a_forget_after_it(tmp_path)
    provider = cenotaph.LocalKeyring(live / "keyring")
    for inside in (live / "restored", live / "nested" / "deeper"):
        with pytest.raises(InvalidValueError, match="inside a store's data directory"):
            cenotaph.restore(backup, inside, key_provider=provider)
        assert not inside.exists()
    with (
        cenotaph.open(tmp_path / "other") as other,
        pytest.raises(InvalidValueError, match="inside a store's data directory"),
    ):
        other.backup(live / "bk")
    assert not (live / "bk").exists()


@pytest.mark.parametrize("step", ["copy", "manifest"])
def test_a_backup_that_fails_keeps_no_epoch_registered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """A registered backup holds back every erasure horizon; one that failed (disk full while
    copying, or while writing its manifest) must not stay registered, nor look like a backup."""
    with cenotaph.open(tmp_path / "data") as store:
        store.write(A, "k", "v")

        def full_disk(*args: object, **kwargs: object) -> set[int]:
            raise OSError(28, "No space left on device")

        if step == "copy":
            monkeypatch.setattr(store._backend.physical, "vacuum_into", full_disk)
        else:
            monkeypatch.setattr(service_module, "write_atomically", full_disk)
        with pytest.raises(OSError):
            store.backup(tmp_path / "bk")
        assert store.backups() == {}  # nothing pins the epochs of a backup that does not exist
        assert list((tmp_path / "bk").iterdir()) == []


def test_a_restored_store_certifies_a_replayed_forget_of_records_it_never_held(tmp_path: Path) -> None:
    """Written after the backup, then forgotten: the restored copy replays the forget, removes
    nothing and takes no probes (there is nothing of them), and its clean scan proves it."""
    live = tmp_path / "data"
    with cenotaph.open(live, auto_purge="sync") as store:
        store.write(B, "k", "kept")
        info = store.backup(tmp_path / "backup")
        store.write(A, "late", "written after the backup")
        request = store.forget(A, "late")
        assert request.status().state == "verified"
    with cenotaph.restore(
        info.path, tmp_path / "restored", key_provider=cenotaph.LocalKeyring(live / "keyring")
    ) as restored:
        assert restored.erasure(request.id).status().state == "verified"
        certificate = restored.attest(request.id)
        cenotaph.verify_certificate(certificate.to_json(), restored.public_key)
        assert restored.read(A, "late") is None
