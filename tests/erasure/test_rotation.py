"""S5/S8 key rotation and S7 audit anchoring, against copies of real files.

Rotation: copies of ``keyring.json`` (the whole keyring directory) and of the database are taken
before a forget. After forget + purge + ``rotate_keys`` (no backups registered) the old KEK epoch is
destroyed in the live keyring, so:

- live database + OLD keyring copy: the forgotten records cannot be decrypted (nor anything else:
  every live key was rewrapped under an epoch the old copy never had);
- OLD database + live keyring: nothing of the old database decrypts, even with the ledger removed so
  that no forget is replayed -- the epoch that wrapped its keys is gone;
- OLD database + OLD keyring together DO decrypt. That is the documented S8 root-of-trust limit
  (whoever copies both the database and the keyring before the forget has the keys); the test pins
  it so that a change in that behaviour is noticed and documented.

Audit: ``verify_audit`` passes on an untouched store; editing a row of the ``audit`` table, or
re-hashing the whole chain after an edit, or deleting the last row (anchored in the ledger) makes
it raise StorageError.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

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
from tests.kit.oracle import sql, write_sql

import cenotaph
from cenotaph.errors import StorageError

# about SQLite's files and rows (tests/kit/stores.py)
pytestmark = pytest.mark.sqlite_only

NO_KEYRING = shutil.ignore_patterns("keyring")


def _copy(src: Path, dst: Path, *, keyring: bool = True) -> Path:
    return Path(shutil.copytree(src, dst, ignore=None if keyring else NO_KEYRING))


def _undecryptable(store: cenotaph.Store, written: Written) -> None:
    for record_id, (scope, key, _) in written.records.items():
        assert store.get(record_id) is None
        assert store.read(scope, key) is None
    assert store.list(written.subject, include_descendants=True) == []


def _epochs_in(db: Path) -> set[int]:
    found: set[int] = set()
    for table in ("records", "lineage", "scopes", "subjects"):
        query = f"SELECT DISTINCT epoch FROM {table} WHERE epoch IS NOT NULL"
        found |= {int(r[0]) for r in sql(db, query, immutable=True)}
    return found


def test_rotation_destroys_the_old_epoch_for_every_copy_but_old_db_with_old_keyring(tmp_path: Path) -> None:
    live = tmp_path / "data"
    with cenotaph.open(live) as store:
        a = populate(store, A, "A", short=4, long=1)
        b = populate(store, B, "B", short=4, long=0)
    old_keyring = _copy(live / "keyring", tmp_path / "old-keyring")
    old_db = _copy(live, tmp_path / "old-db", keyring=False)
    old_kek = json.loads((old_keyring / "keyring.json").read_text())["epochs"]["1"]
    assert _epochs_in(old_db / DB) == {1}

    with cenotaph.open(live, auto_purge="sync") as store:
        request = store.forget_subject(A)
        assert request.status().state == "verified"
        report = store.rotate_keys()
        assert report.destroyed_epochs == (1,)
        assert report.retained_epochs == ()
        assert report.rewrapped > 0
        assert request.status().horizon is not None
        assert_gone(store, a)
        assert_readable(store, b)
    ring_text = (live / "keyring" / "keyring.json").read_text()
    ring = json.loads(ring_text)
    assert "1" not in ring["epochs"] and 1 in ring["destroyed"]
    assert old_kek not in ring_text, "the destroyed KEK is still in the live keyring file"
    assert _epochs_in(live / DB) == {report.new_epoch}

    # live database + OLD keyring copy: nothing of a (nor of b) can be decrypted
    live_copy = _copy(live, tmp_path / "live-copy", keyring=False)
    with cenotaph.open(
        live_copy, key_provider=cenotaph.LocalKeyring(_copy(old_keyring, tmp_path / "k1"))
    ) as s:
        _undecryptable(s, a)
        _undecryptable(s, b)

    # OLD database + live keyring, with the ledger removed so no forget is replayed: the epoch that
    # wrapped every key of the old database is destroyed, so nothing decrypts
    no_ledger = _copy(live / "keyring", tmp_path / "k2")
    (no_ledger / "ledger.jsonl").unlink()
    with cenotaph.open(_copy(old_db, tmp_path / "old-1"), key_provider=cenotaph.LocalKeyring(no_ledger)) as s:
        assert s.erasures() == []
        _undecryptable(s, a)
        _undecryptable(s, b)

    # OLD database + live keyring as it is: the ledger replays the forget too
    with cenotaph.open(
        _copy(old_db, tmp_path / "old-2"),
        key_provider=cenotaph.LocalKeyring(_copy(live / "keyring", tmp_path / "k3")),
    ) as s:
        assert request.id in {r.id for r in s.erasures()}
        _undecryptable(s, a)
        assert_write_refused(s, a)

    # S8, the documented root-of-trust limit: the OLD database and the OLD keyring, copied together
    # before the forget, still decrypt what was forgotten. Keep the keyring outside the data
    # directory (CENOTAPH_KEYRING / another KeyProvider) so that copying one is not copying both.
    with cenotaph.open(
        _copy(old_db, tmp_path / "old-3"),
        key_provider=cenotaph.LocalKeyring(_copy(old_keyring, tmp_path / "k4")),
    ) as s:
        assert_readable(s, a)
        assert_readable(s, b)


# -- audit -----------------------------------------------------------------------------------------
@pytest.fixture
def audited(tmp_path: Path) -> Path:
    """A closed data directory with a few audited operations, whose chain verifies."""
    live = tmp_path / "data"
    with cenotaph.open(live, auto_purge="sync") as store:
        populate(store, A, "A", short=3, long=0)
        populate(store, B, "B", short=3, long=0)
        request = store.forget_subject(A)
        store.attest(request.id)
        store.rotate_keys()
        result = store.verify_audit()
        assert result["entries"] >= 5
        assert result["anchored_seq"] == result["entries"], "the last entry is anchored in the ledger"
    return live


def _entries(db: Path) -> list[tuple[int, dict[str, Any]]]:
    return [
        (int(seq), json.loads(entry))
        for seq, entry in sql(db, "SELECT seq, entry FROM audit ORDER BY seq", immutable=True)
    ]


def test_an_untouched_audit_chain_verifies_after_reopening(audited: Path) -> None:
    with cenotaph.open(audited) as store:
        result = store.verify_audit()
    assert result["entries"] == len(_entries(audited / DB))


def test_editing_an_audit_row_is_detected(audited: Path) -> None:
    entries = _entries(audited / DB)
    seq, entry = entries[len(entries) // 2]
    entry["at"] = "2000-01-01T00:00:00Z"
    write_sql(
        audited / DB, [("UPDATE audit SET entry=? WHERE seq=?", (json.dumps(entry, sort_keys=True), seq))]
    )
    with cenotaph.open(audited) as store, pytest.raises(StorageError):
        store.verify_audit()


def test_rehashing_the_whole_chain_after_an_edit_is_detected_by_the_ledger_anchor(audited: Path) -> None:
    from cenotaph.audit.chain import GENESIS, chain_entry, entry_to_dict

    entries = _entries(audited / DB)
    rewritten = []
    head = GENESIS
    for n, (seq, entry) in enumerate(entries):
        fields = dict(entry["fields"])
        if n == 0:
            fields["records"] = 0  # the edit
        new = chain_entry(head, seq, str(entry["at"]), str(entry["event"]), fields)
        head = new.head
        rewritten.append(
            ("UPDATE audit SET entry=? WHERE seq=?", (json.dumps(entry_to_dict(new), sort_keys=True), seq))
        )
    write_sql(audited / DB, rewritten)
    with cenotaph.open(audited) as store, pytest.raises(StorageError):
        store.verify_audit()


def test_deleting_the_last_audit_row_is_detected(audited: Path) -> None:
    write_sql(audited / DB, [("DELETE FROM audit WHERE seq = (SELECT max(seq) FROM audit)", ())])
    with cenotaph.open(audited) as store, pytest.raises(StorageError, match="truncated"):
        store.verify_audit()


def test_deleting_the_last_audit_row_stays_detected_after_later_operations(audited: Path) -> None:
    write_sql(audited / DB, [("DELETE FROM audit WHERE seq = (SELECT max(seq) FROM audit)", ())])
    with cenotaph.open(audited) as store:
        with pytest.raises(StorageError):
            store.verify_audit()
        for n in range(2):  # ordinary work continues on the truncated log
            store.write(f"tenant:t/user:z{n}", "k", "v")
            store.forget(f"tenant:t/user:z{n}", "k", mode="operational")
            with pytest.raises(StorageError):
                store.verify_audit()


class _HeldRegistry(cenotaph.LocalKeyring):
    """A keyring whose first register_backup (a remote KMS call, say) is held, once it has
    registered, until the test lets it go: a rotation lands between it and the backup's copy."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.entered = threading.Event()  # the first register_backup has begun
        self.release = threading.Event()

    def register_backup(self, backup_id: str, epochs: list[int]) -> None:
        super().register_backup(backup_id, epochs)
        if not self.entered.is_set():  # registered, not yet returned: the backup's copy is next
            self.entered.set()
            assert self.release.wait(timeout=60), "the test never let register_backup go"


