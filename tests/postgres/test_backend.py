"""The PostgreSQL backend alone, over the shared server, each test in a fresh schema: migrations,
write serialisation across processes, read snapshots, the change marker, the transaction's
methods (against SQLite's, call for call) and error translation."""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cenotaph
from cenotaph.backends import ops
from cenotaph.backends.base import (
    BUSY_TIMEOUT_ENV,
    Backend,
    ErasureRow,
    LineageRow,
    RecordRow,
    ScopeKeyRow,
    Txn,
)
from cenotaph.backends.postgres import PostgresBackend, open_postgres
from cenotaph.backends.postgres.backend import advisory_key
from cenotaph.backends.postgres.schema import LATEST, NUMBERS
from cenotaph.backends.postgres.txn import PostgresTxn
from cenotaph.backends.sqlite.backend import SQLiteBackend, SQLiteTxn
from cenotaph.errors import InvalidValueError, StorageError

from ._cluster import _free_port

Open = Callable[[], PostgresBackend]
SRC = str(Path(cenotaph.__file__).resolve().parents[1])


def _tok(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


# -- migrations --------------------------------------------------------------------------
def _applied(dsn: str, schema: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f'SELECT version FROM "{schema}".schema_migrations ORDER BY version').fetchall()
    return [int(r[0]) for r in rows]


def test_migrations_run_once_and_reopening_keeps_the_rows(
    open_backend: Open, pg_dsn: str, pg_schema: str
) -> None:
    first = open_backend()
    assert _applied(pg_dsn, pg_schema) == sorted(NUMBERS)
    with first.write() as txn:
        txn.set_meta("kept", 7)
        txn.advance("clock", 41)
    first.close()
    again = open_backend()
    assert _applied(pg_dsn, pg_schema) == sorted(NUMBERS)
    with again.read() as txn:
        assert txn.meta("kept") == 7
        assert txn.count("clock") == 41


def test_a_schema_newer_than_this_code_is_refused(open_backend: Open, pg_dsn: str, pg_schema: str) -> None:
    open_backend().close()
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f'INSERT INTO "{pg_schema}".schema_migrations (version) VALUES ({LATEST + 1})')
    with pytest.raises(StorageError, match="newer than this cenotaph knows"):
        open_backend()


def test_stores_in_two_schemas_do_not_see_each_other(open_backend: Open, pg_dsn: str, pg_schema: str) -> None:
    other_schema = f"{pg_schema}_b"
    mine = open_backend()
    other = open_postgres(pg_dsn, schema=other_schema)
    try:
        with mine.write() as txn:
            txn.set_meta("only_here", 1)
        with other.read() as txn:
            assert txn.meta("only_here") is None
        assert advisory_key(pg_schema) != advisory_key(other_schema)
    finally:
        other.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{other_schema}" CASCADE')


def test_a_bad_schema_name_is_refused(pg_dsn: str) -> None:
    with pytest.raises(InvalidValueError, match="at most 63 bytes"):
        open_postgres(pg_dsn, schema="s" * 64)
    with pytest.raises(InvalidValueError, match="non-empty"):
        open_postgres(pg_dsn, schema="")


# -- write serialisation across processes ----------------------------------------------------
_HOLDER = """
import sys
from cenotaph.backends.postgres import open_postgres
backend = open_postgres(sys.argv[1], schema=sys.argv[2])
with backend.write() as txn:
    txn.set_meta("holder", 1)
    print("locked", flush=True)
    sys.stdin.readline()
backend.close()
print("done", flush=True)
"""


@pytest.fixture
def holder(pg_dsn: str, pg_schema: str, open_backend: Open) -> Iterator[subprocess.Popen[str]]:
    """A child process inside a write transaction of the test's store, until it reads a line."""
    open_backend()  # the schema exists before the child races to create it
    env = {**os.environ, "PYTHONPATH": SRC}
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, pg_dsn, pg_schema],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


