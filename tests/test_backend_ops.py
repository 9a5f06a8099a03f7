"""The logical backend contract: operations as data, run through one dispatch table.

Every operation of ``backends.ops`` has a handler on the SQLite transaction taking its fields;
a read transaction refuses an operation that writes (and the rows stay as they were).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

import cenotaph
from cenotaph.backends import ops
from cenotaph.backends.sqlite.backend import SQLiteBackend, SQLiteTxn
from cenotaph.errors import StorageError

SCOPE = "tenant:acme/user:alice"


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[SQLiteBackend]:
    opened = SQLiteBackend(tmp_path)
    yield opened
    opened.close()


@pytest.mark.parametrize("op", ops.OPS, ids=lambda op: op.__name__)
def test_every_operation_has_a_handler_taking_its_fields(op: type[ops.Op[object]]) -> None:
    handler = getattr(SQLiteTxn, ops.handler_name(op))
    params = list(inspect.signature(handler).parameters)[1:]
    assert params == [f.name for f in fields(op)]  # type: ignore[arg-type]
    assert isinstance(op.writes, bool)


def test_the_handler_name_is_the_snake_case_of_the_operation() -> None:
    assert ops.handler_name(ops.ScopeRows) == "scope_rows"
    assert ops.handler_name(ops.MetaAll) == "meta_all"
    assert ops.handler_name(ops.Count) == "count"


def test_a_runner_missing_a_handler_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match="Partial has no handler"):

        class Partial(ops.OpRunner):  # no handlers at all
            pass


def test_a_handler_taking_other_parameters_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match=r"Wrong.meta\(\) must take Meta's fields \['name'\]"):

        class Wrong(SQLiteTxn):
            def meta(self, key: str) -> int | None:
                return None


def test_operations_are_frozen_and_slotted() -> None:
    op = ops.SetMeta("name", 1)
    with pytest.raises(AttributeError):
        op.value = 2  # type: ignore[misc]
    assert not hasattr(op, "__dict__")


def test_a_read_transaction_refuses_an_operation_that_writes(backend: SQLiteBackend) -> None:
    with backend.read() as txn, pytest.raises(RuntimeError, match="SetMeta writes"):
        txn.run(ops.SetMeta("probe", 7))
    with backend.read() as txn:
        assert txn.run(ops.Meta("probe")) is None, "the refused write left a row"


def test_a_write_transaction_runs_both_kinds(backend: SQLiteBackend) -> None:
    with backend.write() as txn:
        txn.run(ops.SetMeta("probe", 7))
        assert txn.run(ops.Meta("probe")) == 7
    with backend.read() as txn:
        assert txn.run(ops.MetaAll())["probe"] == 7


def test_keyword_only_and_mapping_fields_reach_their_handlers(backend: SQLiteBackend) -> None:
    with backend.write() as txn:
        assert txn.run(ops.LineageIds([b"\0" * 32], None, unforgotten=True)) == []
        assert txn.run(ops.UnforgottenForSubject(b"\0" * 32, 10, compliance=True)) == []
        txn.run(ops.UpdateErasure("er_none", {"state": "verified"}))  # no such row: no error


def test_an_unknown_operation_is_a_type_error(backend: SQLiteBackend) -> None:
    with backend.read() as txn, pytest.raises(TypeError, match="not an operation"):
        txn.run(object())  # type: ignore[arg-type]


# -- read snapshots -------------------------------------------------------------------------


def test_a_read_block_is_one_snapshot(tmp_path: Path) -> None:
    """A write another store commits between two reads of one block is not seen by the second."""
    with cenotaph.open(tmp_path) as reader, cenotaph.open(tmp_path) as writer:
        reader.write(SCOPE, "before", "x")
        with reader._backend.read() as txn:
            clock = txn.run(ops.Count("clock"))
            rows = len(list(txn.run(ops.LiveRecords())))
            writer.write(SCOPE, "during", "y")  # another connection commits meanwhile
            assert txn.run(ops.Count("clock")) == clock, "the second read saw a later commit"
            assert len(list(txn.run(ops.LiveRecords()))) == rows
        with reader._backend.read() as txn:  # the next block is a new snapshot
            assert txn.run(ops.Count("clock")) > clock
            assert len(list(txn.run(ops.LiveRecords()))) == rows + 1


def test_a_read_block_ends_its_snapshot(tmp_path: Path) -> None:
    """No reader outlives its block: a TRUNCATE checkpoint right after it empties the WAL, and
    one while another connection's block is open cannot."""
    first, second = SQLiteBackend(tmp_path), SQLiteBackend(tmp_path)
    try:
        with first.write() as txn:
            txn.run(ops.SetMeta("probe", 1))
        with first.read() as txn:
            assert txn.run(ops.Meta("probe")) == 1
            assert second.physical.checkpoint_truncate(attempts=2)[0] is False, (
                "the open snapshot let it truncate"
            )
        assert not first._conn.in_transaction
        assert second.physical.checkpoint_truncate(attempts=2) == (True, 0)
        assert first.physical.checkpoint_truncate(attempts=2) == (True, 0)
    finally:
        first.close()
        second.close()


