"""One of ``floor.py``'s cenotaph workloads in this process, for profiling and for A/B runs of two trees.

    python bench/floor_profile.py batch              # write_many of 500, per-record wall and CPU
    python bench/floor_profile.py read               # cold reads after reopening, per read
    python bench/floor_profile.py read --profile     # + cProfile's top entries (inflates the figures)
    PYTHONPATH=<other tree>/src python bench/floor_profile.py read   # the same on another tree

The records are ``bench_store.make_items``'s, as ``floor.py`` writes them (20 scopes); ``read``
writes them in batches, closes and reopens the store, reads the warm-up keys (so the scopes' keys
are in memory, as in ``floor.py``), then times one read of every record in random order. CPU time
(``thread_time``) is printed beside wall time: on a shared machine it moves less with the load.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import WARMUP, Item, make_items  # bench/ is not a package: the path is set just above

import cenotaph


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=("batch", "read"))
    ap.add_argument("--records", type=int, default=10_000, help="records written (10000)")
    ap.add_argument("--batch", type=int, default=500, help="records per write_many (500)")
    ap.add_argument("--profile", action="store_true", help="cProfile the timed part")
    ap.add_argument("--top", type=int, default=30, help="profile entries printed (30)")
    ap.add_argument("--dir", default=None, help="parent of the temp data dir")
    args = ap.parse_args()
    rng = random.Random(1)
    warm = make_items("w", WARMUP, 20, rng)
    items = make_items("k", args.records, 20, rng)
    reads = rng.sample(items, len(items))
    batches = [items[i : i + args.batch] for i in range(0, len(items), args.batch)]
    directory = Path(tempfile.mkdtemp(prefix="bench-floor-profile-", dir=args.dir))
    profile = cProfile.Profile()
    try:
        store = cenotaph.open(directory)

        def write(part: list[Item]) -> None:
            store.write_many([{"scope": i.scope, "key": i.key, "value": i.value} for i in part])

        write(warm)
        if args.workload == "read":
            for part in batches:
                write(part)
            store.close()
            store = cenotaph.open(directory)
            for it in warm:
                store.read(it.scope, it.key)
        wall, cpu = time.perf_counter(), time.thread_time()
        if args.profile:
            profile.enable()
        if args.workload == "batch":
            for part in batches:
                write(part)
        else:
            for it in reads:
                if store.read(it.scope, it.key) is None:
                    raise SystemExit("a read of an existing key returned nothing")
        profile.disable()
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        store.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    what = "batch write, a record" if args.workload == "batch" else "cold read"
    print(f"{what}: {1e6 * wall / len(items):.1f} us wall, {1e6 * cpu / len(items):.1f} us CPU")
    if args.profile:
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
