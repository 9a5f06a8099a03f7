"""S1/S3/S4 by bytes: after a subject erasure, nothing of it is left in any file of the data directory.

Two subjects (tenant:t/user:a and tenant:t/user:b) each get short and multi-page (20 KB) records.
Before forgetting a, a child process snapshots every ciphertext and wrapped-key cell of a's records
straight from the SQLite file. After ``forget_subject(a)`` (auto-purge) no file under the data
directory holds a's canary (plain, hex, HEX, UTF-16-LE) nor any 32-byte window of any of those
cells; b is still fully readable. The same again with SQLite's ``secure_delete`` default forced
OFF on every new connection: the store must switch it ON itself (S3: never the build default).

The byte oracle (``tests.kit.oracle.residue``) is independent of cenotaph's scanner and is checked
against planted residue here first.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from tests.erasure._erasure_data import (
    DB,
    A,
    B,
    assert_gone,
    assert_readable,
    assert_write_refused,
    cells,
    populate,
)
from tests.kit.oracle import WINDOW, copy_file, forms, residue, sql, write_sql

import cenotaph

# about SQLite's files and rows (tests/kit/stores.py)
pytestmark = pytest.mark.sqlite_only


# -- the oracle has teeth ---------------------------------------------------------------------
def test_the_oracle_finds_planted_text_in_every_form_and_any_unaligned_window(tmp_path: Path) -> None:
    text = f"CNRYplant{secrets.token_hex(6)}"
    blob = secrets.token_bytes(5000)
    for n, (name, form) in enumerate(forms(text).items()):
        (tmp_path / f"f{n}.bin").write_bytes(secrets.token_bytes(777) + form + secrets.token_bytes(100))
        assert name
    # one exact 32-byte window from the middle of the blob, at an odd offset in the file
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_bytes(secrets.token_bytes(4099) + blob[1234 : 1234 + WINDOW])
    # 31 bytes is not a window: no hit
    (tmp_path / "short.bin").write_bytes(secrets.token_bytes(5) + blob[300 : 300 + WINDOW - 1])
    found = residue(tmp_path, texts=[text], blobs=[secrets.token_bytes(64), blob])
    assert sorted(h[2] for h in found["text_hits"]) == sorted(forms(text))
    assert found["window_hits"] == [["sub/w.bin", 1, 4099, 1234]]
    assert found["files"] == 6


@pytest.mark.parametrize("secure_delete", ["OFF", "ON"])
def test_sqlite_keeps_deleted_cells_without_secure_delete(tmp_path: Path, secure_delete: str) -> None:
    """Why the store must set secure_delete itself: with it OFF, a deleted row's bytes stay in the
    file even after a TRUNCATE checkpoint (so the OFF run below is a real test)."""
    db = tmp_path / "raw.db"
    blob = secrets.token_bytes(6000)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA secure_delete={secure_delete}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB)")
        conn.execute("INSERT INTO t (b) VALUES (?)", (secrets.token_bytes(3000),))
        conn.execute("INSERT INTO t (b) VALUES (?)", (blob,))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("DELETE FROM t WHERE b = ?", (blob,))
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        conn.close()
    hits = residue(tmp_path, blobs=[blob])["window_hits"]
    assert bool(hits) == (secure_delete == "OFF")


# -- the store ----------------------------------------------------------------------------------
@pytest.fixture(params=["build-default", "default-forced-off"])
def secure_delete_default(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``default-forced-off``: every new sqlite3 connection in this process starts with
    ``secure_delete=OFF`` before the store applies its own settings."""
    if request.param == "default-forced-off":
        real_connect = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = real_connect(*args, **kwargs)
            conn.execute("PRAGMA secure_delete=OFF")
            return conn

        monkeypatch.setattr(sqlite3, "connect", connect)
        probe = sqlite3.connect(":memory:")
        try:
            assert probe.execute("PRAGMA secure_delete").fetchone()[0] == 0, "the patch must take effect"
        finally:
            probe.close()
    return str(request.param)


