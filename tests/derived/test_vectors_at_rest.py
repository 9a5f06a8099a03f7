"""Search vectors kept at rest (index.atrest): sealed per record, read back after a restart instead of
re-embedding, bound to their record, version and embedder, shredded with the record's keys (even in an old
copy of its row) and physically gone after purge. Real SQLite files, real restarts."""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from tests.kit.oracle import scan_here
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph import Store
from cenotaph.backends import ops
from cenotaph.backends.sqlite.backend import DB_NAME
from cenotaph.backends.sqlite.schema import MIGRATIONS
from cenotaph.index.atrest import VectorCells, sealed_part
from cenotaph.index.embedder import CallableEmbedder, HashingEmbedder, embedder_id, memory_text
from cenotaph.index.search import FLUSH_MIN

from ._helpers import forget_in_child, raw_db, vector_windows

USER = "tenant:acme/user:alice"
SESSION = f"{USER}/session:s1"
TOPICS = ["cardiology appointment", "dentist visit", "gardening tomatoes", "holiday in Lisbon", "tax return"]


def _fill(store: Store, n: int = 40, scope: str = USER) -> list[cenotaph.Record]:
    return store.write_many(
        [{"scope": scope, "key": f"note{i}", "value": f"{TOPICS[i % 5]} number {i}"} for i in range(n)]
    )


def _cells(store: Store) -> dict[int, bytes]:
    with store._backend.read() as txn:
        return {v: bytes(c) for v, c in txn._c.execute("SELECT version, cell FROM vectors")}  # type: ignore[attr-defined]


def _ids(hits: list[cenotaph.SearchHit]) -> list[str]:
    return [h.record.id for h in hits]


def _opened(store: Store, entries: list[tuple[Any, ...]]) -> list[int]:
    """Which of these (id, version, scope token, wrapped, epoch, cell) entries the store can open now."""
    cells = VectorCells(store._crypto, embedder_id(store._search.embedder) or "", store._search.dim)
    out = np.zeros((len(entries), store._search.dim), dtype=np.float32)
    with store._backend.read() as txn:
        return sorted(cells.open(txn, entries, out))


def _entry(store: Store, record: cenotaph.Record) -> tuple[Any, ...]:
    with store._backend.read() as txn:
        row = txn.run(ops.Record(record.id))
        assert row is not None
        cell = txn.run(ops.VectorCell(row.version))
    assert cell is not None, "the record's vector should be at rest"
    return (row.id, row.version, row.scope_token, row.wrapped, row.epoch, cell)


@pytest.mark.sqlite_only
def test_a_restart_reads_vectors_back_instead_of_embedding(store_factory: StoreFactory) -> None:
    store = store_factory()
    records = _fill(store)
    before = {q: store.search(USER, q, k=5) for q in TOPICS}
    assert store._search.embedded == len(records)  # the first search ever embeds every record
    store = store_factory.reopen(store)  # close writes the sealed vectors
    assert len(_cells(store)) == len(records)
    after = {q: store.search(USER, q, k=5) for q in TOPICS}
    assert store._search.embedded == 0  # nothing embedded again: every vector came from its cell
    assert {q: [(h.record.id, round(h.score, 6)) for h in hits] for q, hits in after.items()} == {
        q: [(h.record.id, round(h.score, 6)) for h in hits] for q, hits in before.items()
    }
    # a record written after the restart is embedded (and only it)
    late = store.write(USER, "late", "cardiology follow-up appointment")
    assert late.id in _ids(store.search(USER, "cardiology follow-up", k=3))
    assert store._search.embedded == 1


@pytest.mark.sqlite_only
def test_vectors_are_written_in_batches_outside_writes(store_factory: StoreFactory) -> None:
    store = store_factory()
    _fill(store, 10)
    assert _cells(store) == {}  # writing never embeds or seals
    store.search(USER, "dentist")
    assert _cells(store) == {}  # fewer than FLUSH_MIN queued: kept until a batch or close
    store.write_many([{"scope": USER, "key": f"more{i}", "value": f"more {i}"} for i in range(FLUSH_MIN)])
    store.search(USER, "dentist")
    assert len(_cells(store)) == 10 + FLUSH_MIN


