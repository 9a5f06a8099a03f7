"""The store's tables as both backends read and write them: column lists in the order of the
row types of ``backends.base``, and the rows built from what a statement returns."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..base import LineageRow, RecordRow

__all__ = [
    "ERASURE_COLS",
    "ERASURE_FIELDS",
    "ERASURE_SELECT",
    "LINEAGE_COLS",
    "L_COLS",
    "PLAIN_COLUMNS",
    "RECORD_COLS",
    "R_COLS",
    "WRAPPED_TABLES",
    "epochs_in_use",
    "lineage_row",
    "record_row",
]


def _columns(text: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in text.split(","))


RECORD_COLS = (
    "id, scope_token, key_token, version, expires_at, hidden_version, wrapped, epoch, ciphertext, vector"
)
if RecordRow._fields != _columns(RECORD_COLS):
    raise RuntimeError("RecordRow's fields must follow RECORD_COLS (rows are inserted as they are)")
R_COLS = ", ".join(f"r.{c}" for c in _columns(RECORD_COLS))  # joined with lineage as l
LINEAGE_COLS = (
    "record_id, scope_token, key_token, version, wrapped, epoch, subject_tokens, subjects, sources, "
    "destroyed_version, forgotten_version"
)
if LineageRow._fields != _columns(LINEAGE_COLS):
    raise RuntimeError("LineageRow's fields must follow LINEAGE_COLS")
L_COLS = ", ".join(f"l.{c}" for c in _columns(LINEAGE_COLS))
ERASURE_COLS = (
    "id, mode, target_kind, target, version, requested_at, state, layers, plan, probes, horizon, "
    "horizon_reason, verified_at, scan"
)
ERASURE_FIELDS = _columns(ERASURE_COLS)
# a request row with its apply cursor, which lives apart (erasure_progress)
ERASURE_SELECT = (
    "SELECT "
    + ", ".join(f"e.{c}" for c in ERASURE_FIELDS)
    + ", p.applied FROM erasures e LEFT JOIN erasure_progress p ON p.request_id = e.id"
)
# the tables holding wrapped keys, with their primary key
WRAPPED_TABLES = (
    ("records", "version"),
    ("lineage", "record_id"),
    ("scopes", "token"),
    ("subjects", "token"),
)

# every column the store writes in plain: ids, states, content-free JSON (tokens as hex, counts,
# versions, timestamps) and the schema; every other column is an HMAC token or AES-GCM ciphertext
PLAIN_COLUMNS = (
    ("audit", "entry"),
    *(("erasures", c) for c in ("id", "mode", "target_kind", "requested_at", "state", "layers", "plan")),
    *(("erasures", c) for c in ("horizon", "horizon_reason", "verified_at", "scan")),
    ("tombstones", "request_id"),
    ("tombstones", "kind"),
    ("records", "id"),
    ("lineage", "record_id"),
    ("lineage", "sources"),
    ("derivations", "source_id"),
    ("derivations", "derived_id"),
    ("erased_records", "record_id"),
    ("probe_keys", "request_id"),
    ("reauth_tokens", "kind"),
    ("meta", "name"),
    ("sqlite_master", "sql"),  # SQLite's schema text; PostgreSQL keeps its schema in catalogs
)


def record_row(row: Sequence[Any]) -> RecordRow:
    return RecordRow(*row)


def lineage_row(row: Sequence[Any]) -> LineageRow:
    values = list(row)
    values[8] = () if values[8] == "[]" else tuple(json.loads(values[8]))
    return LineageRow(*values)


def epochs_in_use(execute: Callable[[str], Iterable[Sequence[Any]]]) -> set[int]:
    """The KEK epochs wrapping a live key, read with ``execute`` (a connection's: a store's, or
    a backup's copy): rotation keeps them, a backup's manifest names them."""
    found: set[int] = set()
    for table, _ in (*WRAPPED_TABLES, ("probe_keys", "request_id")):
        sql = f"SELECT DISTINCT epoch FROM {table} WHERE epoch IS NOT NULL AND wrapped IS NOT NULL"
        found.update(int(r[0]) for r in execute(sql))  # a destroyed key needs no epoch
    return found
