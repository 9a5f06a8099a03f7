"""S5 with a PostgreSQL store's backups: a logical dump of its schema, restored into a new schema.

- The backup directory holds ciphertext only: no canary (in values, keys and metadata) in any
  form, no byte of any key the key provider holds.
- Restored after a compliance forget, the copy replays the ledger before its first read: the
  forgotten record does not read, the others do, and the request is verified there.
- A target schema holding tables is refused and left as it was; a restore killed while loading
  leaves no schema, one killed before its first commit leaves a schema ordinary opens refuse;
  the same restore run again succeeds either way.
- The backup is registered with the key provider: rotation keeps its epoch until it is released.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from tests.erasure._erasure_data import (
    A,
    B,
    Written,
    assert_gone,
    assert_readable,
    assert_write_refused,
    populate,
)
from tests.kit.oracle import residue
from tests.kit.proc import run

import cenotaph
from cenotaph.backends.postgres.dump import DUMP_MANIFEST, DUMP_TABLES, restore_key
from cenotaph.errors import InvalidValueError, KeyProviderError, StorageError

from .conftest import schema_url

pytestmark = pytest.mark.postgres

Url = Callable[[str], str]


def _schema_exists(dsn: str, schema: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def _count(dsn: str, schema: str, table: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))
        ).fetchone()
        assert row is not None
        return int(row[0])


def _key_material(keyring: Path) -> list[str]:
    doc = json.loads((keyring / "keyring.json").read_text())
    return [*doc["epochs"].values(), doc["erasure_secret"], doc["signing_key"]]


def test_a_backup_from_before_a_forget_restores_into_a_new_schema_without_resurrection(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    source, target = schemas(), schemas()
    keyring = tmp_path / "keyring"
    provider = cenotaph.LocalKeyring(keyring)
    with cenotaph.open(schema_url(pg_dsn, source), key_provider=provider, auto_purge="sync") as store:
        a = populate(store, A, "A", short=6, long=1)
        b = populate(store, B, "B", short=6, long=1)
        canary = f"CNRYK{uuid.uuid4().hex}"
        store.write(A, f"key-{canary}", f"value {canary}", metadata={"note": canary})
        info = store.backup(tmp_path / "backup")
        backup = Path(info.path)

        # -- ciphertext only -------------------------------------------------------------------
        names = {p.name for p in backup.iterdir()}
        assert {DUMP_MANIFEST, *(f"{t}.copy" for t in DUMP_TABLES)} <= names
        assert info.bytes > 0 and (backup / "records.copy").stat().st_size > 0
        key_hex = _key_material(keyring)
        leaked = residue(
            backup,
            texts=[a.canary, b.canary, canary, A, B, *key_hex],
            blobs=[bytes.fromhex(k) for k in key_hex],
        )
        assert leaked["files"] >= len(DUMP_TABLES)
        assert leaked["text_hits"] == [], leaked["text_hits"]
        assert leaked["window_hits"] == [], "a raw key from the keyring is in the backup"

        request = store.forget_subject(A)
        assert request.status().state == "verified"

    with cenotaph.restore(backup, schema_url(pg_dsn, target), key_provider=provider) as restored:
        assert_gone(restored, a)
        assert_write_refused(restored, a)
        assert_readable(restored, b)
        assert restored.read(A, f"key-{canary}") is None
        assert restored.erasure(request.id).status().state == "verified"
        assert restored.verify_audit()["entries"] >= 1
    # it is an ordinary store now, in its own schema
    with cenotaph.open(schema_url(pg_dsn, target), key_provider=provider) as reopened:
        assert_gone(reopened, a)
        assert_readable(reopened, b)
    with cenotaph.open(schema_url(pg_dsn, source), key_provider=provider) as again:
        assert again.verify_audit()["entries"] >= 1  # the source's log still verifies beside the copy


def test_restore_refuses_a_schema_holding_tables_and_a_directory_backup(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    source, busy, other = schemas(), schemas(), schemas()
    provider = cenotaph.LocalKeyring(tmp_path / "keyring")
    with cenotaph.open(schema_url(pg_dsn, source), key_provider=provider) as store:
        store.write(A, "k", "v")
        info = store.backup(tmp_path / "backup")
    theirs = cenotaph.LocalKeyring(tmp_path / "their-keyring")  # another store, its own keyring
    with cenotaph.open(schema_url(pg_dsn, busy), key_provider=theirs) as occupant:
        occupant.write(B, "mine", "keep me")
    before = {t: _count(pg_dsn, busy, t) for t in DUMP_TABLES}
    with pytest.raises(InvalidValueError, match="already holds tables"):
        cenotaph.restore(info.path, schema_url(pg_dsn, busy), key_provider=provider)
    assert {t: _count(pg_dsn, busy, t) for t in DUMP_TABLES} == before
    with cenotaph.open(schema_url(pg_dsn, busy), key_provider=theirs) as occupant:
        kept = occupant.read(B, "mine")
        assert kept is not None and kept.value == "keep me"
        assert occupant.read(A, "k") is None
    # a data directory's backup is SQLite's: refused, nothing made
    with cenotaph.open(tmp_path / "data") as local:
        local.write(A, "k", "v")
        local_backup = local.backup(tmp_path / "local-backup")
    with pytest.raises(InvalidValueError, match="not a backup of a PostgreSQL store"):
        cenotaph.restore(local_backup.path, schema_url(pg_dsn, other), key_provider=provider)
    assert not _schema_exists(pg_dsn, other)
    # and a PostgreSQL backup does not restore into a directory
    with pytest.raises(InvalidValueError, match="restore it into a schema"):
        cenotaph.restore(info.path, tmp_path / "restored-dir", key_provider=provider)
    assert not (tmp_path / "restored-dir").exists()
    # a wrong key provider is refused once loaded: what it loaded is dropped
    with pytest.raises(KeyProviderError):
        cenotaph.restore(info.path, schema_url(pg_dsn, other), key_provider=theirs)
    assert not _schema_exists(pg_dsn, other)


def test_a_second_restore_into_a_schema_being_restored_is_refused_and_touches_nothing(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    source, target = schemas(), schemas()
    backup, keyring, a, b = _backup_then_forget(tmp_path, pg_dsn, source)
    provider = cenotaph.LocalKeyring(keyring)
    with psycopg.connect(pg_dsn, autocommit=True) as running:  # what a running restore holds
        running.execute("SELECT pg_advisory_lock(%s)", (restore_key(target),))
        with pytest.raises(InvalidValueError, match="another restore into this schema is running"):
            cenotaph.restore(backup, schema_url(pg_dsn, target), key_provider=provider)
        assert not _schema_exists(pg_dsn, target)
    # that one gone (its session ended), the restore runs
    with cenotaph.restore(backup, schema_url(pg_dsn, target), key_provider=provider) as restored:
        assert_gone(restored, a)
        assert_readable(restored, b)


def _backup_then_forget(tmp_path: Path, dsn: str, source: str) -> tuple[Path, Path, Written, Written]:
    keyring = tmp_path / "keyring"
    with cenotaph.open(schema_url(dsn, source), key_provider=cenotaph.LocalKeyring(keyring)) as store:
        a = populate(store, A, "A", short=3, long=0)
        b = populate(store, B, "B", short=3, long=0)
        info = store.backup(tmp_path / "backup")
        store.forget(A, mode="compliance")
    return Path(info.path), keyring, a, b


def test_a_restore_killed_while_loading_leaves_no_schema_and_runs_again(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    source, target = schemas(), schemas()
    backup, keyring, a, b = _backup_then_forget(tmp_path, pg_dsn, source)
    url = schema_url(pg_dsn, target)
    child = run("restore", fault="restore.loading", backup=str(backup), target=url, keyring=str(keyring))
    assert child.killed, child.stderr
    assert not _schema_exists(pg_dsn, target), "a killed load left a schema behind"
    with cenotaph.restore(backup, url, key_provider=cenotaph.LocalKeyring(keyring)) as restored:
        assert_gone(restored, a)
        assert_readable(restored, b)


def test_a_restore_killed_before_its_first_commit_is_refused_by_open_then_replaced(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    """Loaded and committed, killed before the restored store's first transaction: the schema
    holds the source's rows and forgets not yet replayed. An ordinary open must refuse it; the
    same restore run again must replace it."""
    source, target = schemas(), schemas()
    backup, keyring, a, b = _backup_then_forget(tmp_path, pg_dsn, source)
    url = schema_url(pg_dsn, target)
    child = run("restore", fault="restore.loaded", backup=str(backup), target=url, keyring=str(keyring))
    assert child.killed, child.stderr
    assert _count(pg_dsn, target, "records") > 0  # the scenario is real: the copy is there
    provider = cenotaph.LocalKeyring(keyring)
    with pytest.raises(StorageError, match="audit chain id is missing"):
        cenotaph.open(url, key_provider=provider)
    with cenotaph.restore(backup, url, key_provider=provider) as restored:
        assert_gone(restored, a)
        assert_readable(restored, b)
    with cenotaph.open(url, key_provider=provider) as reopened:
        assert_gone(reopened, a)


def test_a_backup_is_registered_and_rotation_keeps_its_epoch_until_released(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    source = schemas()
    keyring = tmp_path / "keyring"
    with cenotaph.open(schema_url(pg_dsn, source), key_provider=cenotaph.LocalKeyring(keyring)) as store:
        store.write(A, "k", "about a")
        store.write(B, "k", "about b")
        info = store.backup(tmp_path / "backup")
        assert info.epochs == (1,)
        assert store.backups() == {info.id: [1]}
        request = store.forget_subject(A)
        request.wait()

        first = store.rotate_keys()
        assert 1 in first.retained_epochs and 1 not in first.destroyed_epochs
        status = request.status()
        assert status.horizon is None
        assert info.id in status.layers["horizon"].evidence["reason"]

        store.release_backup(info.id)
        assert store.backups() == {}
        second = store.rotate_keys()
        assert 1 in second.destroyed_epochs
        assert request.status().horizon is not None
        kept = store.read(B, "k")  # rewrapped under the new epoch
        assert kept is not None and kept.value == "about b"


def test_a_snapshot_replaces_an_earlier_attempt_and_reads_its_epochs_from_its_own_snapshot(
    tmp_path: Path, pg_dsn: str, schemas: Callable[[], str]
) -> None:
    dest = tmp_path / "copy"
    dest.mkdir()
    keyring = tmp_path / "keyring"
    with cenotaph.open(
        schema_url(pg_dsn, schemas()), key_provider=cenotaph.LocalKeyring(keyring), auto_purge="off"
    ) as store:
        store.write(A, "k", "v")
        physical = store._backend.physical
        first = physical.snapshot(dest)
        store.rotate_keys()  # every live key rewrapped: the next snapshot needs the new epoch only
        second = physical.snapshot(dest)
        live = set(store._provider.live_epochs())
    files = physical.format.snapshot_files(dest)
    assert sorted(p.name for p in dest.iterdir()) == sorted(f.name for f in files)
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    assert physical.format.holds_snapshot(dest) and not physical.format.holds_snapshot(tmp_path)
    assert first == {1} and second and second != first and second <= live
