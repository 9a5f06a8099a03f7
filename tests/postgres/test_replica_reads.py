"""Reads served by a streaming replica (``read_replicas``), only where read-after-forget holds.

Each test runs on a throwaway primary and replica. Replay is paused on the replica
(``pg_wal_replay_pause``) to make it lag for certain: a read must then go to the primary
whenever the replica has not replayed a commit this process has seen (its own forget, another
process's), and must go to the replica once it has. Where a read went is seen three ways: the
rows it returns (the paused replica still holds what the primary forgot), the router's counts,
and the replica's ``pg_stat_activity`` (its read sessions are named ``cenotaph-read``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

import cenotaph
from cenotaph import LocalKeyring, Store
from cenotaph.backends.postgres import PostgresBackend, open_postgres
from cenotaph.backends.postgres.routing import APPLICATION_NAME, ReadRouter
from cenotaph.errors import InvalidValueError

from ._cluster import Cluster

SCOPE = "tenant:acme/user:alice"


def _router(backend: PostgresBackend) -> ReadRouter:
    assert backend.router is not None
    return backend.router


def _replica_counter(cluster: Cluster, schema: str) -> int:
    return int(str(cluster.replica.query(f"SELECT sum(value) FROM {schema}.change_marker")[0][0]))


def _replica_read_sessions(cluster: Cluster) -> int:
    """How many store read sessions the replica has (its pools open none before a read)."""
    rows = cluster.replica.query(
        f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{APPLICATION_NAME}'"
    )
    return int(str(rows[0][0]))


def _catch_up(cluster: Cluster) -> None:
    cluster.wait_replayed(cluster.current_lsn())


def _primary(cluster: Cluster, sql: str) -> int:
    return int(str(cluster.primary.query(sql)[0][0]))


def test_the_floor_follows_forgets_and_own_commits_while_the_replica_lags(cluster: Cluster) -> None:
    reader = open_postgres(cluster.primary.dsn, schema="store", read_replicas=[cluster.replica.dsn])
    writer = open_postgres(cluster.primary.dsn, schema="store")  # another process's connections
    epoch_sql = "SELECT value FROM store.meta WHERE name = 'forget_epoch'"
    counter_sql = "SELECT sum(value) FROM store.change_marker"
    try:
        router = _router(reader)
        reader.marker()  # a store call's sync: the floor, taken on the primary
        _catch_up(cluster)
        assert _replica_read_sessions(cluster) == 0
        with reader.read() as txn:
            txn.marker()
        assert (router.replica_reads, router.primary_reads) == (1, 0)
        assert _replica_read_sessions(cluster) == 1

        cluster.pause_replay()
        with writer.write():
            pass  # another process's commit that forgets nothing: the replica may lag behind it
        assert _replica_counter(cluster, "store") < _primary(cluster, counter_sql)
        reader.marker()
        with reader.read() as txn:
            assert txn._one("SELECT sum(value) FROM change_marker") < _primary(cluster, counter_sql)
        assert (router.replica_reads, router.primary_reads) == (2, 0)

        with reader.write() as txn:
            txn.set_meta("own", 1)  # its own commit: the floor is read again before the next read
        with reader.read() as txn:
            assert txn.meta("own") == 1
        assert (router.replica_reads, router.primary_reads) == (2, 1)

        with writer.write() as txn:
            txn.advance("forget_epoch")  # what every forget commits
        reader.marker()  # the epoch moved: the floor is past that commit
        with reader.read() as txn:
            assert txn.count("forget_epoch") == _primary(cluster, epoch_sql)
        assert (router.replica_reads, router.primary_reads) == (2, 2)

        reader.forgets_learnt()  # the ledger told of another process's forget
        with reader.read() as txn:
            assert txn._one("SELECT sum(value) FROM change_marker") == _primary(cluster, counter_sql)
        assert (router.replica_reads, router.primary_reads) == (2, 3)

        cluster.resume_replay()
        _catch_up(cluster)  # past the floor the last read took
        with reader.read() as txn:
            assert txn.meta("own") == 1
        assert (router.replica_reads, router.primary_reads) == (3, 3)
    finally:
        reader.close()
        writer.close()


def test_a_forget_then_an_immediate_read_never_reads_the_lagging_replica(
    cluster: Cluster, tmp_path: Path
) -> None:
    backend = open_postgres(cluster.primary.dsn, schema="store", read_replicas=[cluster.replica.dsn])
    store = Store(backend, LocalKeyring(tmp_path / "keyring"), auto_purge="off")
    router = _router(backend)
    try:
        gone = store.write(SCOPE, "diet", "vegetarian")
        kept = store.write(SCOPE, "city", "Lisbon")
        _catch_up(cluster)
        assert store.read(SCOPE, "city") == kept
        assert router.replica_reads >= 1  # caught up: the replica served it

        cluster.pause_replay()
        store.forget(SCOPE, "diet")
        served = router.replica_reads
        assert store.read(SCOPE, "diet") is None
        assert store.read(SCOPE, "city") == kept
        assert router.replica_reads == served  # every read since the forget: the primary's
        with psycopg.connect(cluster.replica.dsn) as conn:  # what a replica read would have found
            held = conn.execute("SELECT wrapped FROM store.lineage WHERE record_id = %s", (gone.id,))
            assert held.fetchone() not in (None, (None,))
    finally:
        store.close()


_FORGET_ELSEWHERE = textwrap.dedent(
    """
    import sys
    from cenotaph import LocalKeyring, Store
    from cenotaph.backends.postgres import open_postgres

    store = Store(open_postgres(sys.argv[1], schema="store"), LocalKeyring(sys.argv[2]), auto_purge="off")
    store.forget(sys.argv[3], "diet")
    store.close()
    """
)


def test_a_forget_in_another_process_then_a_read_here_never_reads_the_lagging_replica(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyring = tmp_path / "keyring"
    backend = open_postgres(cluster.primary.dsn, schema="store", read_replicas=[cluster.replica.dsn])
    store = Store(backend, LocalKeyring(keyring), auto_purge="off")
    router = _router(backend)
    told: list[None] = []
    learnt = backend.forgets_learnt

    def counted() -> None:
        told.append(None)
        learnt()

    monkeypatch.setattr(backend, "forgets_learnt", counted)
    try:
        store.write(SCOPE, "diet", "vegetarian")
        kept = store.write(SCOPE, "city", "Lisbon")
        _catch_up(cluster)
        assert store.read(SCOPE, "diet") is not None
        assert router.replica_reads >= 1

        cluster.pause_replay()
        done = subprocess.run(
            [sys.executable, "-c", _FORGET_ELSEWHERE, cluster.primary.dsn, str(keyring), SCOPE],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        served, before = router.replica_reads, len(told)
        assert store.read(SCOPE, "diet") is None
        assert len(told) > before  # the ledger brought the forget, and the backend heard of it
        assert store.read(SCOPE, "city") == kept
        assert router.replica_reads == served

        cluster.resume_replay()
        _catch_up(cluster)
        assert store.read(SCOPE, "diet") is None
        store.read(SCOPE, "city")
        assert router.replica_reads > served  # caught up again: the replica serves once more
    finally:
        store.close()


def test_open_with_read_replicas_routes_reads_and_lists_them_for_the_purge(
    cluster: Cluster, tmp_path: Path
) -> None:
    store = cenotaph.open(
        f"{cluster.primary.dsn}?schema=opened",
        key_provider=LocalKeyring(tmp_path / "keyring"),
        auto_purge="off",
        read_replicas=[cluster.replica.dsn],
    )
    try:
        record = store.write(SCOPE, "diet", "vegetarian")
        _catch_up(cluster)
        assert store.read(SCOPE, "diet") == record
        assert _replica_read_sessions(cluster) == 1  # the open's reads and this one: one session
        cluster.pause_replay()
        request = store.forget(SCOPE, "diet")
        store.purge()
        assert request.status().layers["replicas"].evidence["replicas_behind"] == 1
        cluster.resume_replay()
        store.purge()
        assert store.confirm_erasure(request.id).state == "verified"
    finally:
        store.close()


def test_read_replicas_must_be_a_list_of_addresses(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="read_replicas must be a list"):
        cenotaph.open(tmp_path / "data", read_replicas="postgresql://one-string")
    with pytest.raises(InvalidValueError, match="PostgreSQL store only"):
        cenotaph.open(tmp_path / "data2", read_replicas=["postgresql://127.0.0.1/x"])


def test_the_command_line_reads_cenotaph_read_replicas(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from cenotaph.cli.main import cli

    url = f"{cluster.primary.dsn}?schema=cli"
    monkeypatch.setenv("CENOTAPH_KEYRING", str(tmp_path / "keyring"))
    monkeypatch.delenv("CENOTAPH_REPLICAS", raising=False)
    runner = CliRunner()
    assert runner.invoke(cli, ["init", "--data", url]).exit_code == 0
    assert runner.invoke(cli, ["write", SCOPE, "diet", "vegetarian", "--data", url]).exit_code == 0
    _catch_up(cluster)
    cluster.pause_replay()
    monkeypatch.setenv("CENOTAPH_READ_REPLICAS", cluster.replica.dsn)
    result = runner.invoke(cli, ["forget", SCOPE, "diet", "--no-wait", "--data", url])
    assert result.exit_code == 0, result.stderr
    request = json.loads(result.stdout)["id"]
    runner.invoke(cli, ["purge", "--data", url])
    status = json.loads(runner.invoke(cli, ["status", request, "--data", url]).stdout)["status"]
    assert status["layers"]["replicas"]["evidence"]["replicas_behind"] == 1  # a read replica is a purge's
    read = runner.invoke(cli, ["read", SCOPE, "diet", "--data", url])
    assert read.exit_code != 0 or json.loads(read.stdout) in (None, {}), read.stdout
