"""The keyring's files as an operator handles them: a lost keyring.json is reported, never
re-created; ``cenotaph keyring seal|move|export|import`` are crash-safe and refuse the attacks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import cenotaph
from cenotaph.crypto.provider import KEYRING_ENV, MASTER_KEY_ENV, LocalKeyring
from cenotaph.errors import KeyProviderError
from test_cli import assert_one_line_error, ok_json, run

USER = "tenant:acme/user:alice"
MASTER = "11" * 32
OTHER_MASTER = "22" * 32


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CENOTAPH_DATA", KEYRING_ENV, MASTER_KEY_ENV, "CENOTAPH_DEBUG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    with cenotaph.open(directory) as store:
        store.write(USER, "note", "cardiology appointment on Tuesday")
    return directory


# -- a lost keyring.json ------------------------------------------------------------------------
def test_a_missing_keyring_file_is_reported_not_recreated(data: Path) -> None:
    (data / "keyring" / "keyring.json").unlink()
    with pytest.raises(KeyProviderError, match=r"no keyring\.json in .*keyring"):
        cenotaph.open(data)
    assert not (data / "keyring" / "keyring.json").exists()
    line = assert_one_line_error(run("read", USER, "note", "--data", str(data)), 1)
    assert "keyring.json" in line and "backup" in line
    assert not (data / "keyring" / "keyring.json").exists()


def test_a_keyring_whose_file_is_gone_but_whose_ledger_remains_refuses_to_start_over(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    with cenotaph.open(tmp_path / "data", key_provider=LocalKeyring(keys)) as store:
        store.write(USER, "k", 1)
    (keys / "keyring.json").unlink()
    with pytest.raises(KeyProviderError, match="was in use"):
        LocalKeyring(keys)  # e.g. the API given a keyring directory directly
    assert not (keys / "keyring.json").exists()


def test_a_new_directory_still_gets_a_new_keyring(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "fresh") as store:
        store.write(USER, "k", 1)
    assert (tmp_path / "fresh" / "keyring" / "keyring.json").is_file()
    assert ok_json("init", "--data", str(tmp_path / "other"))["created"] is True
