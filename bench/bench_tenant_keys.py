"""What filling ``tenant`` by trigger costs an insert (PostgreSQL migration 4, docs/sharding.md).

In a scratch schema holding a store's tables, N rows go into ``records`` in one
``INSERT ... SELECT FROM generate_series``: once with the row naming its tenant and the trigger
disabled (what inserts that pass the tenant would cost), once with the trigger filling it from
``scopes`` (what the store does today). Interleaved, best and median of ``--repeat`` runs, in
microseconds a row. The schema is dropped after.

Usage: ``CENOTAPH_TEST_PG_DSN=postgresql://... .venv/bin/python bench/bench_tenant_keys.py [--rows 20000]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import psycopg

from cenotaph.backends.postgres import open_postgres

SCHEMA = "bench_tenant_keys"


def _insert(conn: psycopg.Connection[tuple[object, ...]], rows: int, trigger: bool) -> float:
    conn.execute("TRUNCATE records, scopes")
    conn.execute("INSERT INTO scopes (token) VALUES ('\\x01'::bytea)")
    columns, values = "version, id, scope_token, key_token", "g, 'r' || g, '\\x01'::bytea, int8send(g)"
    if not trigger:
        conn.execute("ALTER TABLE records DISABLE TRIGGER records_tenant")
        columns, values = columns + ", tenant", values + ", '\\x01'::bytea"
    start = time.perf_counter()
    conn.execute(f"INSERT INTO records ({columns}) SELECT {values} FROM generate_series(1, {rows}) g")
    seconds = time.perf_counter() - start
    conn.execute("ALTER TABLE records ENABLE TRIGGER records_tenant")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("CENOTAPH_TEST_PG_DSN"))
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not args.dsn:
        parser.error("name the server: --dsn or $CENOTAPH_TEST_PG_DSN")
    open_postgres(args.dsn, schema=SCHEMA).close()
    runs: dict[bool, list[float]] = {False: [], True: []}
    try:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {SCHEMA}")
            for _ in range(args.repeat):
                for trigger in (False, True):
                    runs[trigger].append(_insert(conn, args.rows, trigger))
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    print(f"rows={args.rows} repeat={args.repeat} load={os.getloadavg()[0]:.1f}")
    print("| records insert | best us/row | median us/row |")
    print("|---|---:|---:|")
    for trigger, label in ((False, "tenant named, no trigger"), (True, "tenant filled by trigger")):
        per_row = [1e6 * s / args.rows for s in runs[trigger]]
        print(f"| {label} | {min(per_row):.2f} | {statistics.median(per_row):.2f} |")


if __name__ == "__main__":
    main()
