"""The record layout's SQL alone: two tables (``records`` + ``lineage``, as the store has them) against
one merged row, on a copy of a real store.

    python bench/floor_layout.py                 # 10,000 records as floor.py writes them
    python bench/floor_layout.py --records 20000

A store is written with ``write_many`` (``bench_store.make_items``'s records, 20 scopes), then a
table ``entries`` is made beside its tables holding each lineage row merged with its record row
(one row per version: the record's columns, the lineage's, and a ``stored`` mark for "the record
row still exists"), indexed as the two tables are together (``id`` unique, ``(scope_token,
key_token)``). Timed, each on a fresh connection (16 MiB page cache, as the store sets it),
median of ``--repeat`` runs (interleaved):

- **the cold read's statement** (``SQLiteTxn.key_records`` with one scope) against the same read
  of ``entries``, then its parts: the slot's newest version alone, its records row, the join with
  lineage, and ``pragma_data_version`` (the statement's snapshot marker);
- **the batch inserts** (``executemany`` a table, 500 records a transaction, WAL and
  ``synchronous=FULL``, the store's own rows replayed into emptied tables) of records + lineage +
  ``record_subjects`` against ``entries`` + ``record_subjects``.

No cenotaph code runs in the timed parts: this bounds what the layout can change, not what a read
or a write costs in the store (``floor_profile.py`` measures those).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import make_items  # bench/ is not a package: the path is set just above

import cenotaph
from cenotaph.backends.sql.columns import L_COLS, LINEAGE_COLS, R_COLS, RECORD_COLS
from cenotaph.backends.sqlite.backend import _SLOT_SQL

MERGE = """
CREATE TABLE entries (
    version INTEGER PRIMARY KEY, id TEXT NOT NULL, scope_token BLOB NOT NULL, key_token BLOB NOT NULL,
    stored INTEGER NOT NULL, expires_at REAL, hidden_version INTEGER, hidden_mode TEXT, wrapped BLOB,
    epoch INTEGER, ciphertext BLOB, vector BLOB, l_wrapped BLOB, l_epoch INTEGER, subject_tokens BLOB NOT NULL,
    subjects BLOB, sources TEXT NOT NULL, destroyed_version INTEGER, forgotten_version INTEGER
);
INSERT INTO entries SELECT l.version, l.record_id, l.scope_token, l.key_token, r.version IS NOT NULL,
    r.expires_at, r.hidden_version, r.hidden_mode, r.wrapped, r.epoch, r.ciphertext, r.vector, l.wrapped, l.epoch,
    l.subject_tokens, l.subjects, l.sources, l.destroyed_version, l.forgotten_version
    FROM lineage l LEFT JOIN records r ON r.version = l.version ORDER BY l.version;
