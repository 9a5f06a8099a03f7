"""A store and a backup made at schema 4 work in this code: the store is migrated in place when it
is opened, the backup is restored at its own version and migrated after.

Schema 5 added functions only (the write's two messages), so a schema-4 store is this code's
store without them and without their row in the migrations table; the first test checks that
premise against the script itself, so a later change to migration 5 cannot leave these tests
proving nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from tests.erasure._erasure_data import A, B, assert_gone, assert_readable, assert_write_refused, populate

import cenotaph
from cenotaph.backends.postgres.dump import DUMP_MANIFEST
from cenotaph.backends.postgres.schema import LATEST, MIGRATIONS, MIGRATIONS_TABLE

from .conftest import schema_url

pytestmark = pytest.mark.postgres

_FIVE = dict(MIGRATIONS)[5]
_FUNCTIONS = tuple(re.findall(r"CREATE FUNCTION (\w+)", _FIVE))


def _versions(dsn: str, schema: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT version FROM {} ORDER BY version").format(
                sql.Identifier(schema, MIGRATIONS_TABLE)
            )
        ).fetchall()
    return [int(r[0]) for r in rows]


def _functions(dsn: str, schema: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s",
            (schema,),
        ).fetchall()
    return {str(r[0]) for r in rows}


def _back_to_schema_4(dsn: str, schema: str) -> None:
    """What the code of schema 4 left: no function of migration 5, no row for it."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        for name in _FUNCTIONS:
            conn.execute(sql.SQL("DROP FUNCTION {}").format(sql.Identifier(schema, name)))
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE version = 5").format(sql.Identifier(schema, MIGRATIONS_TABLE))
        )


def _value(store: cenotaph.Store, key: str) -> object:
    record = store.read(B, key)
    assert record is not None, key
    return record.value


def test_migration_5_adds_functions_and_nothing_else() -> None:
    assert LATEST == 5, "a migration was added: give these tests a store of the schema before it too"
    statements = [s.strip() for s in re.split(r"\$\$.*?\$\$", _FIVE, flags=re.S)]
    body = "\n".join(line for s in statements for line in s.splitlines() if not line.strip().startswith("--"))
    heads = re.findall(r"^\s*([A-Z]+ [A-Z]+)", body, flags=re.M)
    assert heads and set(heads) == {"CREATE FUNCTION"}, heads
    assert len(_FUNCTIONS) >= 5


def test_a_store_of_schema_4_is_migrated_when_opened_and_keeps_its_records_and_forgets(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    schema = schemas()
    provider = cenotaph.LocalKeyring(tmp_path / "keyring")
    with cenotaph.open(schema_url(pg_dsn, schema), key_provider=provider, auto_purge="sync") as store:
        a = populate(store, A, "A", short=4, long=1)
        b = populate(store, B, "B", short=4, long=1)
        store.forget_subject(A)
        store.write(B, "replaced", "before")
    _back_to_schema_4(pg_dsn, schema)
    assert _versions(pg_dsn, schema) == [1, 2, 3, 4]
    assert not set(_FUNCTIONS) & _functions(pg_dsn, schema)

    with cenotaph.open(schema_url(pg_dsn, schema), key_provider=provider, auto_purge="sync") as store:
        assert _versions(pg_dsn, schema) == [1, 2, 3, 4, 5]
        assert set(_FUNCTIONS) <= _functions(pg_dsn, schema)
        assert_gone(store, a)
        assert_write_refused(store, a)
        assert_readable(store, b)
        store.write(B, "replaced", "after")  # a replace and a new record, through the new functions
        store.write(B, "new", "fresh")
        assert _value(store, "replaced") == "after"
        assert _value(store, "new") == "fresh"
        request = store.forget(B, "new")
        assert request.status().state == "verified", request.status()
        assert store.read(B, "new") is None
        assert store.verify_audit()["entries"] >= 1


def test_a_backup_of_schema_4_restores_then_is_migrated(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    source, target = schemas(), schemas()
    provider = cenotaph.LocalKeyring(tmp_path / "keyring")
    with cenotaph.open(schema_url(pg_dsn, source), key_provider=provider, auto_purge="sync") as store:
        a = populate(store, A, "A", short=4, long=1)
        b = populate(store, B, "B", short=4, long=1)
        info = store.backup(tmp_path / "backup")
        request = store.forget_subject(A)
        assert request.status().state == "verified"
    # the tables of schemas 4 and 5 are the same, so a schema-4 backup differs only in its version
    manifest_path = Path(info.path) / DUMP_MANIFEST
    manifest = json.loads(manifest_path.read_text())
    assert manifest["schema_version"] == 5
    manifest_path.write_text(json.dumps({**manifest, "schema_version": 4}))

    with cenotaph.restore(Path(info.path), schema_url(pg_dsn, target), key_provider=provider) as restored:
        assert _versions(pg_dsn, target) == [1, 2, 3, 4, 5]
        assert set(_FUNCTIONS) <= _functions(pg_dsn, target)
        assert_gone(restored, a)  # the forget after the backup still holds in its copy
        assert_write_refused(restored, a)
        assert_readable(restored, b)
        restored.write(B, "new", "fresh")
        assert _value(restored, "new") == "fresh"
