"""Reads on a streaming replica (``read_replicas``): how many go there, and what they cost.

On a throwaway primary + streaming replica (tests/postgres/_cluster.py, both on this machine, so
the replica takes no load off another host here: what is measured is the routing, not capacity):

- **cold reads**: a store of N records, reopened, each key read once; without read replicas, and
  with the replica listed. Reported: reads/s and the share of read transactions the replica
  served.
- **reads while another process writes**: the same reads while a child process writes single
  records back to back into another scope of the store. Each commit it makes moves the change
  counter, so a read goes to the replica only if the replica has replayed past the primary's
  position read at the start of that store call: the share served by the replica is what a
  write-heavy neighbour leaves.

Usage: ``.venv/bin/python bench/bench_replica_reads.py [--records 2000] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import ModuleType

from cenotaph import LocalKeyring, Store
from cenotaph.backends.postgres import PostgresBackend, open_postgres

CLUSTER_FILE = Path(__file__).resolve().parent.parent / "tests" / "postgres" / "_cluster.py"
SCHEMA = "bench_reads"

_WRITER = textwrap.dedent(
    """
    import sys
    from cenotaph import LocalKeyring, Store
    from cenotaph.backends.postgres import open_postgres

    store = Store(open_postgres(sys.argv[1], schema=sys.argv[3]), LocalKeyring(sys.argv[2]), auto_purge="off")
    n = 0
    while True:
        store.write("tenant:other/user:w", f"k{n % 100}", {"n": n})
        n += 1
    """
)


def _load_cluster() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_replica_cluster", CLUSTER_FILE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {CLUSTER_FILE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _open(primary: str, keyring: Path, replicas: list[str]) -> tuple[Store, PostgresBackend]:
    backend = open_postgres(primary, schema=SCHEMA, read_replicas=replicas)
    return Store(backend, LocalKeyring(keyring), auto_purge="off"), backend


def _reads(opened: tuple[Store, PostgresBackend], keys: list[str]) -> tuple[float, float | None]:
    """Reads/s over ``keys`` (each once, cold), and the share the replica served (None: none listed)."""
    store, backend = opened
    router = backend.router
    before = (0, 0) if router is None else (router.replica_reads, router.primary_reads)
    start = time.perf_counter()
    for key in keys:
        store.read(f"tenant:acme/user:u{int(key[1:]) % 20:03d}", key)
    seconds = time.perf_counter() - start
    if router is None:
        return len(keys) / seconds, None
    replica, primary = router.replica_reads - before[0], router.primary_reads - before[1]
    return len(keys) / seconds, replica / max(1, replica + primary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cluster = _load_cluster().Cluster.create()
    keyring = Path(tempfile.mkdtemp(prefix="cenotaph-bench-")) / "keyring"
    results: dict[str, list[tuple[float, float | None]]] = {}
    try:
        primary, replica = cluster.primary.dsn, cluster.replica.dsn
        keys = [f"k{i:07d}" for i in range(args.records)]
        store, _ = _open(primary, keyring, [])
        store.write_many(
            [
                {"scope": f"tenant:acme/user:u{i % 20:03d}", "key": k, "value": {"n": i}}
                for i, k in enumerate(keys)
            ]
        )
        store.close()
        cluster.wait_replayed(cluster.current_lsn())
        for _ in range(args.repeat):
            for label, listed in (("primary only", []), ("read_replicas", [replica])):
                opened = _open(primary, keyring, listed)
                results.setdefault(f"cold reads, {label}", []).append(_reads(opened, keys))
                opened[0].close()
            writer = subprocess.Popen(
                [sys.executable, "-c", _WRITER, primary, str(keyring), SCHEMA],
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            try:
                time.sleep(1.0)  # the writer running
                for label, listed in (("primary only", []), ("read_replicas", [replica])):
                    opened = _open(primary, keyring, listed)
                    results.setdefault(f"cold reads while another process writes, {label}", []).append(
                        _reads(opened, keys)
                    )
                    opened[0].close()
            finally:
                writer.kill()
                writer.wait()
    finally:
        cluster.destroy()
    load = os.getloadavg()[0]
    print(
        f"records={args.records} repeat={args.repeat} (best reads/s; replica share of that run) load={load:.1f}"
    )
    print("| workload | reads/s | served by the replica |")
    print("|---|---:|---:|")
    for label, runs in results.items():
        rate, share = max(runs, key=lambda r: r[0])
        shown = "-" if share is None else f"{100 * share:.0f}%"
        print(f"| {label} | {rate:,.0f} | {shown} |")


if __name__ == "__main__":
    main()