def _release(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "done"


def test_a_write_waits_for_another_process_s_write(holder: subprocess.Popen[str], open_backend: Open) -> None:
    backend = open_backend()
    entered = threading.Event()
    seen: list[int | None] = []

    def write() -> None:
        with backend.write() as txn:
            entered.set()
            seen.append(txn.meta("holder"))  # READ COMMITTED after the lock: the child's commit

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert not entered.wait(0.7), "the write began while another process held the write lock"
    finally:
        _release(holder)
        writer.join(timeout=30)
    assert entered.is_set()
    assert seen == [1]


def test_a_write_kept_waiting_too_long_is_a_busy_error(
    holder: subprocess.Popen[str], open_backend: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = open_backend()
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, "300")
    started = time.monotonic()
    with pytest.raises(StorageError, match=f"locked by another writer.*{BUSY_TIMEOUT_ENV}"), backend.write():
        pass
    assert 0.25 < time.monotonic() - started < 10
    _release(holder)
    with backend.write() as txn:  # the connection that timed out is usable again
        assert txn.meta("holder") == 1


# -- snapshots and the change marker ---------------------------------------------------------
def test_a_read_sees_one_snapshot(open_backend: Open) -> None:
    reader, writer = open_backend(), open_backend()
    with reader.read() as txn:
        before = txn.count("clock")
        with writer.write() as other:
            other.advance("clock", before + 5)
            other.set_meta("late", 1)
        assert txn.count("clock") == before  # committed meanwhile, not in this snapshot
        assert txn.meta("late") is None
    with reader.read() as txn:
        assert txn.count("clock") == before + 5


def test_the_marker_moves_for_other_backends_commits_not_its_own(open_backend: Open) -> None:
    mine, theirs = open_backend(), open_backend()
    first = mine.marker()
    assert mine.marker() == first
    with mine.write() as txn:
        txn.set_meta("x", 1)
        assert txn.marker() == first  # its own pending bump is its own too
    assert mine.marker() == first, "its own commit counted as another's"
    with theirs.write() as txn:
        txn.set_meta("x", 2)
    second = mine.marker()
    assert second != first
    with theirs.write() as txn:  # another's commit, then ours: ours does not hide the other's
        txn.set_meta("x", 3)
    with mine.write() as txn:
        txn.set_meta("x", 4)
    assert mine.marker() not in (first, second)


def test_a_snapshot_s_marker_is_the_marker_of_its_snapshot(open_backend: Open) -> None:
    mine, theirs = open_backend(), open_backend()
    before = mine.marker()
    with mine.read() as txn:
        seen, rows = txn.key_records([_tok("s")], _tok("k"))
        assert rows == [] and seen == before == txn.marker()
        with theirs.write() as other:
            other.set_meta("x", 1)
        assert txn.marker() == before  # committed after the snapshot began
    with mine.read() as txn:
        after, _ = txn.key_records([_tok("s")], _tok("k"))
    assert after != before and after == mine.marker()


def test_the_clock_the_marker_and_a_statement_are_one_read(open_backend: Open) -> None:
    """``clock_marker_then`` (a forget's survey): the settled clock read before the snapshot, the
    marker of that snapshot and the statement's rows in it, as ``ClockMarker`` then the statement
    give (in one round trip: ``test_round_trips`` counts the forget's)."""
    mine, theirs = open_backend(), open_backend()
    with theirs.write() as other:
        other.advance("clock", 7)
        other.set_meta("x", 1)
    with mine.read() as txn:
        expected = txn.run(ops.ClockMarker())
    with mine.read() as txn:
        clock, marker, x = txn.clock_marker_then(ops.Meta("x"))
    assert (clock, marker, x) == (*expected, 1) and clock >= 7
    with theirs.write() as other:
        other.set_meta("x", 2)
    with mine.read() as txn:
        again, moved, x = txn.clock_marker_then(ops.Meta("x"))
    assert again == clock and moved != marker and x == 2


def test_after_commit_runs_after_commit_and_not_on_rollback(open_backend: Open) -> None:
    backend, other = open_backend(), open_backend()
    seen: list[int | None] = []

    def look() -> None:
        with other.read() as txn:
            seen.append(txn.meta("done"))

    with backend.write() as txn:
        txn.set_meta("done", 1)
        txn.after_commit(look)
    assert seen == [1]
    with pytest.raises(RuntimeError, match="boom"), backend.write() as txn:
        txn.set_meta("done", 2)
        txn.after_commit(look)
        raise RuntimeError("boom")
    assert seen == [1]
    with backend.read() as txn:
        assert txn.meta("done") == 1
        with pytest.raises(RuntimeError, match="needs a write"):
            txn.after_commit(look)


def test_savepoints_undo_one_write_and_keep_the_rest(open_backend: Open) -> None:
    backend = open_backend()
    with backend.write() as txn:
        txn.savepoint()
        txn.set_meta("kept", 1)
        txn.release_savepoint()
        txn.savepoint()
        txn.set_meta("undone", 1)
        txn.rollback_to_savepoint()
        txn.savepoint()  # the name is free again after the rollback
        txn.release_savepoint()
    with backend.read() as txn:
        assert txn.meta("kept") == 1
        assert txn.meta("undone") is None


def test_a_write_inside_a_write_is_refused_and_a_read_inside_reads_it(open_backend: Open) -> None:
    backend = open_backend()
    with backend.write() as txn:
        txn.set_meta("inner", 1)
        assert backend.in_transaction()
        with backend.read() as inner:
            assert inner.meta("inner") == 1  # the write's own, uncommitted row
        with pytest.raises(StorageError, match="already inside a transaction"), backend.write():
            pass
    assert not backend.in_transaction()


def test_a_constraint_violation_is_a_storage_error(open_backend: Open) -> None:
    backend = open_backend()
    with backend.write() as txn:
        txn.insert_reauth(b"d" * 32, "scope", b"t" * 32, 1)
    with pytest.raises(StorageError, match="constraint refused"), backend.write() as txn:
        txn.insert_reauth(b"d" * 32, "scope", b"t" * 32, 2)
    with backend.read() as txn:
        assert txn.reauth(b"d" * 32) == ("scope", b"t" * 32, 1, None, None)


# -- the transaction's methods: SQLite's, call for call --------------------------------------
def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") or name == "__init__"
    }


