"""What the record layout costs in SQL alone: 500-record batch inserts into several layouts.

    python bench/bench_layout.py             # 20,000 records in batches of 500, best of 3

No cenotaph code runs in the timed loop: every row is made of random bytes shaped like the store's
(32-byte tokens, a 32-hex id, wrapped keys, a ~360-byte sealed payload, sealed subjects), inserted
with ``executemany`` per table in one ``BEGIN IMMEDIATE`` transaction per batch, at the store's
settings (WAL, ``synchronous=FULL``, ``secure_delete=ON``). Layouts:

  schema 7     the store's tables up to migration 7: records keyed by version with a unique id and
               a unique slot index, lineage keyed by its random record id with a slot index,
               record_subjects;
  schema 8     the current migrations: records and lineage keyed by version, one id index (lineage),
               one slot index (lineage);
  one table    records and lineage in a single table keyed by version, an id index and a slot
               index, with and without record_subjects (not the store's layout: a measuring stick).

Each run prints microseconds and database bytes per record; the layouts alternate, best of
``--repeat``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from cenotaph.backends.sqlite.schema import MIGRATIONS, statements

Row = dict[str, Any]
Insert = tuple[str, Callable[[Row], list[tuple[Any, ...]]]]

_RECORDS = (
    "INSERT INTO records (id, scope_token, key_token, version, expires_at, hidden_version, wrapped, epoch, "
    "ciphertext, vector) VALUES (?,?,?,?,?,?,?,?,?,?)"
)
_LINEAGE = (
    "INSERT INTO lineage (record_id, scope_token, key_token, version, wrapped, epoch, subject_tokens, "
    "subjects, sources, destroyed_version, forgotten_version) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
)
_STORE_INSERTS: list[Insert] = [
    (_RECORDS, lambda r: [(r["id"], r["scope"], r["key"], r["v"], None, None, r["w"], 1, r["ct"], None)]),
    (
        _LINEAGE,
        lambda r: [(r["id"], r["scope"], r["key"], r["v"], r["lw"], 1, r["st"], r["ss"], "[]", None, None)],
    ),
    ("INSERT OR IGNORE INTO record_subjects VALUES (?,?)", lambda r: [(r["st"], r["id"])]),
]
_ONE_TABLE = [
    "CREATE TABLE entries (version INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, scope_token BLOB NOT NULL, "
    "key_token BLOB NOT NULL, expires_at REAL, hidden_version INTEGER, wrapped BLOB, epoch INTEGER, "
    "ciphertext BLOB, lineage BLOB, sources TEXT, destroyed_version INTEGER, forgotten_version INTEGER)",
    "CREATE INDEX entries_slot ON entries(scope_token, key_token)",
]
_ENTRY: Insert = (
    "INSERT INTO entries (version, id, scope_token, key_token, wrapped, epoch, ciphertext, lineage, sources) "
    "VALUES (?,?,?,?,?,?,?,?,?)",
    lambda r: [
        (r["v"], r["id"], r["scope"], r["key"], r["w"], 1, r["ct"], r["lw"] + r["st"] + r["ss"], "[]")
    ],
)
_SUBJECTS_TABLE = (
    "CREATE TABLE record_subjects (subject_token BLOB NOT NULL, record_id TEXT NOT NULL, "
    "PRIMARY KEY (subject_token, record_id)) WITHOUT ROWID"
)


def _migrations(upto: int) -> list[str]:
    return [s for number, script in MIGRATIONS if number <= upto for s in statements(script)]


LAYOUTS: dict[str, tuple[list[str], list[Insert]]] = {
    "schema 7": (_migrations(7), _STORE_INSERTS),
    f"schema {MIGRATIONS[-1][0]} (current)": (_migrations(MIGRATIONS[-1][0]), _STORE_INSERTS),
    "one table + record_subjects": (
        [*_ONE_TABLE, _SUBJECTS_TABLE],
        [_ENTRY, ("INSERT OR IGNORE INTO record_subjects VALUES (?,?)", lambda r: [(r["st"], r["id"])])],
    ),
    "one table": (_ONE_TABLE, [_ENTRY]),
}


def _rows(count: int, scopes: int) -> list[Row]:
    scope_tokens = [os.urandom(32) for _ in range(scopes)]
    subject_tokens = [os.urandom(32) for _ in range(scopes)]
    return [
        {
            "id": os.urandom(16).hex(),
            "scope": scope_tokens[i % scopes],
            "key": os.urandom(32),
            "v": i + 1,
            "w": os.urandom(60),
            "ct": os.urandom(28 + 330),
            "lw": os.urandom(60),
            "st": subject_tokens[i % scopes],
            "ss": os.urandom(28 + 40),
        }
        for i in range(count)
    ]


def run_layout(
    schema: Sequence[str], inserts: Sequence[Insert], rows: list[Row], batch: int
) -> tuple[float, float]:
    """(microseconds, database bytes) per record."""
    directory = tempfile.mkdtemp(prefix="bench-layout-")
    try:
        path = os.path.join(directory, "layout.db")
        conn = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON"):
            conn.execute(f"PRAGMA {pragma}")
        for statement in schema:
            conn.execute(statement)
        batches = [rows[i : i + batch] for i in range(0, len(rows), batch)]
        start = time.perf_counter()
        for part in batches:
            conn.execute("BEGIN IMMEDIATE")
            for sql, make in inserts:
                conn.executemany(sql, [values for row in part for values in make(row)])
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        return elapsed / len(rows) * 1e6, os.path.getsize(path) / len(rows)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--scopes", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    rows = _rows(args.records, args.scopes)
    best: dict[str, tuple[float, float]] = {}
    load = os.getloadavg()[0]
    for _ in range(args.repeat):
        for name, (schema, inserts) in LAYOUTS.items():
            took, size = run_layout(schema, inserts, rows, args.batch)
            if name not in best or took < best[name][0]:
                best[name] = (took, size)
    print(f"# bench_layout  records={args.records} batch={args.batch} best of {args.repeat}")
    print(f"# 1-min load average before/after: {load:.2f} / {os.getloadavg()[0]:.2f}")
    print("| layout | us per record | bytes per record |")
    print("|---|---:|---:|")
    for name, (took, size) in best.items():
        print(f"| {name} | {took:.1f} | {size:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
