"""The key provider as an attack surface: sealed keyrings, wrong keys, foreign keyrings, tampering."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import cenotaph
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
    with cenotaph.open(tmp_path / "a") as a, cenotaph.open(tmp_path / "b") as b:
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
