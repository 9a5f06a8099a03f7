"""A record write's two round trips, each one message: the statements the driver sends whole.

A write is BEGIN, then schema 5's ``write_begin`` (its locks, then what it reads first), then
``write_record`` (a lone record's rows), the change marker's bump and COMMIT. Sent as parameters,
each statement costs the driver (psycopg) its own work -- a cursor, the parameters adapted one by
one, the pipeline's bookkeeping -- whatever it does; sent as one simple-protocol query per round
trip, with every value written into the text as a literal, a write costs the client about half the
CPU (measured in bench/RESULTS.md, "Over a 2 ms round trip"), and each round trip is one message.

Every value is written by :func:`literal`, which takes only the types a write sends and quotes
each so that no value can end its literal, whatever ``standard_conforming_strings`` says: bytes
as hex, text with its quotes and backslashes doubled, both inside ``E'...'``; numbers quoted in
Python's own exact spelling; each cast to the function's parameter type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import psycopg

from .. import ops
from ..base import LineageRow, RecordRow, lineage_values
from ..ops import Op

__all__ = [
    "BEGIN",
    "LINEAGE_TYPES",
    "RECORD_TYPES",
    "LockKeys",
    "begin_answers",
    "begin_statement",
    "literal",
    "record_statement",
    "slot_arrays",
    "subject_tokens",
    "write_shape",
]

BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"
LockKeys = tuple[list[int], list[bool]]  # advisory lock keys, and whether each is exclusive
# the PostgreSQL types of RECORD_COLS and LINEAGE_COLS, in their order
RECORD_TYPES = ("text", "bytea", "bytea", "bigint", "float8", "bigint", "bytea", "bigint", "bytea", "bytea")
LINEAGE_TYPES = (
    "text", "bytea", "bytea", "bigint", "bytea", "bigint", "bytea", "bytea", "text", "bigint", "bigint"
)  # fmt: skip
# schema 5's functions' parameters: write_begin(keys, exclusive, timeout_ms, with_marker, versions,
# floor_version, scope_tokens, key_tokens); write_record(replaced, subject_list, the record row,
# the lineage row)
_BEGIN_TYPES = ("bigint[]", "boolean[]", "integer", "boolean", "bigint", "bigint", "bytea[]", "bytea[]")
_RECORD_TYPES = ("text", "bytea[]", *RECORD_TYPES, *LINEAGE_TYPES)
Cursor = psycopg.Cursor[tuple[Any, ...]]


def literal(value: Any, pgtype: str) -> str:
    """``value`` as a SQL literal of ``pgtype`` (a list as an ARRAY of its element type)."""
    if type(value) is list:
        element = pgtype.removesuffix("[]")
        return "ARRAY[" + ",".join([literal(v, element) for v in value]) + "]::" + pgtype
    return _scalar(value) + "::" + pgtype


def _scalar(value: Any) -> str:
    kind = type(value)
    if value is None:
        return "NULL"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:  # quoted: -9223372036854775808 unquoted is minus a number past bigint
        return "'" + str(value) + "'"
    if kind is float:  # repr is exact (shortest round trip), and 'inf' / 'nan' are float8 input too
        return "'" + repr(value) + "'"
    if kind is bytes or kind is bytearray or kind is memoryview:
        return "E'\\\\x" + bytes(value).hex() + "'"
    if kind is str:
        text: str = value
        return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for a {kind.__name__}")


def _call(function: str, types: Sequence[str], values: Sequence[Any]) -> str:
    return function + "(" + ", ".join([literal(v, t) for v, t in zip(values, types, strict=True)]) + ")"


def slot_arrays(slots: Sequence[tuple[bytes, bytes]]) -> tuple[list[bytes], list[bytes]]:
    """The (scope tokens, key tokens) arrays of ``slots``, each slot once."""
    unique = list(dict.fromkeys((bytes(s), bytes(k)) for s, k in slots))
    return [s for s, _ in unique], [k for _, k in unique]


def subject_tokens(packed: bytes) -> list[bytes]:
    """A lineage row's subject tokens (its ``subject_tokens``: 32-byte tokens end to end)."""
    return [bytes(packed[i : i + 32]) for i in range(0, len(packed), 32)]


def write_shape(ahead: Sequence[Op[Any]]) -> tuple[bool, ops.Reserve, ops.RecordsInSlots] | None:
    """``ahead`` as a record write's first reads (``writes.locks.write_ahead``: the change marker
    or not, the counters, a block of versions, the slots' rows, in that order), or None."""
    marker = bool(ahead) and type(ahead[0]) is ops.Marker
    rest = ahead[1:] if marker else ahead
    if [type(op) for op in rest] != [ops.MetaAll, ops.Reserve, ops.RecordsInSlots]:
        return None
    return marker, cast(ops.Reserve, rest[1]), cast(ops.RecordsInSlots, rest[2])


def begin_statement(
    locks: LockKeys, timeout_ms: int, shape: tuple[bool, ops.Reserve, ops.RecordsInSlots]
) -> str:
    """A record write's first round trip: BEGIN, then write_begin (its rows are the second result)."""
    marker, reserve, slots = shape
    values = (*locks, timeout_ms, marker, reserve.count, reserve.floor, *slot_arrays(slots.slots))
    return BEGIN + "; SELECT * FROM " + _call("write_begin", _BEGIN_TYPES, values)


def begin_answers(cursor: Cursor, ahead: Sequence[Op[Any]]) -> list[tuple[Op[Any], Any]]:
    """Each of ``ahead``'s answers from write_begin's rows (one per answer, told apart by kind)."""
    marker = last = 0
    counters: dict[str, int] = {}
    records: list[RecordRow] = []
    for row in cursor.fetchall():
        kind = row[0]
        if kind == "r":
            records.append(RecordRow(*row[3:]))
        elif kind == "c":
            counters[str(row[1])] = int(row[2])
        elif kind == "m":
            marker = int(row[2])
        else:
            last = int(row[2])
    answers = {ops.Marker: marker, ops.MetaAll: counters, ops.Reserve: last, ops.RecordsInSlots: records}
    return [(op, answers[type(op)]) for op in ahead]


def record_statement(row: RecordRow, lineage: LineageRow, replaced: Sequence[str]) -> str:
    """write_record for one record (and the one id it replaces, if any)."""
    values = (
        replaced[0] if replaced else None,
        subject_tokens(lineage.subject_tokens),
        *row,
        *lineage_values(lineage),
    )
    return "SELECT " + _call("write_record", _RECORD_TYPES, values)