@pytest.mark.sqlite_only
def test_no_plain_vector_bytes_at_rest_while_cells_exist(store_factory: StoreFactory) -> None:
    canary = f"cnry{secrets.token_hex(6)}"
    store = store_factory()
    record = store.write(USER, "diet", f"vegetarian since {canary} lentil soup", metadata={"topic": "food"})
    _fill(store)
    store.search(USER, "lentil soup")
    directory = store_factory.data_dir(store)
    store.close()
    with raw_db(directory) as db:
        assert db.execute("SELECT count(*) FROM vectors").fetchone()[0] == 41  # cells really are there
    needles = {"vector": vector_windows(record.value, record.key, record.metadata)}
    result = scan_here(directory, needles)
    assert result["files"] >= 1 and result["bytes"] > 0
    assert result["matches"] == []


@pytest.mark.sqlite_only
def test_a_cell_opens_only_for_its_own_record_and_version(store_factory: StoreFactory) -> None:
    store = store_factory()
    a, b = _fill(store, 2)
    store.search(USER, "cardiology")
    store = store_factory.reopen(store)
    ea, eb = _entry(store, a), _entry(store, b)
    assert _opened(store, [ea, eb]) == [0, 1]
    assert _opened(store, [(*eb[:5], ea[5])]) == []  # a's cell on b's row
    assert _opened(store, [(ea[0], ea[1] + 1, *ea[2:])]) == []  # another version
    flipped = bytearray(ea[5])
    flipped[-20] ^= 1
    assert _opened(store, [(*ea[:5], bytes(flipped))]) == []  # a changed byte
    header = bytearray(ea[5])
    header[5] ^= 1  # the embedder stamp
    assert _opened(store, [(*ea[:5], bytes(header))]) == []
    # swapped in the database, the cell is ignored and the record embedded again, from its own value
    directory = store_factory.data_dir(store)
    store.close()
    with raw_db(directory) as db:
        db.execute("UPDATE vectors SET cell=? WHERE version=?", (ea[5], eb[1]))
    store = store_factory.reopen(store)
    assert _ids(store.search(USER, TOPICS[1], k=1)) == [b.id]
    assert store._search.embedded == 1


def _other_embedder(ident: str | None) -> CallableEmbedder:
    hashing = HashingEmbedder(dim=64)

    def reversed_rows(texts: Sequence[str]) -> Sequence[Sequence[float]]:
        # an ndarray of rows, which CallableEmbedder takes (its annotation says sequences)
        return cast(Sequence[Sequence[float]], hashing.embed(list(texts))[:, ::-1])

    return CallableEmbedder(reversed_rows, dim=64, embedder_id=ident)


@pytest.mark.sqlite_only
def test_a_store_reopened_with_another_embedder_never_uses_the_first_ones_vectors(tmp_path: Path) -> None:
    first = cenotaph.open(tmp_path, embedder=HashingEmbedder(dim=64))
    records = _fill(first)
    first.search(USER, "dentist")
    first.close()
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        mine = dict(db.execute("SELECT version, cell FROM vectors").fetchall())
    db.close()
    assert len(mine) == len(records)

    other = cenotaph.open(tmp_path, embedder=_other_embedder("reversed-hashing-64"))
    hits = other.search(USER, "dentist visit", k=3)
    assert other._search.embedded == len(records)  # same dimension, but none of the first one's cells
    expected = _other_embedder(None)
    query = expected.embed(["dentist visit"])[0]
    assert hits
    for hit in hits:  # scores are the other embedder's own
        assert hit.score == pytest.approx(float(expected.embed([_text(hit.record)])[0] @ query), abs=1e-5)
    other.close()

    back = cenotaph.open(tmp_path, embedder=HashingEmbedder(dim=64))
    back.search(USER, "dentist")
    assert back._search.embedded == len(records)  # the other embedder's cells replaced the first ones
    back.close()


def _text(record: cenotaph.Record) -> str:
    return memory_text(record.key, record.value, record.metadata)


