"""SQLite's physical part (``backend.physical``, ``backends.directory_format()``) on real files: the
layers it proves are the ones a verified request reports done, reclaim says when an open reader
keeps the WAL and empties it once the reader is gone, a snapshot replaces an earlier attempt, and
a data directory is told from one that holds a keyring alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cenotaph
from cenotaph.backends import directory_format, looks_like_store
from cenotaph.model import Layer, LayerState

A = "tenant:t/user:a"

_READER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
conn.execute("SELECT count(*) FROM records").fetchone()
print("holding", flush=True)
sys.stdin.read()
conn.execute("COMMIT")
"""


def test_the_layers_sqlite_proves_are_the_ones_a_verified_request_reports_done(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "data", auto_purge="sync") as store:
        store.write(A, "note", "a note to forget, with enough text to sample probes from it")
        status = store.forget_subject(A).status()
        proved = [proof.layer for proof in store._backend.physical.layers]
        assert proved == [Layer.ROWS, Layer.WAL, Layer.INDEX, Layer.SCAN]
        assert status.state == "verified"
        assert all(status.layers[layer].state == LayerState.DONE for layer in proved)
        assert "unscanned" not in status.layers[Layer.SCAN].evidence  # SQLite's scan reaches every file


def test_reclaim_names_an_open_reader_then_empties_the_wal(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with cenotaph.open(data, auto_purge="off") as store:
        physical = store._backend.physical
        store.write(A, "k", "v" * 200)
        reader = subprocess.Popen(
            [sys.executable, "-c", _READER, str(data / "cenotaph.db")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert reader.stdout is not None and reader.stdout.readline().strip() == "holding"
            store.write(A, "k2", "w" * 200)  # a frame the reader's snapshot keeps in the WAL
            blocked = physical.reclaim()
        finally:
            reader.communicate("", timeout=30)
        assert not blocked.done and blocked.bytes_left > 0
        wal = blocked.layers[Layer.WAL]
        assert wal.state == LayerState.PENDING and "open reader" in wal.evidence["gap"]
        assert wal.evidence["wal_bytes"] == blocked.bytes_left
        reclaimed = physical.reclaim()
        assert reclaimed.done and reclaimed.bytes_left == 0
        assert reclaimed.layers[Layer.WAL].state == LayerState.DONE
        assert (data / "cenotaph.db-wal").stat().st_size == 0


def test_a_snapshot_replaces_an_earlier_attempt_and_reads_its_epochs_from_the_copy(tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    dest.mkdir()
    with cenotaph.open(tmp_path / "data", auto_purge="off") as store:
        store.write(A, "k", "v")
        physical = store._backend.physical
        first = physical.snapshot(dest)
        store.rotate_keys()
        second = physical.snapshot(dest)  # VACUUM INTO alone would refuse the file left there
        live = set(store._provider.live_epochs())
    files = physical.format.snapshot_files(dest)
    assert [f.name for f in files] == ["cenotaph.db"] and all(f.is_file() for f in files)
    assert physical.format.holds_snapshot(dest)
    assert first and second and second != first and second <= live


def test_a_data_directory_is_told_from_one_holding_a_keyring_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert not looks_like_store(tmp_path)
    with cenotaph.open(data):
        pass
    assert looks_like_store(data)
    assert not looks_like_store(data / "keyring")
    fmt = directory_format()
    assert not fmt.unwritable(data)
    assert {"cenotaph.db", "cenotaph.db-wal"} <= fmt.restored_files


def test_residue_is_the_databases_only_in_its_own_files(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "data", auto_purge="off") as store:
        physical = store._backend.physical
        roots = physical.scan_sources().roots
    assert roots == {"": (tmp_path / "data").resolve()}
    assert physical.is_database_file("cenotaph.db") and physical.is_database_file("cenotaph.db-wal")
    assert not physical.is_database_file("notes/copy.txt")
    assert not physical.is_database_file("<keyring>/keyring.json")
