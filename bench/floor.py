"""cenotaph against its floor: every row as a ratio cenotaph / floor, each implementation in a fresh
interpreter.

    python bench/floor.py --quick          # ~2 minutes on 2 busy cores
    python bench/floor.py                  # the sizes of the issue's table
    python bench/floor.py --forget-1m      # + one subject's compliance forget in 1M records vs 10k (long)
    python bench/floor.py --json           # the same numbers, with every run

The floor is ``bench_store.Floor``: exactly cenotaph's guarantees at rest and nothing else -- HMAC-SHA256
tokens for the scope and key, a random per-record key wrapped under a KEK (AES-GCM), the value sealed
under it (AES-GCM), one row in one table, WAL + ``synchronous=FULL``. Next to it: cenotaph, raw
``sqlite3`` (pre-encoded JSON, plain names) and LangGraph's ``SqliteStore`` tuned to WAL + FULL, on the
records of ``bench_store.py``.

Every (workload, implementation, run) is a subprocess of its own (``--child``), so no peer's heap,
threads or caches sit in the interpreter being measured. Each figure is the median of ``--repeat``
runs (3), implementations interleaved; the load average is printed beside the table because the ratios
only mean something on a machine that is not busy with something else.

Rows: single durable writes (one commit each), batch writes (``--batch`` a call), cold reads (after
reopening: in-process caches empty, OS page cache warm), warm reads (the same keys again), 8 threads
writing durably (cenotaph: one store; raw and floor: a connection per thread), and with
``--forget-1m`` one subject's compliance forget (call to return) in a store of 1M records vs 10k.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import (  # bench/ is not a package: the path is set just above
    CLASSES,
    WARMUP,
    Floor,
    Item,
    Raw,
    fresh,
    make_items,
    run_batch_and_reads,
    run_single,
)

IMPLS = ("floor", "cenotaph", "raw", "langgraph")
THREAD_IMPLS = ("floor", "cenotaph", "raw")
THREADS = 8
FORGETS = 7  # subjects forgotten per store size (--forget-1m): the median is reported
# (row, label, numerator impl, denominator impl, target minimum)
TARGETS = (
    ("single", "single durable write / floor", "cenotaph", "floor", 0.8),
    ("batch", "batch write / floor", "cenotaph", "floor", 0.8),
    ("read_cold", "cold read / floor", "cenotaph", "floor", 0.8),
    ("read_warm", "warm read / LangGraph tuned", "cenotaph", "langgraph", 2.5),
    ("threads", "8 threads durable / raw a connection per thread", "cenotaph", "raw", 1.5),
)
ROWS = (
    ("single", "single durable write", "/s"),
    ("batch", "batch write", "records/s"),
    ("read_cold", "cold read (after reopen)", "/s"),
    ("read_warm", "warm read", "/s"),
    ("threads", f"{THREADS} threads writing durably", "/s"),
)


# -- the child: one implementation, one workload, one run ------------------------------------
def _threads(base: str | None, impl: str, items: list[Item]) -> float:
    shares = [items[t::THREADS] for t in range(THREADS)]
    with fresh(base, impl) as obj:
        if isinstance(obj, Raw):  # raw and floor: a connection per thread, as an application would
            db = "floor.db" if isinstance(obj, Floor) else "raw.db"
            conns = []
            for _ in range(THREADS):
                c = sqlite3.connect(obj.directory / db, check_same_thread=False, timeout=60)
                c.execute("PRAGMA synchronous=FULL")
                conns.append(c)
            row = obj._row if isinstance(obj, Floor) else (lambda it: (it.scope, it.key, it.data))
            marks = "?,?,?,?" if isinstance(obj, Floor) else "?,?,?"

            def worker(t: int) -> None:
                c = conns[t]
                for it in shares[t]:
                    c.execute(f"INSERT INTO kv VALUES ({marks})", row(it))
                    c.commit()

        else:

            def worker(t: int) -> None:
                for it in shares[t]:
                    obj.write(it)

        pool = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        start = time.perf_counter()
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        elapsed = time.perf_counter() - start
        if isinstance(obj, Raw):
            for c in conns:
                c.close()
        return len(items) / elapsed


def _forget_subject(base: str | None, size: int, batch: int) -> float:
    """One subject's compliance forget (call to return) in a cenotaph store of ``size`` records, the
    subject holding 10 of them; the store is built with ``write_many``. Median seconds of
    ``FORGETS`` subjects forgotten one after the other."""
    import cenotaph

    directory = Path(tempfile.mkdtemp(prefix="bench-floor-forget-", dir=base))
    try:
        store = cenotaph.open(directory)
        try:
            text = "alpha bravo charlie delta echo " * 6
            for start in range(0, size, batch):
                store.write_many(
                    [
                        {
                            "scope": f"tenant:acme/user:u{i % 20:03d}",
                            "key": f"k{i:07d}",
                            "value": {"n": i, "text": text[:170]},
                            "subjects": [f"person-{i % (size // 10)}"],
                        }
                        for i in range(start, min(start + batch, size))
                    ]
                )
            took = []
            for n in range(FORGETS):  # different subjects, each holding 10 records
                began = time.perf_counter()
                store.forget_subject(f"person-{7 + 101 * n}")
                took.append(time.perf_counter() - began)
            return statistics.median(took)
        finally:
            store.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def child(args: argparse.Namespace) -> dict[str, float]:
    rng = random.Random(args.seed)
    warm = make_items("w", WARMUP, args.scopes, rng)
    if args.child_workload == "single":
        singles = make_items("s", args.single, args.scopes, rng)
        with fresh(args.dir, args.child_impl) as obj:
            return run_single(obj, warm, singles)
    if args.child_workload == "batch":
        items = make_items("k", args.records, args.scopes, rng)
        reads = rng.sample(items, min(args.reads, len(items)))
        with fresh(args.dir, args.child_impl) as obj:
            return run_batch_and_reads(obj, warm, items, args.batch, reads)
    if args.child_workload == "threads":
        return {"threads": _threads(args.dir, args.child_impl, make_items("t", args.thread_records, 20, rng))}
    if args.child_workload == "forget":
        return {f"forget_{args.forget_size}": _forget_subject(args.dir, args.forget_size, 2000)}
    raise SystemExit(f"unknown workload {args.child_workload}")


# -- the parent: every child, medians, ratios ------------------------------------------------
def _spawn(
    args: argparse.Namespace, impl: str, workload: str, extra: list[str] | None = None
) -> dict[str, float]:
    cmd = [
        sys.executable,
        __file__,
        "--child-impl",
        impl,
        "--child-workload",
        workload,
        *("--single", str(args.single), "--records", str(args.records), "--batch", str(args.batch)),
        *("--reads", str(args.reads), "--thread-records", str(args.thread_records), "--seed", str(args.seed)),
        *(("--dir", args.dir) if args.dir else ()),
        *(extra or []),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, dict[str, list[float]]] = {}
    loads = [os.getloadavg()]
    for _ in range(args.repeat):
        for workload in ("single", "batch", "threads"):
            for impl in THREAD_IMPLS if workload == "threads" else IMPLS:
                for row, value in _spawn(args, impl, workload).items():
                    runs.setdefault(row, {}).setdefault(impl, []).append(value)
        loads.append(os.getloadavg())
    forget: dict[str, float] = {}
    if args.forget_1m:
        for size in (10_000, 1_000_000):
            got = _spawn(args, "cenotaph", "forget", ["--forget-size", str(size)])
            forget.update(got)
    medians = {row: {impl: statistics.median(v) for impl, v in got.items()} for row, got in runs.items()}
    return {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in loads[0]] + [round(max(x[0] for x in loads), 2)],
        "sizes": {
            "single": args.single,
            "records": args.records,
            "batch": args.batch,
            "reads": args.reads,
            "thread_records": args.thread_records,
            "repeat": args.repeat,
        },
        "median": medians,
        "runs": runs,
        "forget_subject_s": forget,
    }


def table(result: dict[str, Any]) -> str:
    med = result["median"]
    s = result["sizes"]
    lines = [
        f"# bench/floor.py  {result['when']}  python {result['python']}  sqlite {result['sqlite']}  "
        f"cpus={result['cpus']}",
        f"# load average at start {result['loadavg'][:3]}, highest 1-min during the run {result['loadavg'][3]}",
        f"# median of {s['repeat']} runs, each in a fresh interpreter; single={s['single']} "
        f"records={s['records']} batch={s['batch']} reads={s['reads']} threads={THREADS}x"
        f"{s['thread_records'] // THREADS}",
        "",
        "| workload | floor | cenotaph | cenotaph / floor | raw sqlite3 | LangGraph tuned |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def cell(row: str, impl: str) -> str:
        v = med.get(row, {}).get(impl)
        return "—" if v is None else f"{v:,.0f}"

    for row, label, unit in ROWS:
        got = med.get(row, {})
        ratio = f"{got['cenotaph'] / got['floor']:.2f}x" if "cenotaph" in got and "floor" in got else "—"
        lines.append(
            f"| {label} ({unit}) | {cell(row, 'floor')} | {cell(row, 'cenotaph')} | {ratio} | "
            f"{cell(row, 'raw')} | {cell(row, 'langgraph')} |"
        )
    lines += ["", "| target | ratio | target | met? |", "|---|---:|---:|---|"]
    for row, label, num, den, minimum in TARGETS:
        got = med.get(row, {})
        if num in got and den in got:
            r = got[num] / got[den]
            lines.append(f"| {label} | {r:.2f}x | >= {minimum}x | {'yes' if r >= minimum else 'no'} |")
    forget = result["forget_subject_s"]
    if forget:
        small, large = forget["forget_10000"], forget["forget_1000000"]
        r = large / small
        lines.append(
            f"| compliance forget of one subject, 1M vs 10k records ({1000 * large:.1f} / {1000 * small:.1f} ms) "
            f"| {r:.2f}x | <= 1.2x | {'yes' if r <= 1.2 else 'no'} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes: a 1-2 minute run")
    ap.add_argument("--single", type=int, default=None, help="durable single writes (1000; quick 300)")
    ap.add_argument("--records", type=int, default=None, help="batch-written records (20000; quick 10000)")
    ap.add_argument("--batch", type=int, default=500, help="records per batch call (500)")
    ap.add_argument(
        "--reads", type=int, default=None, help="reads by key, cold then warm (20000; quick 10000)"
    )
    ap.add_argument(
        "--thread-records", type=int, default=None, help="records over 8 threads (4000; quick 1600)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is reported (3)")
    ap.add_argument("--forget-1m", action="store_true", help="also one subject's forget at 1M vs 10k records")
    ap.add_argument("--dir", default=None, help="base directory for the temp dirs (default: system temp)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--child-impl", choices=sorted(CLASSES), help=argparse.SUPPRESS)
    ap.add_argument("--child-workload", help=argparse.SUPPRESS)
    ap.add_argument("--forget-size", type=int, default=10_000, help=argparse.SUPPRESS)
    ap.add_argument("--scopes", type=int, default=20, help=argparse.SUPPRESS)
    args = ap.parse_args()
    for name, full, quick in (
        ("single", 1000, 300),
        ("records", 20_000, 10_000),
        ("reads", 20_000, 10_000),
        ("thread_records", 4000, 1600),
    ):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.child_impl:
        print(json.dumps(child(args)))
        return 0
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