def test_a_subject_erasure_leaves_no_byte_of_it_in_any_file(
    tmp_path: Path, secure_delete_default: str
) -> None:
    data = tmp_path / "data"
    store = cenotaph.open(data, auto_purge="sync")
    try:
        # the store switched secure_delete ON on its own connection, whatever the default was
        assert store._backend.inner._conn.execute("PRAGMA secure_delete").fetchone()[0] == 1  # type: ignore[attr-defined]
        a = populate(store, A, "A", short=12, long=3)
        b = populate(store, B, "B", short=12, long=3)
        a_cells = cells(data / DB, a.ids)
        b_cells = cells(data / DB, b.ids)

        before = residue(data, texts=[a.canary, b.canary], blobs=a_cells)
        assert before["text_hits"] == [], "S1: values never reach a file in plain, hex or UTF-16 form"
        hit_cells = {h[1] for h in before["window_hits"]}
        assert len(hit_cells) == len(a_cells), "the oracle must see every one of a's cells on disk first"

        request = store.forget_subject(A)
        status = request.status()
        assert status.state == "verified", status.gaps
        assert status.gaps == ()
        scan = status.layers["scan"]
        assert scan.state == "done"
        assert scan.evidence["probes"] > 0
        assert scan.evidence["matches"] == 0
        assert scan.evidence["positive_control"] is True
        assert scan.evidence["files"] >= 1 and scan.evidence["bytes"] > 0
        for layer in ("tombstone", "keys", "rows", "wal", "index"):
            assert status.layers[layer].state == "done", layer

        after = residue(data, texts=[a.canary, A], blobs=a_cells)
        assert after["text_hits"] == []
        assert after["window_hits"] == [], "a 32-byte window of a removed ciphertext cell is still on disk"
        # ... while b's ciphertext is still found: the clean result is not a blank directory
        kept = residue(data, blobs=b_cells)["window_hits"]
        assert {h[1] for h in kept} == set(range(len(b_cells)))

        assert_gone(store, a)
        assert_write_refused(store, a)
        assert_readable(store, b)

        # purge again: idempotent, still verified, still clean
        report = store.purge()
        assert report.requests[request.id] == "verified"
        assert report.wal_truncated is True
    finally:
        store.close()
    final = residue(data, texts=[a.canary, A], blobs=a_cells)
    assert final["text_hits"] == [] and final["window_hits"] == []
    with cenotaph.open(data) as reopened:
        assert_gone(reopened, a)
        assert_readable(reopened, b)


def test_once_verified_no_file_holds_the_sealed_probes(tmp_path: Path) -> None:
    """S4: probes are kept encrypted *until verification*. Once verified, the live files must not
    hold them any more, nor the probe key that seals them: they hold the erased values' plaintext."""
    data = tmp_path / "data"
    store = cenotaph.open(data, auto_purge="off")
    try:
        populate(store, A, "A", short=4, long=1)
        populate(store, B, "B", short=2, long=0)
        request = store.forget_subject(A)
        ((sealed,),) = sql(data / DB, "SELECT probes FROM erasures WHERE id=?", [request.id])
        assert isinstance(sealed, bytes) and sealed
        assert store.purge().requests[request.id] == "verified"
        assert sql(data / DB, "SELECT probes IS NULL FROM erasures WHERE id=?", [request.id]) == [(1,)]

        # a plain copy of the main database file, as `cp` would take it now
        copy_file(data / DB, tmp_path / "copy.db")
        ((left,),) = sql(
            tmp_path / "copy.db", "SELECT probes FROM erasures WHERE id=?", [request.id], immutable=True
        )
        keys = sql(tmp_path / "copy.db", "SELECT count(*) FROM probe_keys", [], immutable=True)
        assert left is None and keys == [(0,)], "a verified request's probes or probe key are still stored"
        found = residue(data, blobs=[sealed])
        assert found["window_hits"] == [], "windows of the sealed probes are still on disk"
    finally:
        store.close()


