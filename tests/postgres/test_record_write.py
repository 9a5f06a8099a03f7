"""A record write's statements are sent whole, their values written as literals
(``backends/postgres/record_write.py``): every value must reach the server exactly as it was,
whatever the value holds and whatever ``standard_conforming_strings`` says, and the write's
transaction keeps its lock_timeout to the end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from cenotaph.backends import ops
from cenotaph.backends.base import busy_timeout_ms
from cenotaph.backends.postgres import PostgresBackend
from cenotaph.backends.postgres.record_write import literal

VALUES: list[tuple[Any, str]] = [
    (bytes(range(256)), "bytea"),
    (b"", "bytea"),
    (b"\\x00'\\", "bytea"),
    ("it's a \\ back'slash'' and 100% \\x41 \u00e9\u4e2d", "text"),
    ("", "text"),
    ("E'", "text"),
    (-(2**63), "bigint"),
    (2**63 - 1, "bigint"),
    (0, "integer"),
    (1733512345.123456, "float8"),
    (5e-324, "float8"),
    (float("inf"), "float8"),
    (None, "text"),
    (None, "bigint"),
    (True, "boolean"),
    (False, "boolean"),
    ([b"\x00" * 32, b"'\\"], "bytea[]"),
    ([], "bytea[]"),
    ([-(2**63), 1, 2**63 - 1], "bigint[]"),
    ([True, False], "boolean[]"),
]


@pytest.mark.parametrize("conforming", ["on", "off"])
def test_every_literal_reaches_the_server_as_it_was(pg_dsn: str, conforming: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"SET standard_conforming_strings = {conforming}")
        conn.execute("SET escape_string_warning = off")
        for value, pgtype in VALUES:
            row = conn.execute(f"SELECT {literal(value, pgtype)}", prepare=False).fetchone()
            assert row is not None
            assert row[0] == value, (value, pgtype)


def test_a_value_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError):
        literal(object(), "text")
    with pytest.raises(TypeError):
        literal(1.5j, "float8")


def test_a_record_write_keeps_its_lock_timeout_to_its_end(
    open_backend: Callable[[], PostgresBackend],
) -> None:
    backend = open_backend()
    ahead = [ops.MetaAll(), ops.Reserve(1), ops.RecordsInSlots([(b"s" * 32, b"k" * 32)])]
    with backend.write(None, ahead) as txn:
        setting = txn.connection.execute("SELECT current_setting('lock_timeout')").fetchone()
    assert setting is not None
    assert setting[0] in (f"{busy_timeout_ms()}ms", f"{busy_timeout_ms() // 1000}s")
