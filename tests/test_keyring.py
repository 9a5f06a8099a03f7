"""The key provider as an attack surface: sealed keyrings, wrong keys, foreign keyrings, tampering."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import cenotaph
from cenotaph.crypto.ledger_hint import LedgerHint, begin_append
from cenotaph.crypto.provider import KEYRING_ENV, MASTER_KEY_ENV, LocalKeyring
from cenotaph.errors import KeyProviderError

SCOPE = "tenant:t/user:u"
MASTER = "11" * 32


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYRING_ENV, raising=False)
    monkeypatch.delenv(MASTER_KEY_ENV, raising=False)


def test_keyring_is_private_and_holds_no_plain_secret_when_sealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, MASTER)
    with cenotaph.open(tmp_path / "d") as store:
        store.write(SCOPE, "k", "value")
    keyring = tmp_path / "d" / "keyring"
    assert stat.S_IMODE(keyring.stat().st_mode) == 0o700
    doc = json.loads((keyring / "keyring.json").read_text())
    assert set(doc) == {"format", "sealed"}  # no epoch, secret or signing key in the clear
    for name in os.listdir(keyring):
        assert stat.S_IMODE((keyring / name).stat().st_mode) & 0o077 == 0, name


def test_a_sealed_keyring_needs_the_right_master_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, MASTER)
    with cenotaph.open(tmp_path / "d") as store:
        store.write(SCOPE, "k", "value")
    monkeypatch.delenv(MASTER_KEY_ENV)
    with pytest.raises(KeyProviderError, match=MASTER_KEY_ENV):
        cenotaph.open(tmp_path / "d")
    monkeypatch.setenv(MASTER_KEY_ENV, "22" * 32)
    with pytest.raises(KeyProviderError, match="does not open"):
        cenotaph.open(tmp_path / "d")
    monkeypatch.setenv(MASTER_KEY_ENV, MASTER)
    with cenotaph.open(tmp_path / "d") as store:
        record = store.read(SCOPE, "k")
        assert record is not None and record.value == "value"


def test_a_malformed_master_key_is_refused_without_echoing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, "not-hex-secret-material")
    with pytest.raises(KeyProviderError) as caught:
        cenotaph.open(tmp_path / "d")
    assert "not-hex-secret-material" not in str(caught.value)


def test_a_tampered_sealed_keyring_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, MASTER)
    cenotaph.open(tmp_path / "d").close()
    path = tmp_path / "d" / "keyring" / "keyring.json"
    doc = json.loads(path.read_text())
    sealed = bytearray.fromhex(doc["sealed"])
    sealed[20] ^= 1
    doc["sealed"] = sealed.hex()
    path.write_text(json.dumps(doc))
    with pytest.raises(KeyProviderError):
        cenotaph.open(tmp_path / "d")


def test_a_foreign_keyring_is_refused_not_silently_used(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "d") as store:
        store.write(SCOPE, "k", "value")
    with pytest.raises(KeyProviderError, match="not the one"):
        cenotaph.open(tmp_path / "d", key_provider=LocalKeyring(tmp_path / "other-keyring"))


def test_a_missing_keyring_for_an_existing_store_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cenotaph.open(tmp_path / "d") as store:
        store.write(SCOPE, "k", "value")
    monkeypatch.setenv(KEYRING_ENV, str(tmp_path / "typo-keyring"))
    with pytest.raises(KeyProviderError, match=KEYRING_ENV):
        cenotaph.open(tmp_path / "d")
    assert not (tmp_path / "typo-keyring").exists()  # nothing created on the way


def test_keyring_outside_the_data_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEYRING_ENV, str(tmp_path / "secure" / "keyring"))
    with cenotaph.open(tmp_path / "d") as store:
        store.write(SCOPE, "k", "value")
    assert not (tmp_path / "d" / "keyring").exists()
    assert (tmp_path / "secure" / "keyring" / "keyring.json").exists()
    # a copied data directory alone decrypts nothing: its keyring is elsewhere
    monkeypatch.delenv(KEYRING_ENV)
    with pytest.raises(KeyProviderError):
        cenotaph.open(tmp_path / "d")


def test_two_stores_never_share_tokens_or_signing_keys(tmp_path: Path) -> None:
    with (
        cenotaph.open(tmp_path / "a", auto_purge="sync") as a,
        cenotaph.open(tmp_path / "b", auto_purge="sync") as b,
    ):
        assert a.public_key != b.public_key
        ra = a.forget(SCOPE, "k")
        rb = b.forget(SCOPE, "k")
        ca, cb = a.attest(ra.id), b.attest(rb.id)
        assert ca["target"] != cb["target"]
        with pytest.raises(cenotaph.CertificateError):
            cenotaph.verify_certificate(ca.to_json(), b.public_key)


def test_a_short_ledger_write_is_completed_not_torn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """os.write may write fewer bytes than asked (a nearly full disk); the ledger append must
    write the rest rather than leave a torn line that ledger() then skips."""
    keyring = cenotaph.LocalKeyring(tmp_path / "keyring")
    real_write = os.write

    def short_write(fd: int, data: bytes) -> int:
        return real_write(fd, bytes(data[: max(1, len(data) // 3)]))

    monkeypatch.setattr(os, "write", short_write)
    keyring.append_ledger({"kind": "test", "payload": "x" * 300})
    monkeypatch.undo()
    assert keyring.ledger()[-1] == {"kind": "test", "payload": "x" * 300}


# -- found by the session-4 security review ---------------------------------------------------
def test_an_empty_master_key_is_refused_not_read_as_unsealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`CENOTAPH_MASTER_KEY=$(cat missing-file)` leaves it empty: that must not create an
    unsealed keyring."""
    monkeypatch.setenv(MASTER_KEY_ENV, "")
    with pytest.raises(KeyProviderError, match="set but empty"):
        cenotaph.open(tmp_path / "d")
    assert not (tmp_path / "d" / "keyring" / "keyring.json").exists()