CREATE UNIQUE INDEX entries_id ON entries(id);
CREATE INDEX entries_slot ON entries(scope_token, key_token);
"""
_NEWEST = "(SELECT version FROM {t} WHERE scope_token=?2 AND key_token=?1 ORDER BY version DESC LIMIT 1)"
READS = (
    ("two tables: the store's statement", _SLOT_SQL[1]),
    (
        "one merged row, the same statement",
        "SELECT d.data_version, e.* FROM pragma_data_version d LEFT JOIN entries e ON e.version IN "
        f"({_NEWEST.format(t='entries')}) AND e.stored",
    ),
    ("  part: the slot's newest version", _NEWEST.format(t="lineage")[1:-1]),
    (
        "  part: + its records row",
        f"SELECT {RECORD_COLS} FROM records WHERE version = {_NEWEST.format(t='lineage')}",
    ),
    (
        "  part: + its lineage row (no marker)",
        f"SELECT {R_COLS}, {L_COLS} FROM records r JOIN lineage l ON l.version = r.version "
        f"WHERE r.version IN ({_NEWEST.format(t='lineage')})",
    ),
    ("  the marker alone, table-valued", "SELECT data_version FROM pragma_data_version WHERE ?1 IS NOT ?2"),
)


def _store(directory: str, records: int, batch: int) -> str:
    rng = random.Random(1)
    items = make_items("k", records, 20, rng)
    store = cenotaph.open(directory)
    for i in range(0, len(items), batch):
        store.write_many(
            [{"scope": it.scope, "key": it.key, "value": it.value} for it in items[i : i + batch]]
        )
    store.close()
    db = os.path.join(directory, "cenotaph.db")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executescript(MERGE)
    conn.close()
    return db


def _reads(db: str, repeat: int) -> None:
    conn = sqlite3.connect(db)
    slots = conn.execute("SELECT scope_token, key_token FROM lineage").fetchall()
    conn.close()
    random.Random(2).shuffle(slots)
    runs: dict[str, list[float]] = {label: [] for label, _ in READS}
    for _ in range(repeat):  # the statements interleaved, each run on a fresh connection
        for label, sql in READS:
            conn = sqlite3.connect(db)
            conn.execute("PRAGMA cache_size=-16384")
            start = time.perf_counter()
            for scope_token, key_token in slots:
                conn.execute(sql, (key_token, scope_token)).fetchall()
            runs[label].append((time.perf_counter() - start) / len(slots))
            conn.close()
    for label, times in runs.items():
        print(f"| {label} | {1e6 * statistics.median(times):.1f} |")


def _inserts(db: str, records: int, batch: int, repeat: int) -> None:
    conn = sqlite3.connect(db)
    recs = conn.execute(f"SELECT {RECORD_COLS} FROM records ORDER BY version").fetchall()
    lins = conn.execute(f"SELECT {LINEAGE_COLS} FROM lineage ORDER BY version").fetchall()
    ents = conn.execute("SELECT * FROM entries ORDER BY version").fetchall()
    conn.close()
    subjects = [(row[6][:32], row[0]) for row in lins]

    def two(c: sqlite3.Connection, i: int) -> None:
        c.executemany(
            f"INSERT INTO records ({RECORD_COLS}) VALUES ({','.join('?' * 10)})", recs[i : i + batch]
        )
        c.executemany(
            f"INSERT INTO lineage ({LINEAGE_COLS}) VALUES ({','.join('?' * 11)})", lins[i : i + batch]
        )
        c.executemany("INSERT OR IGNORE INTO record_subjects VALUES (?,?)", subjects[i : i + batch])

    def one(c: sqlite3.Connection, i: int) -> None:
        c.executemany(f"INSERT INTO entries VALUES ({','.join('?' * 19)})", ents[i : i + batch])
        c.executemany("INSERT OR IGNORE INTO record_subjects VALUES (?,?)", subjects[i : i + batch])

    def timed(label: str, write: Callable[[sqlite3.Connection, int], None]) -> None:
        runs = []
        for _ in range(repeat):
            scratch = tempfile.mkdtemp(prefix="bench-floor-layout-")
            try:
                copy = os.path.join(scratch, "copy.db")
                shutil.copy(db, copy)
                c = sqlite3.connect(copy, isolation_level=None)
                for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON"):
                    c.execute(f"PRAGMA {pragma}")
                for table in ("records", "lineage", "entries", "record_subjects"):
                    c.execute(f"DELETE FROM {table}")
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                start = time.perf_counter()
                for i in range(0, len(ents), batch):
                    c.execute("BEGIN IMMEDIATE")
                    write(c, i)
                    c.execute("COMMIT")
                runs.append((time.perf_counter() - start) / len(ents))
                c.close()
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        print(f"| {label} | {1e6 * statistics.median(runs):.1f} |")

    for _ in range(2):  # interleaved, twice
        timed("inserts, two tables + record_subjects", two)
        timed("inserts, one merged row + record_subjects", one)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000, help="records written (10000)")
    ap.add_argument(
        "--batch", type=int, default=500, help="records per write_many and per insert transaction"
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is printed (3)")
    args = ap.parse_args()
    directory = tempfile.mkdtemp(prefix="bench-floor-layout-")
    try:
        db = _store(directory, args.records, args.batch)
        print(
            f"# bench/floor_layout.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
            f"records={args.records} batch={args.batch}  load {os.getloadavg()[0]:.2f}"
        )
        print("| statement, a cold read of one key | us |\n|---|---:|")
        _reads(db, args.repeat)
        print("\n| batch inserts, a record | us |\n|---|---:|")
        _inserts(db, args.records, args.batch, args.repeat)
        print(f"# load after {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
