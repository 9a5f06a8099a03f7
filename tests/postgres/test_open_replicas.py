"""``cenotaph.open(url, replicas=[...])``: the public way to name a PostgreSQL store's replicas.

The store opened this way is the one the replica tests build from the backend: a purge waits for
every named replica, so a paused one keeps the erasure unverified until it replays.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import cenotaph
from cenotaph import LocalKeyring
from cenotaph.errors import ErasureNotProvableError, InvalidValueError

from ._cluster import Cluster

SCOPE = "tenant:acme/user:alice"


def test_open_with_a_replica_waits_for_it(cluster: Cluster, tmp_path: Path) -> None:
    store = cenotaph.open(
        f"{cluster.primary.dsn}?schema=opened",
        key_provider=LocalKeyring(tmp_path / "keyring"),
        auto_purge="off",
        replicas=[cluster.replica.dsn],
    )
    try:
        store.write(SCOPE, "diet", "vegetarian")
        cluster.wait_replayed(cluster.current_lsn())
        cluster.pause_replay()
        request = store.forget(SCOPE, "diet")
        store.purge()
        assert request.status().layers["replicas"].evidence["replicas_behind"] == 1
        with pytest.raises(ErasureNotProvableError):
            store.confirm_erasure(request.id)
        cluster.resume_replay()
        store.purge()
        assert store.confirm_erasure(request.id).state == "verified"
    finally:
        store.close()


def test_replicas_must_be_a_list_of_addresses(pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path / "keyring")
    for wrong in ("postgresql://one-string-not-a-list", [1]):
        with pytest.raises(InvalidValueError, match="replicas must be a list"):
            cenotaph.open(f"{pg_dsn}?schema={pg_schema}", key_provider=keyring, replicas=wrong)  # type: ignore[arg-type]


def test_a_data_directory_takes_no_replicas(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="PostgreSQL store only"):
        cenotaph.open(tmp_path / "data", replicas=["postgresql://127.0.0.1/x"])
