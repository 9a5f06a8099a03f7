"""The record layout (schema 8): records and lineage rows keyed by version, a record id indexed
once (in lineage), a name once (lineage_slot); a slot's record row is its newest version's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import cenotaph
from cenotaph.backends.sql import SQLITE
from cenotaph.backends.sql.handlers import by_ids
from cenotaph.backends.sqlite import backend
from cenotaph.backends.sqlite.backend import DB_NAME

SCOPE = "tenant:acme/user:alice"


def _plan(db: sqlite3.Connection, sql: str, args: tuple[object, ...]) -> list[str]:
    return [str(row[3]) for row in db.execute("EXPLAIN QUERY PLAN " + sql, args)]


def test_the_tables_are_keyed_by_version_and_each_name_is_indexed_once(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path) as store:
        store.write(SCOPE, "k", 1)
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        for table in ("records", "lineage"):
            columns = {row[1]: row[5] for row in db.execute(f"PRAGMA table_info({table})")}
            assert columns["version"] == 1, table  # the primary key
        indexes = {
            name: sql for name, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type='index'")
        }
        on_records = [n for n, sql in indexes.items() if sql and " ON records" in sql]
        assert sorted(on_records) == ["records_expiry", "records_hidden"]  # partial: only rows that have one
        assert not [n for n in indexes if n.startswith("sqlite_autoindex_records")]
        assert [n for n in indexes if n.startswith("sqlite_autoindex_lineage")]  # record_id, once
    db.close()


@pytest.mark.parametrize("scopes", [1, 2, 3])
def test_reads_and_purges_find_rows_through_indexes_only(tmp_path: Path, scopes: int) -> None:
    with cenotaph.open(tmp_path) as store:
        store.write(SCOPE, "k", 1)
    ids = tuple(f"id{i}" for i in range(3))
    statements = [
        (backend._SLOT_SQL[scopes], (b"k", *[b"s"] * scopes)),
        (f"SELECT * FROM records WHERE {by_ids(SQLITE, 3)}", ids),
        (f"DELETE FROM records WHERE {by_ids(SQLITE, 3)}", ids),
        (f"UPDATE records SET wrapped=NULL WHERE {by_ids(SQLITE, 3)}", ids),
    ]
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        for sql, args in statements:
            plan = _plan(db, sql, args)
            assert not [step for step in plan if step.startswith("SCAN") and "VIRTUAL TABLE" not in step], (
                plan
            )
    db.close()


def test_a_key_rewritten_many_times_keeps_one_record_row_and_reads_its_newest(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path, auto_purge="sync") as store:
        first = store.write(SCOPE, "k", 0)
        for n in range(1, 40):
            store.write(SCOPE, "k", n)
        store.write(f"{SCOPE}/session:s1", "k", "inner")
        got = store.read(SCOPE, "k")
        assert got is not None and got.value == 39
        inner = store.read(f"{SCOPE}/session:s1", "k")
        assert inner is not None and inner.value == "inner"
        assert store.get(first.id) is None  # an overwritten version has no record row
        assert [r.value for r in store.list(SCOPE)] == [39]
        with sqlite3.connect(tmp_path / DB_NAME) as db:
            assert db.execute("SELECT count(*) FROM records").fetchone()[0] == 2
            assert db.execute("SELECT count(*) FROM lineage").fetchone()[0] == 41
        db.close()
        # the newest version forgotten and purged: the slot has no record row and its older
        # versions (lineage only) answer nothing
        assert store.forget(SCOPE, "k").status().state == "verified"
        assert store.read(SCOPE, "k") is None
        assert store.read(f"{SCOPE}/session:s1", "k") is None  # the subtree's copy went too
        with sqlite3.connect(tmp_path / DB_NAME) as db:
            assert db.execute("SELECT count(*) FROM records").fetchone()[0] == 0
        db.close()
        token = store.reauthorize(SCOPE, "k")
        store.write(SCOPE, "k", "again", reauthorization=token)
        again = store.read(SCOPE, "k")
        assert again is not None and again.value == "again"
    with cenotaph.open(tmp_path) as store:
        again = store.read(SCOPE, "k")
        assert again is not None and again.value == "again"


def test_a_batch_draws_a_fresh_nonce_for_every_seal_and_a_fresh_id_and_seeds(tmp_path: Path) -> None:
    """One urandom call per batch is sliced into each record's id, seeds and nonces: no two
    seals of the batch (or of two batches) share a nonce, no two records an id."""
    with cenotaph.open(tmp_path) as store:
        for batch in range(2):
            written = store.write_many(
                [
                    {"scope": f"{SCOPE}/session:s{i % 3}", "key": f"k{batch}-{i}", "value": i}
                    for i in range(300)
                ]
            )
            assert len({r.id for r in written}) == 300
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        blobs = [
            bytes(blob)
            for sql in (
                "SELECT wrapped FROM records",
                "SELECT ciphertext FROM records",
                "SELECT wrapped FROM lineage",
                "SELECT subjects FROM lineage",
            )
            for (blob,) in db.execute(sql)
        ]
    db.close()
    assert len(blobs) == 4 * 600
    nonces = [blob[:12] for blob in blobs]
    assert len(set(nonces)) == len(nonces)
