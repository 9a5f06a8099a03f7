"""A store opened by a relative path scans the files it really owns (regression)."""

from __future__ import annotations

from pathlib import Path

import pytest

import cenotaph


def test_relative_data_directory_is_scanned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    with cenotaph.open("relative-data", auto_purge="sync") as store:
        store.write("tenant:t/user:u", "note", "a value long enough to be probed")
        request = store.forget("tenant:t/user:u", "note")
        status = request.status()
        assert status.state == "verified"
        scan = status.layers["scan"].evidence
        assert scan["files"] >= 3 and scan["bytes"] > 0 and scan["probes"] > 0