def test_every_sqlite_txn_method_exists_with_the_same_signature() -> None:
    sqlite, postgres = _public(SQLiteTxn), _public(PostgresTxn)
    assert sorted(sqlite) == sorted(postgres)
    for name, signature in sqlite.items():
        if name != "__init__":  # the connection's type differs, nothing else
            assert postgres[name] == signature, name
    protocol = {n for n, _ in inspect.getmembers(Txn, inspect.isfunction) if not n.startswith("_")}
    assert protocol <= set(postgres)


def test_every_backend_method_exists() -> None:
    protocol = {n for n, _ in inspect.getmembers(Backend, inspect.isfunction) if not n.startswith("_")}
    assert protocol <= {n for n, _ in inspect.getmembers(PostgresBackend) if not n.startswith("_")}


S1, S2, S3, K1, K2, SUBJECT = (_tok(n) for n in ("s1", "s2", "s3", "k1", "k2", "subject"))


def _setup(txn: SQLiteTxn | PostgresTxn) -> None:
    txn.insert_scopes(
        [ScopeKeyRow(S1, None, b"ws1", 1), ScopeKeyRow(S2, S1, b"ws2", 1), ScopeKeyRow(S3, S2, b"w3", 2)]
    )
    txn.insert_subjects([(SUBJECT, b"wsub", 1)])
    txn.insert_records(
        [
            RecordRow("r1", S1, K1, 1, None, None, b"wr1", 1, b"ct1", None),
            RecordRow("r2", S2, K1, 2, 99.5, None, b"wr2", 2, b"ct2", b"vec2"),
            RecordRow("r3", S2, K2, 3, None, None, b"wr3", 1, b"ct3", None),
        ],
        [
            LineageRow("r1", S1, K1, 1, b"wl1", 1, SUBJECT, b"sealed-subjects", ()),
            LineageRow("r2", S2, K1, 2, b"wl2", 2, b"", None, ("r1",)),
            LineageRow("r3", S2, K2, 3, b"wl3", 1, SUBJECT + _tok("other"), b"s3", ("r2",)),
        ],
    )
    # a slot written twice: its record row is the newest version's, its lineage keeps both
    txn.insert_records(
        [RecordRow("r4", S1, K2, 4, None, None, b"wr4", 1, b"ct4", None)],
        [LineageRow("r4", S1, K2, 4, b"wl4", 1, b"", None, ())],
    )
    txn.delete_records(["r4"])
    txn.insert_records(
        [RecordRow("r5", S1, K2, 5, None, None, b"wr5", 1, b"ct5", None)],
        [LineageRow("r5", S1, K2, 5, b"wl5", 1, b"", None, ())],
    )
    txn.advance("clock", 5)
    txn.insert_tombstones([(S3, 4, "scope", "er_one"), (S3, 4, "scope", "er_one")])
    txn.insert_lift(S3, 5)
    txn.insert_reauth(b"d" * 32, "scope", S3, 5, SUBJECT)
    txn.insert_erasure(
        ErasureRow(
            "er_one",
            "compliance",
            "scope",
            S3,
            4,
            "2024-01-01T00:00:00Z",
            "pending",
            '{"tombstone": {"state": "done", "evidence": {}}}',
            '{"ids": ["r9"]}',
            b"probes",
            None,
            None,
            None,
            None,
            applied=1,
        )
    )
    txn.insert_probe_key("er_one", b"probe-wrapped", 2)
    txn.append_audit(1, '{"kind": "forget", "id": "er_one"}')


