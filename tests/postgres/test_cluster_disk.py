"""S1, S2 and S5 on a real PostgreSQL cluster's disk (the throwaway primary + streaming replica).

What the server keeps is out of cenotaph's hands: heap pages, TOAST, indexes, free space plain
VACUUM does not zero, pg_wal segments kept for checkpoints, the replica's copy of all of it, a
base backup. These tests look at those bytes directly:

- a random canary written through the API (in values, keys, metadata, scope ids and subjects)
  never appears in any file under the cluster's root -- both data directories, pg_wal included,
  and the server logs -- in plain, hex or UTF-16 (le and be) form: after the writes, after a
  compliance forget and its purge, after a CHECKPOINT and after VACUUM. Positive controls: a
  plaintext row written with plain SQL is found in both servers' pg_wal, and at every moment a
  file planted in the data directory with the canary in every form is found in every form;
- a base backup taken before a compliance forget, restored (a server started on it) after the
  forget and a key rotation, cannot give the erased record back, while a record not forgotten
  still reads from it.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from cenotaph import LocalKeyring, Store
from cenotaph.backends.postgres import open_postgres
from cenotaph.errors import KeyProviderError

from ._cluster import Cluster, Server, _free_port

SCHEMA = "store"
ALICE = "tenant:acme/user:alice"
CONTROL_FILE = "cenotaph-scan-control"  # planted in the primary's data directory, then removed


def forms(canary: str) -> dict[str, bytes]:
    """Every form of ``canary`` the scan looks for."""
    raw = canary.encode()
    return {
        "plain": raw,
        "hex": raw.hex().encode(),
        "HEX": raw.hex().upper().encode(),
        "utf-16-le": canary.encode("utf-16-le"),
        "utf-16-be": canary.encode("utf-16-be"),
    }


def _files(root: Path) -> Iterator[Path]:
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            try:
                if stat.S_ISREG(path.lstat().st_mode):  # not the servers' unix sockets
                    yield path
            except FileNotFoundError:  # a WAL segment recycled, a temporary file gone
                continue


def scan(root: Path, canary: str) -> dict[str, set[str]]:
    """Each file under ``root`` (relative path) holding ``canary`` in some form: which forms."""
    needles = forms(canary)
    hits: dict[str, set[str]] = {}
    for path in _files(root):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        found = {name for name, needle in needles.items() if needle in data}
        if found:
            hits[str(path.relative_to(root))] = found
    return hits


def assert_no_canary(cluster: Cluster, canary: str, moment: str) -> int:
    """No file of the cluster holds the canary, and a planted one is found in every form (the
    positive control of this very scan); how many files were scanned."""
    planted = cluster.primary.datadir / CONTROL_FILE
    planted.write_bytes(b"\0".join(forms(canary).values()))
    try:
        hits = scan(cluster.root, canary)
    finally:
        planted.unlink()
    control = str(planted.relative_to(cluster.root))
    assert hits.pop(control, set()) == set(forms(canary)), f"{moment}: the planted control was not found"
    assert hits == {}, f"{moment}: the canary is on the cluster's disk: {hits}"
    return sum(1 for _ in _files(cluster.root))


def _store(cluster: Cluster, keyring: LocalKeyring, server: Server | None = None) -> Store:
    if server is None:
        backend = open_postgres(cluster.primary.dsn, schema=SCHEMA, replicas=[cluster.replica.dsn])
    else:
        backend = open_postgres(server.dsn, schema=SCHEMA)
    return Store(backend, keyring, auto_purge="off")


def _settle(cluster: Cluster) -> None:
    cluster.wait_replayed(cluster.current_lsn())


def test_a_canary_written_through_the_api_is_in_no_file_of_the_cluster(
    cluster: Cluster, tmp_path: Path
) -> None:
    canary = f"cnry{secrets.token_hex(8)}"
    subject = f"idp:{canary}"
    store = _store(cluster, LocalKeyring(tmp_path / "keyring"))
    try:
        scope = f"tenant:acme/user:{canary}"
        store.write(scope, "diet", f"vegetarian, says {canary}", subjects=[subject])
        store.write(ALICE, f"key-{canary}", {"note": canary, "more": [canary] * 3}, metadata={"src": canary})
        store.write(ALICE, "long", f"{canary} " * 800, subjects=[subject])  # past TOAST's threshold
        store.write(f"{ALICE}/session:{canary}", "turn", "hello")
        kept = store.write(ALICE, "city", "Lisbon")

        # the scan finds plaintext the server writes: a row written with plain SQL, in both WALs
        control = f"ctrl{secrets.token_hex(8)}"
        cluster.primary.query(
            f"CREATE TABLE public.plain (t text); INSERT INTO public.plain VALUES ('{control}')"
        )
        _settle(cluster)
        found = scan(cluster.root, control)
        for server in ("primary", "replica"):
            assert any(f.startswith(f"{server}/pg_wal/") and "plain" in v for f, v in found.items()), found
        assert_no_canary(cluster, canary, "after the writes")

        request = store.forget_subject(subject)
        store.forget(ALICE, f"key-{canary}")
        store.forget(f"{ALICE}/session:{canary}")
        store.purge()
        assert store.confirm_erasure(request.id).state == "verified"
        _settle(cluster)
        assert_no_canary(cluster, canary, "after the forgets and their purge")

        cluster.primary.query("CHECKPOINT")
        _settle(cluster)
        cluster.replica.query("CHECKPOINT")  # a restartpoint: the replica flushes its pages too
        assert_no_canary(cluster, canary, "after a checkpoint")

        cluster.primary.query("VACUUM")
        cluster.primary.query("CHECKPOINT")
        _settle(cluster)
        files = assert_no_canary(cluster, canary, "after VACUUM")
        assert files > 100  # both data directories, not an empty folder
        assert store.read(ALICE, "city") == kept
    finally:
        store.close()


def _basebackup(cluster: Cluster) -> Server:
    """A base backup of the primary (WAL streamed in), ready to be started as its own server."""
    server = Server("restored", cluster.root / "basebackup", _free_port())
    cluster._run(
        "pg_basebackup",
        *("-h", "127.0.0.1", "-p", str(cluster.primary.port), "-U", "postgres"),
        *("-D", str(server.datadir), "-X", "stream", "-c", "fast", "--no-sync"),
    )
    return server


def _key_columns(server: Server, record_id: str) -> tuple[bool, bool, bool]:
    """(record row present, its wrapped key present, its lineage key present) in ``server``."""
    query = sql.SQL(
        "SELECT r.id IS NOT NULL, r.wrapped IS NOT NULL, l.wrapped IS NOT NULL FROM {s}.lineage l "
        "LEFT JOIN {s}.records r ON r.id = l.record_id WHERE l.record_id = %s"
    ).format(s=sql.Identifier(SCHEMA))
    with psycopg.connect(server.dsn) as conn:
        rows = conn.execute(query, (record_id,)).fetchall()
    assert len(rows) == 1
    row, key, lineage_key = rows[0]
    return bool(row), bool(key), bool(lineage_key)


def test_a_base_backup_taken_before_a_forget_cannot_give_the_erased_record_back(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The read returns nothing (``None``), it does not fail, and first because of the ledger:
    the key provider's ledger holds the forget (tombstone, destroyed key ids), and a store opening
    the restored database replays it before serving its first read (S5, S9), so the erased record
    is hidden and its record and lineage keys are destroyed in the restored database too (checked
    in its rows, which held both before the store opened it).

    The base backup is registered with the key provider (``register_backup``), as an operator
    registers a backup the store did not make: rotation then keeps the KEK epoch that wraps the
    backup's keys, which is why the record not forgotten still reads from it, and why the
    request's horizon stays ``None`` meanwhile. Released and rotated again, that epoch is
    destroyed: the horizon is reached, and nothing in the backup can be unwrapped any more, the
    record not forgotten included (an unregistered backup is in that state right after the first
    rotation)."""
    keyring = LocalKeyring(tmp_path / "keyring")
    store = _store(cluster, keyring)
    try:
        gone = store.write(ALICE, "diet", "vegetarian")
        kept = store.write(ALICE, "city", "Lisbon")
        backup = _basebackup(cluster)
        old_epoch = keyring.current_epoch()
        keyring.register_backup("pg_basebackup-1", keyring.live_epochs())

        request = store.forget(ALICE, "diet")
        store.purge()
        assert store.confirm_erasure(request.id).state == "verified"
        rotation = store.rotate_keys()
        assert rotation.destroyed_epochs == () and rotation.retained_epochs == (old_epoch,)
        assert request.status().horizon is None  # the backup's epoch is alive

        cluster._configure(backup)
        cluster._start_server(backup)  # stopped by the cluster's destroy()
        assert _key_columns(backup, gone.id) == (True, True, True)  # the backup holds its keys
        with _store(cluster, keyring, backup) as restored:
            assert restored.read(ALICE, "diet") is None
            assert restored.get(gone.id) is None
            assert restored.list(ALICE) == [kept]
            assert restored.read(ALICE, "city") == kept
        assert _key_columns(backup, gone.id) == (True, False, False)  # destroyed there on open

        keyring.release_backup("pg_basebackup-1")
        rotation = store.rotate_keys()
        assert old_epoch in rotation.destroyed_epochs
        assert request.status().horizon is not None
        with pytest.raises(KeyProviderError):
            keyring.kek(old_epoch)  # what wrapped every key in the backup
        with _store(cluster, keyring, backup) as restored:
            assert restored.read(ALICE, "city") is None  # the backup is dead now
        assert store.read(ALICE, "city") == kept  # the live store rewrapped it
    finally:
        store.close()
