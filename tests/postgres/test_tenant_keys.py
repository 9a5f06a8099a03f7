"""Every table's keys lead with what a distribution by tenant needs (migration 4, docs/sharding.md).

A tenant-distributable table's primary key and every unique key start with ``tenant``: the scope
token of the first segment of the row's scope path (its root scope's token). Triggers fill it;
a store migrated from schema 3 has it filled for the rows it already held. Every table of the
schema is named exactly once, distributed or reference, so a new table must be classified.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cenotaph import LocalKeyring, Store
from cenotaph.backends.postgres import backend as backend_module
from cenotaph.backends.postgres import open_postgres
from cenotaph.backends.postgres.schema import DISTRIBUTED, MIGRATIONS, REFERENCE
from cenotaph.crypto.tokens import TokenMaker
from cenotaph.scope import Scope

ACME = "tenant:acme/user:alice"
BETA = "tenant:beta/team:ops/user:bob"


def _keys(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> dict[str, list[list[str]]]:
    """Each table's primary and unique keys, as their column lists in key order."""
    rows = conn.execute(
        "SELECT c.conrelid::regclass::text, array_agg(a.attname::text ORDER BY k.n) "
        "FROM pg_constraint c CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
        "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum "
        "WHERE c.connamespace = %s::regnamespace AND c.contype IN ('p', 'u') GROUP BY c.oid",
        (schema,),
    ).fetchall()
    keys: dict[str, list[list[str]]] = {}
    for table, columns in rows:
        keys.setdefault(str(table).split(".")[-1], []).append(list(columns))  # type: ignore[call-overload]
    return keys


def _tables(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
    return {str(r[0]) for r in rows}


def _fill(store: Store) -> None:
    source = store.write(ACME, "diet", "vegetarian", subjects=["alice"])
    store.write(BETA, "city", "Lisbon", subjects=["bob"])
    store.write(BETA, "summary", "eats greens", derived_from=[source.id])  # across tenants


def _tenants_of(conn: psycopg.Connection[tuple[object, ...]], schema: str, root: TokenMaker) -> None:
    """Every row's tenant is its root scope's token (a derivation: the derived record's)."""
    acme = root.scope(Scope.parse("tenant:acme"))
    beta = root.scope(Scope.parse("tenant:beta"))
    by_scope = {root.scope(Scope.parse(p)): t for p, t in ((ACME, acme), (BETA, beta))}
    by_scope.update({root.scope(s): acme for s in Scope.parse(ACME).prefixes()})
    by_scope.update({root.scope(s): beta for s in Scope.parse(BETA).prefixes()})
    for table in ("records", "lineage"):
        rows = _pairs(conn, f"SELECT scope_token, tenant FROM {schema}.{table}")
        assert len(rows) == 3
        assert all(t == by_scope[s] for s, t in rows)
    assert dict(_pairs(conn, f"SELECT token, tenant FROM {schema}.scopes")) == by_scope
    lineage = dict(_pairs(conn, f"SELECT record_id, tenant FROM {schema}.lineage"))
    subjects = _pairs(conn, f"SELECT record_id, tenant FROM {schema}.record_subjects")
    derivations = _pairs(conn, f"SELECT derived_id, tenant FROM {schema}.derivations")
    assert subjects and derivations
    assert all(lineage[r] == t for r, t in [*subjects, *derivations])
    assert {t for _, t in derivations} == {beta}


def _pairs(conn: psycopg.Connection[tuple[object, ...]], query: str) -> list[tuple[Any, bytes]]:
    """Two-column rows, bytea as bytes."""
    return [
        (bytes(a) if isinstance(a, bytes | memoryview) else a, bytes(b))  # type: ignore[call-overload]
        for a, b in conn.execute(query).fetchall()
    ]


@pytest.fixture
def keyring(tmp_path: Path) -> Iterator[LocalKeyring]:
    yield LocalKeyring(tmp_path / "keyring")


def test_every_table_is_distributed_by_tenant_or_named_reference(
    pg_dsn: str, pg_schema: str, keyring: LocalKeyring
) -> None:
    store = Store(open_postgres(pg_dsn, schema=pg_schema), keyring, auto_purge="off")
    try:
        _fill(store)
        tokens = TokenMaker(keyring.erasure_secret())
        with psycopg.connect(pg_dsn) as conn:
            tables = _tables(conn, pg_schema)
            assert set(DISTRIBUTED) | set(REFERENCE) == tables
            assert not set(DISTRIBUTED) & set(REFERENCE)
            keys = _keys(conn, pg_schema)
            for table in DISTRIBUTED:
                assert keys[table], table
                assert all(columns[0] == "tenant" for columns in keys[table]), (table, keys[table])
            _tenants_of(conn, pg_schema, tokens)
    finally:
        store.close()


def test_a_store_of_schema_3_gets_its_tenants_filled(
    pg_dsn: str, pg_schema: str, keyring: LocalKeyring, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as old:
        # every migration but 4 (this code's statements need 5's functions, which do not need 4)
        earlier = tuple((n, s) for n, s in MIGRATIONS if n != 4)
        old.setattr(backend_module, "MIGRATIONS", earlier)
        old.setattr(backend_module, "NUMBERS", frozenset(n for n, _ in earlier))
        store = Store(open_postgres(pg_dsn, schema=pg_schema), keyring, auto_purge="off")
        try:
            _fill(store)
        finally:
            store.close()
        with psycopg.connect(pg_dsn) as conn:
            assert "tenant" not in {k for keys in _keys(conn, pg_schema).values() for c in keys for k in c}
    store = Store(open_postgres(pg_dsn, schema=pg_schema), keyring, auto_purge="off")
    try:
        with psycopg.connect(pg_dsn) as conn:
            _tenants_of(conn, pg_schema, TokenMaker(keyring.erasure_secret()))
        assert store.read(ACME, "diet") is not None
        store.forget(ACME, "diet")
        assert store.read(ACME, "diet") is None
    finally:
        store.close()