def test_a_write_inside_a_read_block_is_refused(backend: SQLiteBackend) -> None:
    with backend.read(), pytest.raises(StorageError, match="already inside a transaction"), backend.write():
        pass
    with backend.write() as txn:  # and the refused one left nothing open
        txn.run(ops.SetMeta("probe", 1))


# -- the change marker ----------------------------------------------------------------------


def test_the_marker_moves_for_another_connections_commit_and_not_for_ones_own(tmp_path: Path) -> None:
    first, second = SQLiteBackend(tmp_path), SQLiteBackend(tmp_path)
    try:
        before = first.marker()
        with first.write() as txn:
            txn.run(ops.SetMeta("probe", 1))
        assert first.marker() == before, "one's own commit moved the marker"
        with second.write() as txn:
            txn.run(ops.SetMeta("probe", 2))
        after = first.marker()
        assert after != before
        with first.read() as txn:
            assert txn.run(ops.Marker()) == after
            assert txn.run(ops.KeyRecords([b"\0" * 32], b"\0" * 32))[0] == after
    finally:
        first.close()
        second.close()


def test_the_marker_read_in_a_transaction_is_its_snapshots(tmp_path: Path) -> None:
    first, second = SQLiteBackend(tmp_path), SQLiteBackend(tmp_path)
    try:
        with first.read() as txn:
            inside = txn.run(ops.Marker())
            with second.write() as other:
                other.run(ops.SetMeta("probe", 1))
            assert txn.run(ops.Marker()) == inside
            assert txn.run(ops.Meta("probe")) is None, "reading the marker did not begin the snapshot"
        assert first.marker() != inside
    finally:
        first.close()
        second.close()


def test_the_store_decides_what_changed_from_the_markers_it_saw(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path) as store, cenotaph.open(tmp_path) as other:
        memory, backend = store._caches, store._backend
        with backend.serial():
            memory.saw(backend.marker())
            store.write(SCOPE, "own", "x")
            assert not memory.saw(backend.marker()), "its own write counted as another's"
            other.write(SCOPE, "theirs", "y")
            assert memory.saw(backend.marker())
            assert not memory.saw(backend.marker()), "a change is seen once"


# -- the store's own lock ---------------------------------------------------------------------


def test_the_store_knows_which_thread_is_inside_its_transactions(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path) as store:
        backend = store._backend
        assert not backend.held_here()
        with backend.serial():
            assert backend.held_here() and not backend.in_transaction()
        seen: dict[str, bool] = {}
        with backend.read():
            assert backend.held_here() and backend.in_transaction()
            probe = threading.Thread(target=lambda: seen.update(held=backend.held_here()))
            probe.start()
            probe.join(10)
        assert seen == {"held": False}, "another thread was told it holds the lock"
        with backend.write() as txn:
            assert backend.in_transaction()
            txn.after_commit(lambda: seen.update(after=backend.held_here() and backend.in_transaction()))
        assert seen["after"], "post-commit actions must run under the store's lock"
        assert not backend.held_here() and not backend.in_transaction()


def test_a_transaction_waits_for_another_threads(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path) as store:
        entered, order = threading.Event(), []

        def other() -> None:
            entered.set()
            with store._backend.read():
                order.append("other")

        with store._backend.read():
            thread = threading.Thread(target=other)
            thread.start()
            assert entered.wait(10)
            thread.join(0.2)
            order.append("first")
        thread.join(10)
        assert order == ["first", "other"]
