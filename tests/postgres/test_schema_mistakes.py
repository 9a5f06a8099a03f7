"""PostgreSQL configuration mistakes read as what they are, never as tampering, and leave nothing.

A keyring that already belongs to a store, opened on a URL naming another schema (or none, which
is schema ``cenotaph``), is told that schema holds no store: nothing is created there. A schema
that holds a store but lost its audit chain id is still tampering. A first open refused half-way
drops the schema (or tables) it made. A schema name is a lower-case unquoted identifier. An
unreachable replica keeps a purged request ``shredded`` with the replica named (never its
password). ``cenotaph.open(url)`` finds its keyring through ``CENOTAPH_KEYRING``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import cenotaph
from cenotaph.errors import InvalidValueError, KeyProviderError, StorageError

from ._cluster import _free_port
from .conftest import drop_schema

SCOPE = "tenant:acme/user:alice"
SECRET = "hunter2-never-shown"


def _url(dsn: str, schema: str | None = None) -> str:
    return dsn if schema is None else f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


def _tables(dsn: str, schema: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
    return sorted(str(r[0]) for r in rows)


def _schema_exists(dsn: str, schema: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


@pytest.fixture
def used_keyring(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> tuple[cenotaph.LocalKeyring, str]:
    """A keyring whose store (in its own schema) has history: a write and a verified forget."""
    keyring = cenotaph.LocalKeyring(tmp_path / "keyring")
    schema = schemas()
    with cenotaph.open(_url(pg_dsn, schema), key_provider=keyring, auto_purge="off") as store:
        store.write(SCOPE, "diet", "vegetarian")
        request = store.forget(SCOPE, "diet")
        store.purge()
        assert request.status().state == "verified"
    return keyring, schema


# -- a keyring with history against a schema holding no store ----------------------------------
def test_a_wrong_schema_is_named_as_holding_no_store_and_nothing_is_created(
    pg_dsn: str, used_keyring: tuple[cenotaph.LocalKeyring, str], schemas: Callable[[], str]
) -> None:
    keyring, _ = used_keyring
    wrong = schemas()
    with pytest.raises(InvalidValueError) as info:
        cenotaph.open(_url(pg_dsn, wrong), key_provider=keyring)
    message = str(info.value)
    assert f"schema {wrong!r}" in message and "holds no cenotaph store" in message
    assert "?schema=" in message and "'cenotaph'" in message  # the default, named
    assert "altered" not in message and "tamper" not in message
    assert not _schema_exists(pg_dsn, wrong), "a refused open made the schema"


def test_a_url_without_schema_names_the_default_one_and_creates_nothing(
    pg_dsn: str, used_keyring: tuple[cenotaph.LocalKeyring, str]
) -> None:
    keyring, _ = used_keyring
    if _schema_exists(pg_dsn, "cenotaph"):
        pytest.skip("the shared server already has a schema 'cenotaph'")
    with pytest.raises(InvalidValueError, match=r"schema 'cenotaph' .* holds no cenotaph store") as info:
        cenotaph.open(pg_dsn, key_provider=keyring)
    assert "altered" not in str(info.value)
    assert not _schema_exists(pg_dsn, "cenotaph")


def test_a_store_that_lost_its_chain_id_is_still_tampering(
    pg_dsn: str, used_keyring: tuple[cenotaph.LocalKeyring, str]
) -> None:
    keyring, schema = used_keyring
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE name = 'audit_chain'").format(sql.Identifier(schema, "meta"))
        )
    with pytest.raises(StorageError, match=r"audit chain id is missing.*altered or replaced"):
        cenotaph.open(_url(pg_dsn, schema), key_provider=keyring)
    assert _tables(pg_dsn, schema), "the store's tables are evidence: never dropped"


def test_the_right_schema_still_opens(pg_dsn: str, used_keyring: tuple[cenotaph.LocalKeyring, str]) -> None:
    keyring, schema = used_keyring
    with cenotaph.open(_url(pg_dsn, schema), key_provider=keyring) as store:
        assert store.read(SCOPE, "diet") is None


# -- a refused first open leaves nothing ---------------------------------------------------------
class _LedgerDown(cenotaph.LocalKeyring):
    """A key provider whose ledger refuses every append (a KMS that went away)."""

    def append_ledger(self, entry: Mapping[str, Any]) -> None:
        raise KeyProviderError("the ledger is unavailable")


def test_a_refused_first_open_drops_the_schema_it_made(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    schema = schemas()
    with pytest.raises(KeyProviderError, match="ledger is unavailable"):
        cenotaph.open(_url(pg_dsn, schema), key_provider=_LedgerDown(tmp_path / "keyring"))
    assert not _schema_exists(pg_dsn, schema)


def test_a_refused_first_open_in_an_existing_schema_drops_only_its_tables(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    schema = schemas()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # made by a DBA, with a table of theirs
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(schema, "theirs")))
    with pytest.raises(KeyProviderError):
        cenotaph.open(_url(pg_dsn, schema), key_provider=_LedgerDown(tmp_path / "keyring"))
    assert _tables(pg_dsn, schema) == ["theirs"]
    with psycopg.connect(pg_dsn) as conn:  # the trigger function went with the tables
        functions = conn.execute(
            "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE nspname = %s",
            (schema,),
        ).fetchall()
    assert functions == []


def test_create_false_refuses_a_schema_without_a_store(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    schema = schemas()
    with pytest.raises(InvalidValueError, match=r"does not exist.*create=True"):
        cenotaph.open(_url(pg_dsn, schema), key_provider=cenotaph.LocalKeyring(tmp_path / "k"), create=False)
    assert not _schema_exists(pg_dsn, schema)


# -- schema names --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    ["Bad-Name;drop", "Memories", "1st", "a$b", "sp ace", "pg_mine", "x" * 64, "é"],
)
def test_a_schema_name_must_be_a_lower_case_identifier(tmp_path: Path, pg_dsn: str, name: str) -> None:
    with pytest.raises(InvalidValueError, match="schema") as info:
        cenotaph.open(_url(pg_dsn, name), key_provider=cenotaph.LocalKeyring(tmp_path / "k"))
    assert "lower-case" in str(info.value) or "pg_" in str(info.value) or "63 bytes" in str(info.value)
    assert not _schema_exists(pg_dsn, name)


def test_an_empty_or_repeated_schema_parameter_is_refused(tmp_path: Path, pg_dsn: str) -> None:
    provider = cenotaph.LocalKeyring(tmp_path / "k")
    with pytest.raises(InvalidValueError, match="non-empty"):
        cenotaph.open(_url(pg_dsn, ""), key_provider=provider)  # never silently the default
    with pytest.raises(InvalidValueError, match="more than once"):
        cenotaph.open(_url(pg_dsn, "a_one") + "&schema=a_two", key_provider=provider)


def test_a_lower_case_name_with_underscores_and_digits_is_a_schema(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    schema = "_" + schemas() + "_2"
    try:
        with cenotaph.open(_url(pg_dsn, schema), key_provider=cenotaph.LocalKeyring(tmp_path / "k")) as store:
            store.write(SCOPE, "k", 1)
        assert _schema_exists(pg_dsn, schema)
    finally:
        drop_schema(pg_dsn, schema)


# -- the keyring from the environment -------------------------------------------------------------
def test_open_takes_its_keyring_from_cenotaph_keyring(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(pg_dsn, schemas())
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)
    with pytest.raises(InvalidValueError, match="CENOTAPH_KEYRING"):
        cenotaph.open(url)
    keyring = tmp_path / "keyring"
    monkeypatch.setenv("CENOTAPH_KEYRING", str(keyring))
    monkeypatch.setenv("CENOTAPH_MASTER_KEY", "ab" * 32)
    with cenotaph.open(url) as store:
        record = store.write(SCOPE, "k", "v")
    sealed = json.loads((keyring / "keyring.json").read_text())
    assert sealed.get("format") == "cenotaph-sealed-keyring/1"  # CENOTAPH_MASTER_KEY sealed it
    with cenotaph.open(url) as again:
        assert again.read(SCOPE, "k") == record
    empty = tmp_path / "elsewhere"
    monkeypatch.setenv("CENOTAPH_KEYRING", str(empty))
    with pytest.raises(KeyProviderError, match="names no keyring"):
        cenotaph.open(url)
    assert not empty.exists(), "a new keyring was made for a store that has one"


# -- replicas ------------------------------------------------------------------------------------
def test_an_unreachable_replica_keeps_the_request_shredded_and_is_named(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    port = _free_port()  # nothing listens there: the replica is down
    replica = f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/test"
    store = cenotaph.open(
        _url(pg_dsn, schemas()),
        key_provider=cenotaph.LocalKeyring(tmp_path / "keyring"),
        replicas=[replica],
        auto_purge="off",
    )
    try:
        store.write(SCOPE, "diet", "vegetarian")
        request = store.forget(SCOPE, "diet")
        report = store.purge()
        status = request.status()
        assert report.requests[request.id] == "shredded" and status.state == "shredded"
        replicas = status.layers["replicas"]
        assert replicas.state == "pending" and replicas.evidence["unreachable"] == [f"127.0.0.1:{port}"]
        gap = next(g for g in status.gaps if g.startswith("layer 'replicas'"))
        assert f"127.0.0.1:{port} (unreachable)" in gap
        assert status.next_step is not None and "replica" in status.next_step
        assert "read transaction" not in status.next_step  # SQLite's advice, not this one
        shown = json.dumps(status.to_dict()) + " ".join(status.gaps) + status.next_step
        assert SECRET not in shown
    finally:
        store.close()
