"""The logical backend contract: operations as data, run through one dispatch table.

Every operation of ``backends.ops`` has a handler on the SQLite transaction taking its fields;
a read transaction refuses an operation that writes (and the rows stay as they were).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from cenotaph.backends import ops
from cenotaph.backends.sqlite.backend import SQLiteBackend, SQLiteTxn


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
    assert ops.handler_name(ops.Clock) == "clock"


def test_a_runner_missing_a_handler_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match="no handler clock"):

        class Partial(ops.OpRunner):  # no handlers at all
            pass


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