@pytest.mark.sqlite_only
def test_an_embedder_without_an_id_keeps_nothing_at_rest(tmp_path: Path) -> None:
    store = cenotaph.open(tmp_path, embedder=_other_embedder(None))
    _fill(store)
    store.search(USER, "dentist")
    store.close()
    store = cenotaph.open(tmp_path, embedder=_other_embedder(None))
    store.search(USER, "dentist")
    assert store._search.embedded == 40
    store.close()
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        assert db.execute("SELECT count(*) FROM vectors").fetchone()[0] == 0
    db.close()


@pytest.mark.parametrize("how", ["key", "scope", "subject", "source"])
def test_a_forget_shreds_the_vector_even_in_an_old_copy_of_its_row(
    store_factory: StoreFactory, how: str
) -> None:
    """The cell as it was before the forget (a backup, a stale page) no longer opens: whichever key the
    forget destroys, the vector's key needed it. A scope, subject or source forget destroys a key the old
    row copy does not carry, so even the old copy of the row is useless; a key forget destroys the
    record's own seed, whose old wrapped copy dies with its KEK epoch (the horizon), as the record's
    ciphertext does."""
    store = store_factory()
    note = store.write(SESSION, "cardio", "cardiology appointment on Tuesday", subjects=["idp:alice"])
    source = store.write(USER, "src", "the source of a summary")
    summary = store.write(USER, "summary", "summary: cardiology on Tuesday", derived_from=[source.id])
    keep = store.write("tenant:acme/user:bob", "garden", "tomatoes in the garden")
    store.search(USER, "cardiology", include_descendants=True)
    store.search("tenant:acme/user:bob", "tomatoes")
    store = store_factory.reopen(store)
    target = summary if how == "source" else note
    old, kept = _entry(store, target), _entry(store, keep)
    assert _opened(store, [old, kept]) == [0, 1]
    if how == "key":
        store.forget(SESSION, "cardio")
    elif how == "scope":
        store.forget(SESSION)
    elif how == "subject":
        store.forget_subject("idp:alice")
    else:
        store.forget(USER, "src")  # the summary is derived from it
    with store._backend.read() as txn:
        assert txn.run(ops.VectorCell(old[1])) is None  # the live cell is deleted in the forget's statement
        row = txn.run(ops.Record(target.id))
    assert row is None or row.wrapped is None
    assert _opened(store, [(*old[:3], None, None, old[5]), kept]) == [1]  # the seed is gone
    if how == "key":
        assert _opened(store, [old]) == [0]  # the old wrapped seed: until its epoch is destroyed
        store.purge()
        store.rotate_keys()
        kept = _entry(store, keep)  # rewrapped under the new epoch; its cell still opens (same seed)
    assert _opened(store, [old, kept]) == [1]  # the old copy is undecryptable; the other record's opens
    store._keys.clear()
    assert _opened(store, [old]) == []  # and not only because of a cache
    assert _ids(store.search("tenant:acme/user:bob", "tomatoes", k=1)) == [keep.id]


@pytest.mark.sqlite_only
def test_after_purge_the_cell_bytes_are_gone_and_were_probed(store_factory: StoreFactory) -> None:
    store = store_factory()
    note = store.write(SESSION, "cardio", "cardiology appointment on Tuesday")
    _fill(store)
    store.search(USER, "cardiology", include_descendants=True)
    store = store_factory.reopen(store)
    cell = _entry(store, note)[5]
    request = store.forget(SESSION, "cardio")
    report = store.purge()
    assert request.status().state == "verified"
    assert report.scan["probes"] > 0 and report.scan["matches"] == 0
    directory = store_factory.data_dir(store)
    store.close()
    sealed = sealed_part(cell)
    assert len(sealed) > 1000
    windows = [sealed[i : i + 32] for i in range(0, len(sealed) - 32, 32)]
    assert scan_here(directory, {"cell": windows})["matches"] == []
    planted = directory.parent / "planted"
    planted.mkdir()
    (planted / "blob").write_bytes(bytes(100) + sealed + bytes(100))
    assert scan_here(planted, {"cell": windows})["matches"] == [["cell", "blob"]]  # positive control