def test_a_backup_racing_a_rotation_registers_the_epochs_its_copy_needs(tmp_path: Path) -> None:
    """S5: the backup's copy may hold keys wrapped under an epoch a concurrent rotation created;
    it must be registered, or the next rotation destroys it and the backup is lost."""
    provider = _HeldRegistry(tmp_path / "keyring")
    with cenotaph.open(tmp_path / "data", key_provider=provider) as store:
        for i in range(20):
            store.write("tenant:t/user:u", f"k{i}", f"value {i}")
        rotated: list[cenotaph.RotationReport] = []

        def rotate() -> None:
            try:
                assert provider.entered.wait(timeout=60), "backup() never registered its epochs"
                rotated.append(store.rotate_keys())  # inside backup()'s first register_backup
            finally:
                provider.release.set()

        racer = threading.Thread(target=rotate)
        racer.start()
        info = store.backup(tmp_path / "bk")
        racer.join()
        assert rotated and rotated[0].new_epoch in info.epochs  # the copy holds the new epoch's keys
        assert store.backups()[info.id] == list(info.epochs)
        store.rotate_keys()  # must keep every epoch the backup's copy uses
        assert set(info.epochs) <= set(provider.live_epochs())
    with cenotaph.restore(tmp_path / "bk", tmp_path / "restored", key_provider=provider) as restored:
        values = sorted(str(r.value) for r in restored.list("tenant:t/user:u"))
        assert values == sorted(f"value {i}" for i in range(20))


def test_the_keyring_never_destroys_an_epoch_a_registered_backup_needs(tmp_path: Path) -> None:
    """Deciding and destroying is one step under the keyring's lock, so a rotation that read the
    registry before a backup registered cannot destroy what that backup now needs."""
    keyring = cenotaph.LocalKeyring(tmp_path / "keyring")
    old = keyring.current_epoch()
    keyring.new_epoch()
    keyring.register_backup("bk_x", [old])
    assert keyring.destroy_epoch(old) is False
    assert old in keyring.live_epochs()
    keyring.release_backup("bk_x")
    assert keyring.destroy_epoch(old) is True
    assert old not in keyring.live_epochs()