@pytest.mark.parametrize(
    "body",
    [b"[]", b"null", b'"x"', b"{}", b'{"erasure_secret": "zz"}', "bad-shape"],
    ids=["list", "null", "string", "empty object", "non-hex secret", "wrong types"],
)
def test_a_keyring_file_of_the_wrong_shape_is_reported_as_corrupt(tmp_path: Path, body: bytes | str) -> None:
    cenotaph.open(tmp_path / "d").close()
    path = tmp_path / "d" / "keyring" / "keyring.json"
    if body == "bad-shape":
        doc = json.loads(path.read_text())
        doc["epochs"] = ["not", "a", "dict"]
        body = json.dumps(doc).encode()
    assert isinstance(body, bytes)
    path.write_bytes(body)
    with pytest.raises(KeyProviderError, match="corrupt"):
        cenotaph.open(tmp_path / "d")


def test_a_staged_keyring_copy_left_by_a_crash_is_removed_at_open(tmp_path: Path) -> None:
    """A save that died between writing its staged copy and renaming it left the old epochs in
    a file of their own; a later rotation would 'destroy' epochs that copy still holds."""
    cenotaph.open(tmp_path / "d").close()
    keyring = tmp_path / "d" / "keyring"
    stale = keyring / ".keyring.json.4242.tmp"
    stale.write_bytes((keyring / "keyring.json").read_bytes())
    cenotaph.open(tmp_path / "d").close()
    assert not stale.exists()


def test_a_keyring_directory_holding_other_files_is_refused_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    (shared / "notes.txt").write_text("someone else's file")
    monkeypatch.setenv(KEYRING_ENV, str(shared))
    with pytest.raises(KeyProviderError, match="holds other files"):
        cenotaph.open(tmp_path / "d")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert sorted(os.listdir(shared)) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(KEYRING_ENV, str(empty))
    cenotaph.open(tmp_path / "d").close()  # a new or empty directory is the keyring's own
    assert stat.S_IMODE(empty.stat().st_mode) == 0o700


