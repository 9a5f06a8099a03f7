"""How fast can batch writes be at all, once names are HMAC tokens?

    python bench/bench_ceiling.py            # 20,000 records in batches of 500, best of 5

An early target asked batch writes of at least half of raw SQLite, while every name reaching the
database must be an HMAC-SHA256 token. This benchmark removes cenotaph entirely and adds the costs one at a
time, on the records of ``bench_store.py`` (~190 bytes of JSON, 20 scopes), each as ``executemany`` of
500 rows per transaction into ``kv(scope, key, value, PRIMARY KEY(scope, key))`` at WAL +
``synchronous=FULL``:

  raw          pre-encoded JSON bytes under the plain scope and key strings (bench_store's "raw");
  +json        the value JSON-encoded inside the timed loop (a store is given Python objects);
  +tokens      the scope and key stored as HMAC tokens computed before the clock starts: only the
               cost of random 32-byte primary keys to SQLite's B-tree;
  +hmac        the tokens computed inside the timed loop (what W4 costs, without any encryption);
  +aead        plus a random record key wrapped under a KEK and the value sealed with AES-GCM (the
               "floor" of bench_store.py).

Each step adds to the ones before it; its ratio to raw is what any store doing that much can reach on
this machine, before it does anything else.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

Row = tuple[object, object, bytes]


def timed(rows: Callable[[int], Row], n: int, batch: int, repeat: int) -> float:
    """Best records/s of ``repeat`` runs, each in a fresh database."""
    best = 0.0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-ceiling-") as d:
            conn = sqlite3.connect(os.path.join(d, "x.db"))
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("CREATE TABLE kv (scope, key, value BLOB, PRIMARY KEY (scope, key))")
            conn.commit()
            start = time.perf_counter()
            for j in range(0, n, batch):
                conn.executemany(
                    "INSERT INTO kv VALUES (?,?,?)", [rows(i) for i in range(j, min(j + batch, n))]
                )
                conn.commit()
            best = max(best, n / (time.perf_counter() - start))
            conn.close()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--scopes", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.records
    scopes = [f"tenant:acme/user:u{i % args.scopes:03d}" for i in range(n)]
    keys = [f"k{i:07d}" for i in range(n)]
    values = [{"n": i, "text": ("alpha bravo charlie delta echo " * 6)[:170]} for i in range(n)]
    encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    encoded = [encode(v).encode() for v in values]
    secret = os.urandom(32)
    scope_tokens = {s: hmac.digest(secret, s.encode(), "sha256") for s in set(scopes)}

    def token(i: int) -> bytes:
        return hmac.digest(secret, keys[i].encode(), "sha256")

    tokens = [token(i) for i in range(n)]
    kek = AESGCM(os.urandom(32))

    def sealed(i: int) -> bytes:
        material = os.urandom(56)
        record_key, n1, n2 = material[:32], material[32:44], material[44:]
        data = encode(values[i]).encode()
        return n1 + kek.encrypt(n1, record_key, None) + n2 + AESGCM(record_key).encrypt(n2, data, None)

    cases: list[tuple[str, Callable[[int], Row]]] = [
        ("raw", lambda i: (scopes[i], keys[i], encoded[i])),
        ("+json", lambda i: (scopes[i], keys[i], encode(values[i]).encode())),
        ("+tokens", lambda i: (scope_tokens[scopes[i]], tokens[i], encode(values[i]).encode())),
        ("+hmac", lambda i: (scope_tokens[scopes[i]], token(i), encode(values[i]).encode())),
        ("+aead", lambda i: (scope_tokens[scopes[i]], token(i), sealed(i))),
    ]
    load = os.getloadavg()[0]
    results = {label: timed(rows, n, args.batch, args.repeat) for label, rows in cases}
    print(
        f"# bench_ceiling  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  records={n} batch={args.batch}"
    )
    print(f"# 1-min load average before/after: {load:.2f} / {os.getloadavg()[0]:.2f}")
    print("| step | records/s | ratio to raw |")
    print("|---|---:|---:|")
    for label, rate in results.items():
        print(f"| {label} | {rate:,.0f} | {rate / results['raw']:.2f}x |")


if __name__ == "__main__":
    main()