def _reads(txn: SQLiteTxn | PostgresTxn) -> dict[str, Any]:
    _, keyed = txn.key_records([S1, S2, S3], K1)
    _, rewritten = txn.key_records([S1, S2], K2)
    return {
        "clock": txn.count("clock"),
        "meta": txn.meta_all(),
        "forget_epoch": txn.count("forget_epoch"),
        "tombstones": txn.tombstone_versions([S1, S3]),
        "lifts": txn.lift_versions([S3]),
        "all_lifts": txn.all_lifts(),
        "all_reauths": txn.all_reauths(),
        "reauth": txn.reauth(b"d" * 32),
        "unhidden": txn.unhidden(["r1", "r2", "r3", "nope"]),
        "keyed": txn.keyed(["r1", "r2", "r3"]),
        "scope_rows": txn.scope_rows([S1, S2, S3, K1]),
        "subject_rows": txn.subject_rows([SUBJECT]),
        "subtree": txn.subtree_tokens(S1),
        "subtree_rows": txn.subtree_rows(S1),
        "chain_rows": txn.scope_chain_rows(S2),
        "slots": txn.records_in_slots([(S1, K1), (S2, K1), (S2, K2), (S3, K1), (S1, K1), (S1, K2)]),
        "one_slot": txn.records_in_slots([(S2, K2)]),
        "key_records": keyed,
        "key_records_rewritten": rewritten,
        "record": txn.record("r2"),
        "no_record": txn.record("nope"),
        "in_scopes": txn.records_in_scopes([S2, S3]),
        "live": list(txn.live_records()),
        "live_after": list(txn.live_records(1)),
        "live_vectors": txn.live_vectors(),
        "cell": txn.vector_cell(1),
        "lineage": txn.lineage(["r1", "r2", "r3"]),
        "lineage_tokens": txn.lineage_tokens(["r1", "r3"]),
        "lineage_keyed": txn.lineage_keyed(["r1", "r2", "r3"]),
        "lineage_ids": txn.lineage_ids([S1, S2], None),
        "lineage_ids_key": txn.lineage_ids([S2], K2, unforgotten=True),
        "for_subject": txn.lineage_ids_for_subject(SUBJECT),
        "closure": txn.derived_closure(["r1"]),
        "written_since": txn.written_since(1),
        "unforgotten_c": txn.unforgotten_in_scopes([S1, S2], None, 10, compliance=True),
        "unforgotten_o": txn.unforgotten_in_scopes([S2], K1, 10, compliance=False),
        "unforgotten_subject": txn.unforgotten_for_subject(SUBJECT, 10, compliance=True),
        "live_in_subtree": sorted(txn.live_in_subtree(S1, 10)),
        "live_in_subtree_limited": len(txn.live_in_subtree(S1, 1)),
        "scope_lineage": list(txn.scope_lineage(S2)),
        "subject_lineage": list(txn.subject_lineage(SUBJECT)),
        "existing": txn.existing_records(["r1", "r2", "r3", "nope"]),
        "plain_id": txn.plaintext_holds(b"er_one"),
        "plain_audit": txn.plaintext_holds(b'"kind": "forget"'),
        "plain_cipher": txn.plaintext_holds(b"ct1"),
        "erased": txn.erased_version("r1"),
        "wrapped_keys": txn.wrapped_keys(),
        "epochs": txn.epochs_in_use(),
        "probe_key": txn.probe_key("er_one"),
        "probe_epochs": txn.probe_key_epochs(),
        "erasure": txn.erasure("er_one"),
        "layers": txn.erasure_layers("er_one"),
        "erasures": txn.erasures(),
        "pending": txn.erasures(["pending", "verified"]),
        "erasure_ids": txn.erasure_ids(),
        "unapplied": txn.unapplied_erasures(),
        "cursor": txn.apply_cursor("er_one"),
        "purge_progress": txn.purge_progress("er_one"),
        "audit_tail": txn.audit_tail(),
        "audit": txn.audit_entries(),
    }


def _hidden(txn: SQLiteTxn | PostgresTxn) -> list[tuple[Any, ...]]:
    rows = txn._run("SELECT id, hidden_version, hidden_mode FROM records ORDER BY id").fetchall()
    return [tuple(r) for r in rows]


