"""The throwaway primary + replica harness (``_cluster``): replication works, replay can be
paused and resumed, and nothing of the cluster is left afterwards."""

from __future__ import annotations

import os
from pathlib import Path

from ._cluster import Cluster, lsn_value


def _running(pid: int) -> bool:
    """Is ``pid`` a live process? A zombie (exited, not yet reaped by its new parent) is not."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


def _rows(cluster: Cluster) -> list[int]:
    return [int(r[0]) for r in cluster.replica.query("SELECT n FROM seen ORDER BY n")]  # type: ignore[call-overload]


def test_a_row_written_on_the_primary_reaches_the_replica_unless_replay_is_paused(cluster: Cluster) -> None:
    cluster.primary.query("CREATE TABLE seen (n int); INSERT INTO seen VALUES (1)")
    cluster.wait_replayed(cluster.current_lsn())
    assert _rows(cluster) == [1]

    cluster.pause_replay()
    cluster.primary.query("INSERT INTO seen VALUES (2)")
    written = cluster.current_lsn()
    cluster.wait_received(written)  # the record is on the replica: only paused replay keeps it out
    assert _rows(cluster) == [1]
    assert not cluster.replayed(written)
    assert lsn_value(cluster.replay_lsn()) < lsn_value(written)

    cluster.resume_replay()
    cluster.wait_replayed(written)
    assert _rows(cluster) == [1, 2]


def test_destroy_stops_both_servers_and_removes_every_file(cluster: Cluster) -> None:
    pids = [cluster.primary.pid(), cluster.replica.pid()]
    assert all(pid is not None for pid in pids)
    assert cluster.root.is_dir()
    cluster.destroy()
    assert not cluster.root.exists()
    assert not any(_running(pid) for pid in pids if pid is not None)
    cluster.destroy()  # a second destroy (the fixture's) finds nothing to do
