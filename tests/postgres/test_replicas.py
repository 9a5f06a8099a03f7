"""A PostgreSQL store with a streaming replica (the throwaway cluster): a compliance erasure is
not proven while the replica has not replayed past the purge, since the replica still holds the
destroyed keys; once it has, the request verifies."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from cenotaph import LocalKeyring, Store
from cenotaph.backends.postgres import open_postgres
from cenotaph.backends.postgres.physical import replay_lag
from cenotaph.errors import ErasureNotProvableError, StorageError

from ._cluster import Cluster

SCOPE = "tenant:acme/user:alice"


def _replica_keys(cluster: Cluster, record_id: str) -> list[object]:
    """The lineage key column of a record as the replica serves it (no row: purged)."""
    with psycopg.connect(cluster.replica.dsn) as conn:
        rows = conn.execute("SELECT wrapped FROM store.lineage WHERE record_id=%s", (record_id,)).fetchall()
    return [r[0] for r in rows]


def test_a_paused_replica_holds_the_erasure_back_until_it_replays(cluster: Cluster, tmp_path: Path) -> None:
    backend = open_postgres(cluster.primary.dsn, schema="store", replicas=[cluster.replica.dsn])
    store = Store(backend, LocalKeyring(tmp_path / "keyring"), auto_purge="off")
    try:
        gone = store.write(SCOPE, "diet", "vegetarian")
        kept = store.write(SCOPE, "city", "Lisbon")
        cluster.wait_replayed(cluster.current_lsn())
        assert _replica_keys(cluster, gone.id) != [None]  # the replica serves the key

        cluster.pause_replay()
        request = store.forget(SCOPE, "diet")
        report = store.purge()
        assert not report.wal_truncated
        status = request.status()
        replicas = status.layers["replicas"]
        assert replicas.state == "pending" and replicas.evidence["replicas_behind"] == 1
        assert status.state != "verified"
        with pytest.raises(ErasureNotProvableError):
            store.confirm_erasure(request.id)
        assert _replica_keys(cluster, gone.id) not in ([], [None])  # the paused replica still has it

        cluster.resume_replay()
        store.purge()
        assert store.confirm_erasure(request.id).layers["replicas"].evidence == {"replicas": 1}
        assert _replica_keys(cluster, gone.id) == []
        assert store.read(SCOPE, "city") == kept
    finally:
        store.close()


def test_the_lag_of_a_replica_and_a_server_that_is_none(cluster: Cluster) -> None:
    target = cluster.current_lsn()
    cluster.wait_replayed(target)
    assert replay_lag(cluster.replica.dsn, target, "store") == 0
    with pytest.raises(StorageError, match="not in recovery"):
        replay_lag(cluster.primary.dsn, target, "store")