def _changes(txn: SQLiteTxn | PostgresTxn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["vectors_kept"] = txn.store_vectors([(b"cell1", "r1", 1), (b"cell3", "r3", 3), (b"stale", "r2", 7)])
    txn.hide_records(["r3", "nope"], 6, "operational")
    out["hidden"] = _hidden(txn)
    txn.hide_records(["r3"], 7, "operational")  # hidden already: its version stays 6
    out["hidden_again"] = _hidden(txn)
    txn.destroy_record_keys(["r2"], 8)
    txn.destroy_keys([S3], [_tok("never")], 8)
    txn.advance("forget_epoch")
    txn.set_meta("custom", 3)
    txn.set_meta("custom", 4)
    txn.consume_reauth(b"d" * 32, 8)
    txn.replace_scope_key(S1, b"ws1-new", 3)
    txn.replace_subject_key(SUBJECT, b"wsub-new", 3)
    txn.update_erasure("er_one", state="verified", verified_at="2024-01-02T00:00:00Z")
    txn.set_applied("er_one", None)
    txn.set_purge_progress("er_one", 2, 5)
    out["mid"] = _reads(txn)
    txn.set_purge_progress("er_one", None)
    txn.rewrap([("records", 1, b"wr1-re", 3), ("lineage", "r1", b"wl1-re", 3), ("scopes", S2, b"ws2-re", 3)])
    out["purged"] = txn.purge_erased(["r2", "nope"], [S3], [_tok("never")], 9)
    out["deleted_hidden"] = txn.delete_hidden(["r1", "r3"])
    txn.delete_probe_key("er_one")
    txn.insert_erasure(
        ErasureRow(
            "er_one", "operational", "key", S1, 4, "t", "done", "{}", "{}", None, "h", "why", "v", "{}"
        ),
        replace=True,
    )
    txn.insert_erasure(
        ErasureRow("er_one", "ignored", "key", S1, 4, "t", "done", "{}", "{}", None, None, None, None, None)
    )
    return out


def _run(backend: SQLiteBackend | PostgresBackend) -> dict[str, Any]:
    with backend.write() as txn:
        _setup(txn)
    with backend.read() as txn:
        before = _reads(txn)
    with backend.write() as txn:
        changed = _changes(txn)
    with backend.write() as txn:
        swept = txn.sweep_expired(100.0, 10)
        txn.delete_records(["r1"])
    with backend.read() as txn:
        after = _reads(txn)
    return {"before": before, **changed, "swept": swept, "after": after}


def _unordered(value: Any) -> Any:
    """Results whose order the contract leaves open, put in one order (both backends agree on
    what is in them, not on how a scan happened to order them)."""
    if isinstance(value, dict):
        return {k: _unordered(v) for k, v in value.items()}
    if isinstance(value, list | set):
        return sorted((_unordered(v) for v in value), key=repr)
    return value


def test_every_method_gives_what_sqlite_gives(open_backend: Open, tmp_path: Path) -> None:
    sqlite = SQLiteBackend(tmp_path)
    try:
        expected = _run(sqlite)
    finally:
        sqlite.close()
    got = _run(open_backend())
    assert got["after"]["audit"] == expected["after"]["audit"]  # ordered by sequence
    expected, got = _unordered(expected), _unordered(got)
    for phase in ("before", "mid", "after"):
        for name, value in expected[phase].items():
            assert got[phase][name] == value, f"{phase}: {name}"
    assert got == expected


def test_live_records_come_in_version_order(open_backend: Open) -> None:
    backend = open_backend()
    rows = [RecordRow(f"r{v}", _tok(f"s{v}"), K1, v, None, None, b"w", 1, b"c", None) for v in (5, 3, 9, 1)]
    lineage = [LineageRow(r.id, r.scope_token, K1, r.version, b"w", 1, b"", None, ()) for r in rows]
    with backend.write() as txn:
        txn.insert_records(rows, lineage)
    with backend.read() as txn:
        assert [r.version for r in txn.live_records()] == [1, 3, 5, 9]
        assert [v[1] for v in txn.live_vectors()] == [1, 3, 5, 9]


def test_a_cell_goes_with_its_record(open_backend: Open) -> None:
    backend = open_backend()
    rows = [RecordRow(f"r{v}", _tok(f"s{v}"), K1, v, None, None, b"w", 1, b"c", None) for v in (1, 2, 3)]
    lineage = [LineageRow(r.id, r.scope_token, K1, r.version, b"w", 1, b"", None, ()) for r in rows]
    with backend.write() as txn:
        txn.insert_records(rows, lineage)
        assert txn.store_vectors([(b"c1", "r1", 1), (b"c2", "r2", 2), (b"c3", "r3", 3)]) == 3
        txn.hide_records(["r1"], 4, "operational")
        txn.destroy_record_keys(["r2"], 4)
        txn.rewrap([("records", 3, b"w-new", 2)])  # a rewrap keeps the record live: its cell stays
        assert [txn.vector_cell(v) for v in (1, 2, 3)] == [None, None, b"c3"]
        txn.delete_records(["r3"])
        assert txn.vector_cell(3) is None


# -- errors ----------------------------------------------------------------------------------
def test_a_closed_port_is_named_without_the_password() -> None:
    port = _free_port()
    secret = "s3cr3t-Pa55"
    with pytest.raises(StorageError) as caught:
        open_postgres(f"postgresql://postgres:{secret}@127.0.0.1:{port}/test", schema="x")
    message = str(caught.value)
    assert f"cannot reach PostgreSQL at 127.0.0.1:{port}" in message
    assert "check it is running" in message
    assert secret not in message


def test_a_malformed_address_is_refused_without_quoting_it() -> None:
    secret = "s3cr3t-Pa55"
    with pytest.raises(StorageError, match="malformed") as caught:
        open_postgres(f"postgresql://postgres:{secret}@[127.0.0.1/test", schema="x")
    assert secret not in str(caught.value)
    assert caught.value.__cause__ is None  # libpq's own text quotes the whole address
    with pytest.raises(StorageError, match="malformed") as caught:
        open_postgres(
            "postgresql://postgres@127.0.0.1/test", schema="x", replicas=[f"postgresql://u:{secret}@[x"]
        )
    assert secret not in str(caught.value)


def test_a_missing_database_is_named(pg_dsn: str) -> None:
    secret = "s3cr3t-Pa55"
    parts = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname="no_such_db_here", password=secret)
    with pytest.raises(StorageError, match='database "no_such_db_here" does not exist') as caught:
        open_postgres(dsn, schema="x")
    assert secret not in str(caught.value)
    assert f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}" in str(caught.value)


