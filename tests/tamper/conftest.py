"""The attacker of the tamper suite: someone who can edit ``cenotaph.db`` (or a backup's copy of
it) with the stdlib ``sqlite3`` module, but can neither read nor write the keyring, which lives
outside the data directory.

Every edit runs while no store has the file open (``Attacker.edit`` closes the store first), in
this process: with no connection of the store open there are no POSIX locks to lose.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import cenotaph
from cenotaph.backends.sqlite.backend import DB_NAME
from cenotaph.cli.main import cli
from cenotaph.crypto.provider import KEYRING_ENV, LocalKeyring
from cenotaph.store import Store

SCOPE = "tenant:acme/user:alice/session:s1"
OTHER = "tenant:acme/user:bob/session:s9"


@dataclass
class Setup:
    data: Path
    keyring: Path

    def provider(self) -> LocalKeyring:
        return LocalKeyring(self.keyring)

    def open(self, **options: Any) -> Store:
        # forgets purge before they return, as every store did when these tests were written; and
        # no background purge starts at open, which would remove rows an edit put back before the
        # checks could name the edit
        options.setdefault("auto_purge", "sync")
        return cenotaph.open(self.data, key_provider=self.provider(), **options)

    @property
    def db(self) -> Path:
        return self.data / DB_NAME

    def cli(self, *args: str) -> Result:
        env = {KEYRING_ENV: str(self.keyring), "CENOTAPH_MASTER_KEY": None}
        return CliRunner().invoke(cli, [*args, "--data", str(self.data)], env=env, catch_exceptions=False)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    """A data directory and, apart from it, its keyring (what the README tells production to do)."""
    return Setup(tmp_path / "data", tmp_path / "elsewhere" / "keyring")


def edit(db: Path, statements: Sequence[tuple[str, Sequence[Any]] | str]) -> None:
    """Run ``statements`` on a closed database file, as its attacker would (stdlib sqlite3)."""
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        for statement in statements:
            sql, args = (statement, ()) if isinstance(statement, str) else statement
            conn.execute(sql, args)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def rows(db: Path, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql, args).fetchall()


@contextlib.contextmanager
def reopened(setup: Setup, **options: Any) -> Iterator[Store]:
    store = setup.open(**options)
    try:
        yield store
    finally:
        store.close()