@pytest.mark.sqlite_only
def test_the_probes_of_a_forget_include_the_sealed_cell(store_factory: StoreFactory) -> None:
    """A copy of the forgotten record's sealed vector left in the data directory keeps its request
    from verifying (the probes hold windows of it); once the copy is gone it verifies, although the
    other record's cell, with the header every cell shares, is still in the database."""
    store = store_factory()
    note = store.write(SESSION, "cardio", "cardiology appointment on Tuesday")
    other = store.write(SESSION, "garden", "gardening tomatoes in the greenhouse")
    store.search(SESSION, "cardiology")
    store = store_factory.reopen(store)  # close writes the sealed vectors
    sealed = sealed_part(_entry(store, note)[5])
    other_cell = _entry(store, other)[5]
    assert len(other_cell) > len(sealed_part(other_cell)), "a cell starts with the header cells share"
    request = store.forget(SESSION, "cardio")
    copy = store_factory.data_dir(store) / "stray-copy.bin"
    copy.write_bytes(bytes(100) + sealed + bytes(100))
    report = store.purge()
    assert report.requests[request.id] != "verified" and report.scan["matches"] > 0
    copy.unlink()
    assert store.purge().requests[request.id] == "verified"
    assert _entry(store, other)[5] == other_cell  # still in the database, shared header and all


@pytest.mark.sqlite_only
def test_a_schema_5_store_migrates_and_its_first_search_keeps_vectors(tmp_path: Path) -> None:
    store = cenotaph.open(tmp_path)
    records = _fill(store)
    store.close()
    with sqlite3.connect(tmp_path / DB_NAME) as db:  # back to schema 5: no vectors table, no triggers
        db.execute("DROP TRIGGER vectors_follow_delete")
        db.execute("DROP TRIGGER vectors_follow_forget")
        db.execute("DROP TABLE vectors")
        db.execute("PRAGMA user_version=5")
    db.close()
    store = cenotaph.open(tmp_path)
    assert _ids(store.search(USER, TOPICS[3], k=1))[0] in {r.id for r in records}
    store.write(USER, "note0", "overwritten note")  # the trigger deletes the replaced record's cell
    store.close()
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        versions = {v for (v,) in db.execute("SELECT version FROM vectors")}
        live = {v for (v,) in db.execute("SELECT version FROM records")}
    db.close()
    assert versions and versions <= live and records[0].version not in versions


@pytest.mark.sqlite_only
@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_a_cell_queued_before_another_process_forgets_is_never_written(
    store_factory: StoreFactory, mode: str
) -> None:
    """This process embedded and sealed a record's vector; another process forgets the record before the
    cell is written: the write finds the record hidden (and its key destroyed) and keeps nothing."""
    store = store_factory()
    note = store.write(SESSION, "cardio", "cardiology appointment on Tuesday")
    other = store.write(USER, "garden", "tomatoes in the garden")
    store.search(USER, "cardiology tomatoes", include_descendants=True)  # two cells queued, none written
    assert _cells(store) == {}
    forget_in_child(store_factory.location(store), SESSION, "cardio", mode)
    directory = store_factory.data_dir(store)
    store.close()  # writes the queued cells
    with raw_db(directory) as db:
        versions = {v for (v,) in db.execute("SELECT version FROM vectors")}
    assert versions == {other.version}
    assert note.version not in versions


@pytest.mark.sqlite_only
def test_store_vectors_keeps_only_cells_of_live_unchanged_records(store_factory: StoreFactory) -> None:
    store = store_factory()
    a, b, c = _fill(store, 3)
    with store._backend.write() as txn:
        stored = txn.run(
            ops.StoreVectors(
                [(b"cell-a", a.id, a.version), (b"cell-b", b.id, b.version + 1), (b"cell-c", a.id, c.version)]
            )
        )
    assert stored == 1 and _cells(store) == {a.version: b"cell-a"}  # wrong version, wrong id: refused
    store.forget(USER, "note0", mode="operational")
    assert _cells(store) == {}  # hiding the record deleted its cell
    with store._backend.write() as txn:
        assert (
            txn.run(ops.StoreVectors([(b"cell-a", a.id, a.version)])) == 0
        )  # and a hidden record takes none