def test_a_staged_write_never_follows_a_planted_link(tmp_path: Path) -> None:
    from cenotaph.durable import temp_name, write_atomically

    victim = tmp_path / "victim"
    victim.write_text("untouched")
    target = tmp_path / "file.json"
    temp_name(target, os.getpid()).symlink_to(victim)
    write_atomically(target, b"new")
    assert victim.read_text() == "untouched"
    assert target.read_bytes() == b"new" and not target.is_symlink()


def test_a_keyring_saved_by_another_process_during_a_load_is_picked_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load reads and stamps the same file. Stamping by path after reading let a save in
    between pair the new file's stamp with the old contents, which were then never reloaded:
    this process went on wrapping keys under an epoch the other one had destroyed."""

    location = tmp_path / "keyring"
    mine, other = LocalKeyring(location), LocalKeyring(location)
    real_fstat = os.fstat
    raced: list[int] = []

    def fstat_after_a_rotation(fd: int) -> os.stat_result:
        if not raced:  # once, and not again from inside the rotation's own file handling
            raced.append(0)
            raced[0] = other.new_epoch()
            other.destroy_epoch(1)
        return real_fstat(fd)

    (location / "keyring.json").touch()  # a new stamp: mine reloads at its next call
    monkeypatch.setattr(os, "fstat", fstat_after_a_rotation)  # provider.os is this module
    assert mine.current_epoch() == 1  # this load read the file as it was before the rotation
    monkeypatch.setattr(os, "fstat", real_fstat)
    assert raced == [2]
    assert mine.current_epoch() == 2 and mine.live_epochs() == [2]


def test_a_rotation_in_another_process_removes_the_destroyed_keks_from_this_ones_memory(
    tmp_path: Path,
) -> None:
    reader, rotator = cenotaph.open(tmp_path / "d"), cenotaph.open(tmp_path / "d", auto_purge="sync")
    try:
        rotator.write(SCOPE, "k", "v")
        assert reader.read(SCOPE, "k") is not None  # caches the KEK of epoch 1
        assert 1 in reader._keys._sealers
        rotator.forget(SCOPE, "k")
        report = rotator.rotate_keys()
        assert report.destroyed_epochs == (1,)
        reader.read(SCOPE, "other")  # any call: it notices the rotation's last commit
        assert set(reader._keys._sealers) <= {2}
        assert reader._provider.live_epochs() == [2]
    finally:
        reader.close()
        rotator.close()


@pytest.mark.parametrize("leftover", [".lock", ".keyring.json.4242.tmp", "ledger.jsonl"])
def test_a_keyring_directory_holding_only_its_own_files_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leftover: str
) -> None:
    """What another process initialising the same keyring, or a crash during init, leaves behind
    is the keyring's own, not someone else's files."""
    keyring = tmp_path / "keyring"
    keyring.mkdir(mode=0o700)
    (keyring / leftover).write_bytes(b"")
    monkeypatch.setenv(KEYRING_ENV, str(keyring))
    with cenotaph.open(tmp_path / "d") as store:
        store.write(SCOPE, "k", "v")
    assert (keyring / "keyring.json").exists()


def test_the_ledger_hint_moves_with_every_append_and_a_dead_append_keeps_it_unsettled(tmp_path: Path) -> None:
    """Another instance (another process's view) sees each append in its hint; an append that
    died between its counters leaves the hint unsettled (every check the full one) until the
    next append completes."""
    ring, other = LocalKeyring(tmp_path / "keys"), LocalKeyring(tmp_path / "keys")
    before = other.ledger_hint()
    assert before is not None and LedgerHint.settled(before)
    ring.append_ledger({"entry": 1})
    after = other.ledger_hint()
    assert after is not None and after != before and LedgerHint.settled(after)
    fd = os.open(tmp_path / "keys" / ".lock", os.O_RDWR)
    try:
        begin_append(fd)  # a process killed right after it began its append
    finally:
        os.close(fd)
    dead = other.ledger_hint()
    assert dead is not None and not LedgerHint.settled(dead)
    ring.append_ledger({"entry": 2})
    done = other.ledger_hint()
    assert done is not None and LedgerHint.settled(done) and done != after
    assert [e["entry"] for e in other.ledger()] == [1, 2]
