"""PostgreSQL: what the ``pages`` layer costs a purge: a store of N records, one compliance
forget of one key, then the purge that verifies it (VACUUM, every page of the store's tables,
TOAST tables and indexes read through pageinspect, the rewrite when a probe is found there).

    python bench/bench_pages.py --records 20000

The server is ``CENOTAPH_TEST_PG_DSN`` (default postgresql://postgres@127.0.0.1:5432/test); the
store lives in a fresh schema, dropped at the end. Prints the 1-minute load before and after.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from cenotaph import LocalKeyring, Store
from cenotaph.backends.postgres import open_postgres


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    dsn = os.environ.get("CENOTAPH_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"bench_pages_{uuid.uuid4().hex[:8]}"
    print(f"load before {os.getloadavg()[0]:.1f}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(
                open_postgres(dsn, schema=schema), LocalKeyring(Path(tmp) / "keyring"), auto_purge="off"
            )
            try:
                for first in range(0, args.records, args.batch):
                    store.write_many(
                        {"scope": f"tenant:t/user:u{i % 200}", "key": f"k{i}", "value": f"note {i} " * 8}
                        for i in range(first, min(args.records, first + args.batch))
                    )
                physical = store._backend.physical
                started = time.monotonic()
                alone = physical.scan_pages([os.urandom(32)])
                print(f"scan_pages alone (VACUUM + read): {time.monotonic() - started:.2f} s, {alone}")
                request = store.forget("tenant:t/user:u7", "k7")
                started = time.monotonic()
                store.purge()
                purge_s = time.monotonic() - started
                status = request.status()
                print(f"purge that verifies: {purge_s:.2f} s, state {status.state}")
                print(f"pages layer: {status.layers['pages'].evidence}")
                print(f"rewritten: {status.layers['scan'].evidence.get('rewritten', False)}")
            finally:
                store.close()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    print(f"load after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