def test_a_scope_erasure_leaves_no_byte_of_its_records_or_scope_keys(tmp_path: Path) -> None:
    """The same for a compliance forget of a's whole scope: its scope keys are destroyed too."""
    data = tmp_path / "data"
    with cenotaph.open(data, auto_purge="sync") as store:
        a = populate(store, A, "A", short=6, long=1)
        b = populate(store, B, "B", short=3, long=0)
        marks = ",".join("?" * len(a.ids))
        scope_keys = [
            row[0]
            for row in sql(
                data / DB,
                f"SELECT wrapped FROM scopes WHERE token IN (SELECT scope_token FROM records WHERE id IN ({marks}))",
                a.ids,
            )
        ]
        assert len(scope_keys) == 3  # A and its two session scopes (tenant:t is shared with b)
        # not the subject key: a scope forget erases the subtree, not the subject (who may have
        # records elsewhere)
        a_cells = cells(data / DB, a.ids, subject_keys=False) + scope_keys
        request = store.forget(A)
        assert request.status().state == "verified"
        found = residue(data, texts=[a.canary, A], blobs=a_cells)
        assert found["text_hits"] == [] and found["window_hits"] == [], found
        assert_gone(store, a)
        assert_write_refused(store, a)
        assert_readable(store, b)


def test_erasing_a_long_low_entropy_value_takes_about_as_long_as_a_random_one(tmp_path: Path) -> None:
    timings = {}
    for name, value in (("random", secrets.token_hex(20_000)), ("one-char", "x" * 40_000)):
        with cenotaph.open(tmp_path / name, auto_purge="sync") as store:
            store.write(A, "k", value)
            started = time.monotonic()
            assert store.forget_subject(A).status().state == "verified"
            timings[name] = time.monotonic() - started
    assert timings["one-char"] < 1.0 + 2 * timings["random"], timings


def test_a_stale_fragment_in_free_space_is_rewritten_away_before_verifying(tmp_path: Path) -> None:
    """Free space can hold bytes secure_delete never zeroed: a page SQLite reorganized, or (here)
    a connection that ran with secure_delete OFF and dropped a table holding a copy of a cell.
    The scan finds them in the database; purge then rewrites it (VACUUM + TRUNCATE) and scans
    again, so the request is verified with nothing left rather than stuck."""
    data = tmp_path / "data"
    with cenotaph.open(data, auto_purge="off") as store:
        a = populate(store, A, "A", short=6, long=1)
        b = populate(store, B, "B", short=6, long=1)
    a_cells = cells(data / DB, a.ids, immutable=True)
    stale = max(a_cells, key=len)
    write_sql(
        data / DB,
        [
            ("PRAGMA secure_delete=OFF", []),
            ("CREATE TABLE junk(b BLOB)", []),
            ("INSERT INTO junk VALUES (?)", [stale]),
        ],
    )
    write_sql(data / DB, [("PRAGMA secure_delete=OFF", []), ("DROP TABLE junk", [])])
    assert residue(data, blobs=[stale])["window_hits"], "the stale copy must be on disk first"
    with cenotaph.open(data, auto_purge="sync") as store:
        request = store.forget_subject(A)
        status = request.status()
        assert status.state == "verified", status.gaps
        assert_gone(store, a)
        assert_readable(store, b)
    found = residue(data, texts=[a.canary], blobs=a_cells)
    assert found["text_hits"] == [] and found["window_hits"] == []


def test_a_match_in_live_data_costs_one_rewrite_not_one_per_purge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live copy of the erased text that the store does not own (here a table someone added to
    its database file) matches a probe in live cells: no rewrite can remove it, so the request
    honestly stays unverified -- and says it is stuck, and what releases it -- and the
    whole-database rewrite runs once for it, not on every purge after."""
    data = tmp_path / "data"
    text = f"CNRYlive{secrets.token_hex(12)} kept in a table the store does not own"
    with cenotaph.open(data) as store:
        store.write(B, "k", "v")
        store.write(A, "note", text)
    write_sql(data / DB, [("CREATE TABLE junk(t TEXT)", []), ("INSERT INTO junk VALUES (?)", [text])])
    with cenotaph.open(data, auto_purge="sync") as store:
        rewrites = []
        real = store._backend.physical.rewrite

        def counted() -> bool:
            rewrites.append(1)
            return real()

        monkeypatch.setattr(store._backend.physical, "rewrite", counted)
        request = store.forget_subject(A)
        for _ in range(4):
            store.purge()
        status = request.status()
        assert status.state == "purged"  # the match is real: never verified
        assert status.stuck and status.next_step is not None and "remove that copy" in status.next_step
        assert len(rewrites) == 1
        with pytest.raises(cenotaph.ErasureNotProvableError, match="cannot verify by waiting"):
            request.wait()
