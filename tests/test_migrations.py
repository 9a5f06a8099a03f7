"""Schema migrations run as numbered data, on a real store left at an older schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import cenotaph
from cenotaph.backends.sqlite.backend import DB_NAME
from cenotaph.backends.sqlite.schema import MIGRATIONS, statements
from cenotaph.errors import ForgottenError, StorageError

U = "tenant:t/user:u"
S1 = "tenant:t/user:u/session:s1"


def test_a_semicolon_in_a_comment_does_not_cut_a_statement() -> None:
    script = """
        -- a comment; with a semicolon
        CREATE TABLE a (x INTEGER);
          -- another; one
        CREATE TABLE b (y TEXT DEFAULT 'z')
    """
    assert statements(script) == ["CREATE TABLE a (x INTEGER)", "CREATE TABLE b (y TEXT DEFAULT 'z')"]


def test_migrations_are_numbered_in_order_and_each_holds_a_statement() -> None:
    numbers = [number for number, _ in MIGRATIONS]
    assert numbers == list(range(1, len(MIGRATIONS) + 1))
    for number, script in MIGRATIONS:
        for statement in statements(script):
            assert sqlite3.complete_statement(statement + ";"), (number, statement)


def test_a_schema_3_store_migrates_and_its_outstanding_subject_tokens_keep_their_meaning(
    tmp_path: Path,
) -> None:
    """A store from before tokens named a scope: its unused subject token still lifts the
    subject's tombstone anywhere (what it promised when issued), and nothing else."""
    store = cenotaph.open(tmp_path)
    store.write(S1, "k", 1)
    store.forget(S1, "k")
    store.forget_subject(U)
    legacy = "crt_" + "legacy-token-issued-by-schema-3".ljust(43, "0")  # the format tokens always had
    digest = store._tokens.reauth(legacy)
    subject = store._tokens.subject(U)
    store.close()

    with sqlite3.connect(tmp_path / DB_NAME) as db:  # back to schema 3, one legacy token issued
        clock = db.execute("SELECT value FROM meta WHERE name='clock'").fetchone()[0]
        db.execute("ALTER TABLE reauth_tokens DROP COLUMN subject")  # undo migration 4
        db.execute("DROP TABLE probe_keys")  # and 5
        db.execute(
            "INSERT INTO reauth_tokens VALUES (?, 'subject', ?, ?, NULL)", (digest, subject, clock + 1)
        )
        db.execute("UPDATE meta SET value=? WHERE name='clock'", (clock + 1,))
        db.execute("PRAGMA user_version=3")
    db.close()
    _as_left_by_older_code(tmp_path / "keyring")

    store = cenotaph.open(tmp_path)
    try:
        with sqlite3.connect(tmp_path / DB_NAME) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
            assert "subject" in [row[1] for row in db.execute("PRAGMA table_info(reauth_tokens)")]
        db.close()
        with pytest.raises(ForgottenError):  # it lifts no key tombstone: (S1, k) stays forgotten
            store.write(S1, "k", 2, reauthorization=legacy)
        store.write(U, "elsewhere", 3, reauthorization=legacy)  # unbound: any scope of the subject
        store.write(S1, "other", 4)  # the subject's lift is recorded
        assert store.read(S1, "other") is not None
        with pytest.raises(ForgottenError):
            store.write(S1, "k", 5)
    finally:
        store.close()


def _as_left_by_older_code(keyring: Path) -> None:
    """Code from before the ledger decided lifts and tokens never recorded their import."""
    ledger = keyring / "ledger.jsonl"
    lines = ledger.read_text().splitlines(keepends=True)
    ledger.write_text("".join(line for line in lines if '"cache-import"' not in line))


def test_a_store_from_a_newer_cenotaph_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    store = cenotaph.open(tmp_path)
    store.write(U, "k", 1)
    store.close()
    newer = len(MIGRATIONS) + 1
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        db.execute(f"PRAGMA user_version={newer}")
    db.close()

    with pytest.raises(StorageError, match=f"schema {newer}, newer than this cenotaph knows"):
        cenotaph.open(tmp_path)
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == newer
    db.close()
    with sqlite3.connect(tmp_path / DB_NAME) as db:  # once the newer code's mark is gone, it opens
        db.execute(f"PRAGMA user_version={len(MIGRATIONS)}")
    db.close()
    store = cenotaph.open(tmp_path)
    try:
        assert store.read(U, "k") is not None
    finally:
        store.close()
