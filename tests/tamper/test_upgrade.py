"""A store written before the ledger decided tombstones, lifts and tokens (schema 5, records
sealed with their id alone as AAD) opens, keeps every promise it made, and is protected from then
on. The fixture was written by that code (``fixtures/schema5``: data directory, keyring and the
unused token it issued)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.kit.checks import present

from cenotaph.errors import ForgottenError, StorageError

from .conftest import Setup, edit, reopened, rows

FIXTURE = Path(__file__).parent / "fixtures" / "schema5"
S1 = "tenant:t/user:u/session:s1"
S2 = "tenant:t/user:u/session:s2"


@pytest.fixture
def old(tmp_path: Path) -> Setup:
    setup = Setup(tmp_path / "data", tmp_path / "elsewhere" / "keyring")
    shutil.copytree(FIXTURE / "data", setup.data)
    shutil.copytree(FIXTURE / "keyring", setup.keyring)
    setup.keyring.chmod(0o700)
    for file in setup.keyring.iterdir():
        file.chmod(0o600)
    return setup


def test_an_older_store_opens_and_keeps_its_records_and_tokens(old: Setup) -> None:
    token = json.loads((FIXTURE / "tokens.json").read_text())["unused_scope_token"]
    with reopened(old) as store:
        assert present(store.read(S1, "kept")).value == "legacy value"  # sealed with the id alone
        assert present(store.read(S1, "gone")).value == "rewritten"  # written with a token, lifted
        store.write(S1, "gone", "again")  # the lift carried into the ledger still holds
        with pytest.raises(ForgottenError):
            store.write(S2, "k", "back")  # the operational forget of s2 still dominates
        assert store.write(S2, "k", "back", reauthorization=token).value == "back"  # issued before
        store.verify_audit()
    kinds = [json.loads(line)["kind"] for line in (old.keyring / "ledger.jsonl").read_text().splitlines()]
    assert kinds.count("cache-import") == 1


def test_the_import_happens_once_so_a_lift_planted_later_is_caught(old: Setup) -> None:
    with reopened(old) as store:
        store.verify_audit()  # the first open imported the old lifts and tokens
    ((target, version),) = rows(old.db, "SELECT target, version FROM tombstones WHERE kind='scope'")
    edit(old.db, [("INSERT INTO lifts VALUES (?, ?)", (target, version + 1000))])
    with reopened(old) as store:
        with pytest.raises(ForgottenError):
            store.write(S2, "k", "back")
        with pytest.raises(StorageError, match="lift"):
            store.verify_audit()
