"""Store.key_epochs(): every live KEK epoch and what holds it back."""

from __future__ import annotations

from pathlib import Path

import pytest

import cenotaph


@pytest.fixture(autouse=True)
def _default_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)


def test_what_holds_each_epoch(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "data", auto_purge="off") as store:
        store.write("tenant:a/user:u", "k", "v")
        [(first, holds)] = store.key_epochs().items()
        assert holds == {"current": True, "wraps_live_keys": True, "backups": [], "pending_erasures": []}

        backup = store.backup(tmp_path / "backup")
        request = store.forget("tenant:a/user:u", "k")
        holds = store.key_epochs()[first]
        assert holds["backups"] == [backup.id] and holds["pending_erasures"] == [request.id]

        assert request.wait(30).state == "verified"
        assert store.key_epochs()[first]["pending_erasures"] == []  # verified: its probes are gone

        report = store.rotate_keys()
        epochs = store.key_epochs()
        assert first in epochs and first in report.retained_epochs  # the backup still needs it
        assert epochs[first]["current"] is False and epochs[first]["wraps_live_keys"] is False
        assert epochs[report.new_epoch]["current"] is True

        store.release_backup(backup.id)
        store.rotate_keys()
        assert first not in store.key_epochs()
