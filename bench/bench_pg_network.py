"""PostgreSQL over a network: cenotaph and LangGraph's PostgresStore through a delaying relay.

    python bench/bench_pg_network.py --quick          # ~2-3 min: the issue's table
    python bench/bench_pg_network.py                  # larger samples
    python bench/bench_pg_network.py --json

The relay (bench/netdelay.py, its own process) sits between the client and the server of ``--dsn``
(``CENOTAPH_TEST_PG_DSN``, default postgresql://postgres@127.0.0.1:5432/test) and delays each
direction ``--delay-ms`` (1 ms: a 2 ms round trip). Each implementation runs in its own process
(``--worker``), talking to the server only through the relay; the stores are created beforehand by
this process on the direct connection (cenotaph: a fresh schema; LangGraph: a fresh database and
``setup()``, as bench_postgres.py does) and dropped at the end.

Per operation, the median latency and the round trips per operation (the relay's count over the
operations / their number; the relay counts a round trip each time a client speaks after the server):
  * single write   N durable writes (``write`` / ``put``),
  * cold read      R reads by key of distinct records after closing and reopening the store (a new
                   pool or connection, empty in-process caches; one read before, outside the count,
                   opens the connection),
  * search k=10    Q searches in a user's scope (the first after reopening, which builds cenotaph's
                   index, is outside the count; LangGraph without ``index=`` is a filter scan),
  * forget         F one-key compliance forgets, call to return (``auto_purge="off"`` so no worker
                   adds its own traffic; the purge runs afterwards, untimed) vs ``delete``.
Scaling: P processes (1, then ``--procs``) each writing its own user of one tenant for ``--seconds``,
started together (each opens its store, says ready, and starts on a line on stdin); writes/s in all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_postgres import DEFAULT_DSN, IMPLS, PG_DSN_ENV, Cenotaph, Impl, LangGraph
from bench_store import Item, make_items
from netdelay import Control

HERE = Path(__file__).resolve()
SCOPES = 20

# (operation, target ratio cenotaph/LangGraph: at most for latency, at least for scaling)
TARGETS = {
    "single write": ("<=", 1.5),
    "cold read": ("<=", 1.2),
    "search k=10": ("<=", 2.0),
    "forget (call to return) / delete": ("<=", 4.0),
    "process scaling": (">=", 5.6),  # --procs (8) / 1
}


# -- the stores, named so that several processes open the same one -----------------------------
def _open(impl: str, dsn: str, name: str, keyring: str, auto_purge: str = "background") -> Impl:
    obj: Impl
    if impl == "cenotaph":
        obj = Cenotaph.__new__(Cenotaph)
        obj.schema, obj.keyring = name, Path(keyring)
        obj.auto_purge = auto_purge
    else:
        obj = LangGraph.__new__(LangGraph)
        obj.database, obj._setup = name, False
        obj.conninfo = make_conninfo(dsn, dbname=name)
    obj.dsn, obj.replicas = dsn, []
    obj.open()
    return obj


@contextlib.contextmanager
def created(impl: str, dsn: str) -> Iterator[tuple[str, str]]:
    """A fresh store on the direct connection: yields (name, keyring); dropped afterwards."""
    obj: Impl = Cenotaph(dsn) if impl == "cenotaph" else LangGraph(dsn)
    try:
        obj.open()
        obj.close()
        if isinstance(obj, Cenotaph):
            yield obj.schema, str(obj.keyring)
        else:
            assert isinstance(obj, LangGraph)
            yield obj.database, ""
    finally:
        obj.drop()


# -- workers (each in its own process, through the relay) --------------------------------------
def _per_op(control: Control, items: list[Any], op: Callable[[Any], object]) -> dict[str, float]:
    latencies = []
    control.reset()
    for it in items:
        start = time.perf_counter()
        op(it)
        latencies.append(time.perf_counter() - start)
    trips = control.stats()["round_trips"]
    return {"median_ms": 1000 * statistics.median(latencies), "round_trips": trips / len(items)}


def worker_ops(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    control = Control(args.control)
    preload = make_items("p", max(args.reads, args.forgets) + 50, SCOPES, rng)
    singles = make_items("s", args.single + 10, SCOPES, rng)
    obj = _open(args.impl, args.dsn, args.name, args.keyring, auto_purge="off")
    out: dict[str, Any] = {}
    for b in range(0, len(preload), 500):
        obj.write_batch(preload[b : b + 500])
    for it in singles[:10]:  # warm-up
        obj.write(it)
    out["single write"] = _per_op(control, singles[10:], obj.write)
    obj.close()
    obj.open()  # cold: a new pool / connection, in-process caches empty
    obj.read(preload[-1])  # opens the connection
    reads = preload[: args.reads]
    out["cold read"] = _per_op(control, reads, obj.read)
    queries = [(it.scope, it.value["text"][:40]) for it in rng.sample(preload, args.searches + 1)]
    obj.search(*queries[0])  # cenotaph builds its index here
    out["search k=10"] = _per_op(control, queries[1:], lambda q: obj.search(*q))
    victims = preload[-1 - args.forgets : -1]
    out["forget (call to return) / delete"] = _per_op(control, victims, obj.delete)
    if obj.read(victims[0]) is not None:
        raise SystemExit(f"{args.impl}: an erased key is still read")
    if isinstance(obj, Cenotaph):
        obj.store.purge()
    obj.close()
    control.close()
    return out


def worker_writer(args: argparse.Namespace) -> dict[str, Any]:
    obj = _open(args.impl, args.dsn, args.name, args.keyring)
    scope = f"tenant:acme/user:w{args.index:03d}"
    value = {"n": 0, "text": "x" * 170}
    obj.write(Item(scope, "warm", value, b""))
    print("ready", flush=True)
    sys.stdin.readline()
    count, end = 0, time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        obj.write(Item(scope, f"k{count:08d}", value, b""))
        count += 1
    obj.close()
    return {"writes": count}


# -- the parent ---------------------------------------------------------------------------------
def _python(*argv: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HERE), *argv], stdout=subprocess.PIPE, text=True, **kwargs)


@contextlib.contextmanager
def relay(dsn: str, delay_ms: float) -> Iterator[tuple[str, int]]:
    """The relay in its own process: yields (relayed dsn, control port)."""
    info = conninfo_to_dict(dsn)
    target = f"{info.get('host') or '127.0.0.1'}:{info.get('port') or 5432}"
    proc = subprocess.Popen(
        [sys.executable, str(HERE.parent / "netdelay.py"), "--target", target, "--delay-ms", str(delay_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ports = json.loads(proc.stdout.readline())
        yield make_conninfo(dsn, host="127.0.0.1", port=str(ports["listening"])), ports["control"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _common(impl: str, dsn: str, name: str, keyring: str) -> list[str]:
    return ["--impl", impl, "--dsn", dsn, "--name", name, "--keyring", keyring or "-"]


def scaling(impl: str, dsn: str, name: str, keyring: str, procs: int, seconds: float) -> float:
    """Writes/s of ``procs`` processes started together, each writing its own user."""
    workers = [
        _python(
            "--worker", "writer", *_common(impl, dsn, name, keyring),
            "--index", str(i), "--seconds", str(seconds),
            stdin=subprocess.PIPE,
        )
        for i in range(procs)
    ]  # fmt: skip
    try:
        for w in workers:
            assert w.stdout is not None
            if w.stdout.readline().strip() != "ready":
                raise SystemExit(f"{impl}: a writer did not start")
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        total = 0
        for w in workers:
            out, _ = w.communicate(timeout=seconds + 120)
            if w.returncode:
                raise SystemExit(f"{impl}: a writer failed")
            total += json.loads(out.splitlines()[-1])["writes"]
    finally:
        for w in workers:  # a failed run leaves no writer behind
            if w.poll() is None:
                w.kill()
                w.wait()
    return total / seconds


def run(args: argparse.Namespace) -> dict[str, Any]:
    load = os.getloadavg()
    result: dict[str, Any] = {"ops": {}, "scaling": {}, "sizes": {}}
    with relay(args.dsn, args.delay_ms) as (relayed, control):
        for impl in args.impls:
            with created(impl, args.dsn) as (name, keyring):
                sizes = ["--single", str(args.single), "--reads", str(args.reads)]
                sizes += ["--searches", str(args.searches), "--forgets", str(args.forgets)]
                proc = _python(
                    "--worker", "ops", *_common(impl, relayed, name, keyring),
                    "--control", str(control), *sizes,
                )  # fmt: skip
                out, _ = proc.communicate(timeout=1800)
                if proc.returncode:
                    raise SystemExit(f"{impl}: the operations worker failed")
                result["ops"][impl] = json.loads(out.splitlines()[-1])
            for procs in (1, args.procs):
                with created(impl, args.dsn) as (name, keyring):
                    rate = scaling(impl, relayed, name, keyring, procs, args.seconds)
                    result["scaling"].setdefault(impl, {})[str(procs)] = rate  # str: as JSON has it
    result["sizes"] = {
        k: getattr(args, k) for k in ("single", "reads", "searches", "forgets", "procs", "seconds")
    }
    result["delay_ms"] = args.delay_ms
    result["loadavg_1m_before_after"] = [round(load[0], 2), round(os.getloadavg()[0], 2)]
    result["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return result


def table(result: dict[str, Any]) -> str:
    ops, sc, p = result["ops"], result["scaling"], str(result["sizes"]["procs"])
    lines = [
        f"round trip {2 * result['delay_ms']:g} ms; sizes {result['sizes']}; "
        f"1-min load before/after {result['loadavg_1m_before_after']}; {result['date']}",
        "",
        "| operation | cenotaph | LangGraph | ratio | target | met? | round trips, cenotaph | round trips, LangGraph |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for op, (cmp, target) in TARGETS.items():
        if op.endswith("scaling"):
            c = g = None
            if "cenotaph" in sc:
                c = sc["cenotaph"][p] / sc["cenotaph"]["1"]
            if "langgraph" in sc:
                g = sc["langgraph"][p] / sc["langgraph"]["1"]
            cells = [
                f"{sc[i]['1']:,.0f} → {sc[i][p]:,.0f} w/s ({v:.1f}x)" if v else "-"
                for i, v in (("cenotaph", c), ("langgraph", g))
            ]
            ratio, value, trips = "-", c, ["-", "-"]
            label = f"{p} processes / 1, writes/s"
        else:
            got = [ops.get(i, {}).get(op) for i in IMPLS]
            cells = [f"{x['median_ms']:.2f} ms" if x else "-" for x in got]
            trips = [f"{x['round_trips']:.1f}" if x else "-" for x in got]
            value = got[0]["median_ms"] / got[1]["median_ms"] if all(got) else None
            ratio, label = (f"{value:.2f}x" if value else "-"), op
        met = (
            "-"
            if value is None
            else ("yes" if (value <= target if cmp == "<=" else value >= target) else "no")
        )
        lines.append(
            f"| {label} | {cells[0]} | {cells[1]} | {ratio} | {cmp} {target:g}x | {met} | {trips[0]} | {trips[1]} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--dsn", default=os.environ.get(PG_DSN_ENV) or DEFAULT_DSN, help=f"the server (${PG_DSN_ENV})"
    )
    ap.add_argument("--delay-ms", type=float, default=1.0, help="the relay's delay each way (default 1)")
    ap.add_argument("--quick", action="store_true", help="small samples: ~2-3 min")
    ap.add_argument("--single", type=int, help="N single writes (default 300; --quick 100)")
    ap.add_argument("--reads", type=int, help="R cold reads (default 300; --quick 100)")
    ap.add_argument("--searches", type=int, help="Q searches (default 100; --quick 30)")
    ap.add_argument("--forgets", type=int, help="F forgets / deletes (default 50; --quick 20)")
    ap.add_argument("--procs", type=int, default=8, help="writer processes of the scaling row (default 8)")
    ap.add_argument("--seconds", type=float, help="each scaling run's duration (default 15; --quick 10)")
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset of " + ",".join(IMPLS))
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    # the workers' side (run by this script in subprocesses)
    ap.add_argument("--worker", choices=("ops", "writer"), help=argparse.SUPPRESS)
    for hidden in ("--impl", "--name", "--keyring"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--control", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for key, full, quick in (
        ("single", 300, 100), ("reads", 300, 100), ("searches", 100, 30), ("forgets", 50, 20), ("seconds", 15, 10)
    ):  # fmt: skip
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    if args.worker:
        got = worker_ops(args) if args.worker == "ops" else worker_writer(args)
        print(json.dumps(got), flush=True)
        return 0
    args.impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if unknown := set(args.impls) - set(IMPLS):
        ap.error(f"unknown implementation(s): {', '.join(sorted(unknown))}")
    if min(args.single, args.reads, args.searches, args.forgets, args.procs, args.seconds) <= 0:
        ap.error("sizes must be positive")
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