def test_a_lost_connection_is_translated_and_the_next_transaction_reconnects(
    open_backend: Open, pg_dsn: str
) -> None:
    backend = open_backend()
    with backend.read() as txn:
        pid = txn._c.info.backend_pid
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 30000)", (pid,))  # returns once it has ended
    with backend.write() as txn:  # the dead pooled connection is dropped at BEGIN, another used
        txn.set_meta("after", 1)
    with backend.read() as txn:
        pid = txn._c.info.backend_pid
        assert txn.meta("after") == 1
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 30000)", (pid,))  # returns once it has ended
    with backend.read() as txn:  # a read begins with its first statement: dropped there
        assert txn.meta("after") == 1
    with pytest.raises(StorageError, match="cannot reach PostgreSQL"), backend.read() as txn:
        assert txn.meta("after") == 1
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 30000)", (txn._c.info.backend_pid,))
        txn.meta("after")
    with backend.read() as txn:
        assert txn.meta("after") == 1


# -- physical --------------------------------------------------------------------------------
def test_without_replicas_a_reclaim_is_done_and_a_rewrite_keeps_the_rows(open_backend: Open) -> None:
    backend = open_backend()
    with backend.write() as txn:
        txn.set_meta("kept", 1)
    reclaimed = backend.physical.reclaim()
    assert reclaimed.done and reclaimed.layers["replicas"].evidence == {"replicas": 0}
    assert backend.physical.rewrite()
    with backend.read() as txn:
        assert txn.meta("kept") == 1
    assert backend.physical.scan_sources().roots == {}
    assert backend.physical.scan_sources().gaps  # the server's files, named


def test_an_unreachable_replica_keeps_the_replicas_layer_pending(pg_dsn: str, pg_schema: str) -> None:
    port, secret = _free_port(), "s3cr3t-Pa55"
    backend = open_postgres(
        pg_dsn, schema=pg_schema, replicas=[f"postgresql://u:{secret}@127.0.0.1:{port}/x"]
    )
    try:
        reclaimed = backend.physical.reclaim()
    finally:
        backend.close()
    assert not reclaimed.done
    evidence = reclaimed.layers["replicas"].evidence
    assert evidence["replicas_behind"] == 1 and evidence["unreachable"] == [f"127.0.0.1:{port}"]
    assert secret not in repr(evidence)
