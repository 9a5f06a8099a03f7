"""PostgreSQL: cenotaph next to LangGraph's PostgresStore on one server, same data, one run.

    python bench/bench_postgres.py                   # defaults, table
    python bench/bench_postgres.py --json            # the same numbers as JSON
    python bench/bench_postgres.py --no-replica      # skip the throwaway primary + replica

The server is ``CENOTAPH_TEST_PG_DSN`` (default postgresql://postgres@127.0.0.1:5432/test). Each store
lives where the other cannot see it: cenotaph in a fresh schema of that database (``?schema=``, its
keyring in a temp dir), LangGraph in a fresh database ``bench_lg_<pid>_<n>`` (``CREATE DATABASE``; its
tables are ``public.store``), opened as its docs say (``PostgresStore.from_conn_string`` + ``setup()``).
Both are dropped at the end of each workload, failures included.

Workloads (warm-up excluded; every implementation gets the records of bench_store.py):
  * single   N durable single writes (cenotaph ``write``; LangGraph ``put`` on its autocommit connection:
             one transaction and one commit each, synchronous_commit as the server has it),
  * batch    M records in batches of B (``write_many`` vs ``batch([PutOp, ...])``, one transaction each),
  * read     R reads by key of the batch workload's records after closing and reopening the store (a
             ``cold`` pass: new pool or connection, empty in-process caches; the server's buffers are
             warm), then a ``warm`` pass over the same keys,
  * search   Q searches in one user's scope, k=10, on the same store. They do different things:
             cenotaph's ``search`` embeds the query (its default HashingEmbedder) and ranks every record
             readable from the scope by similarity (exact; the first search after opening builds the
             index from the sealed vectors, or embeds the records that have none: timed apart).
             LangGraph's ``search(namespace, query=...)`` without an ``index=`` config ignores the query:
             it is a filter scan of the namespace prefix returning the ``limit`` newest items. With
             ``index=`` it needs an embedding function and the pgvector extension; whether the server
             has pgvector (``CREATE EXTENSION vector``) is checked and printed, not benchmarked,
  * forget   one-key erasure in a store of F records, ``forgets`` times: cenotaph's compliance forget
             (call to return: tombstone and key destruction durable; then ``wait()`` until ``verified``,
             the purge and its scan done by the store's background worker) vs LangGraph's ``delete``.
             On the shared server (no replica), and, unless --no-replica, on a throwaway primary with one
             streaming replica (tests/postgres/_cluster.py: fsync=off, so compare its rows with each
             other): cenotaph opened with the replica listed (a purge waits for it to replay past the
             purge's commit) and without it, LangGraph's delete beside them.
Round trips: one extra pass per implementation (cenotaph with auto_purge="off", its purge counted on
its own) with psycopg's ``Connection.wait`` and ``Cursor.execute``/``executemany`` counted and timed: a
round trip is a wait outside a pipeline, or one pipeline; per single write, read (first and again), batch
of B, search, forget, and the statements of one cenotaph write and batch with the time waiting on each.
Each (workload, implementation) runs --repeat times, implementations interleaved; the table and the
ratios use the best run; --json also gives the median and every run.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import WARMUP, Item, make_items  # the same records as the SQLite benchmark

import cenotaph
from cenotaph import LocalKeyring, Store
from cenotaph.backends.postgres import open_postgres

PG_DSN_ENV = "CENOTAPH_TEST_PG_DSN"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
IMPLS = ("cenotaph", "langgraph")
WORKLOADS = ("single", "batch", "search", "forget")
CLUSTER_FILE = Path(__file__).resolve().parent.parent / "tests" / "postgres" / "_cluster.py"
WAIT_TIMEOUT_S = 120.0  # a forget not verified by then is a failure of the run

# (row key, label) of the throughput table; ratio = cenotaph / langgraph (higher is better)
RATE_ROWS = (
    ("single", "single durable writes (N={single})"),
    ("batch", "batch writes (M={records}, B={batch})"),
    ("read_cold", "reads, cold after reopen (R={reads})"),
    ("read_warm", "reads, warm (R={reads})"),
    ("search", "searches, k=10 (Q={searches})"),
)


# -- the two stores ---------------------------------------------------------------------------
def _ns(scope: str) -> tuple[str, ...]:
    return tuple(scope.split("/"))


def _admin(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, connect_timeout=10)


_serial = iter(range(1, 1_000_000))


class Impl:
    name = ""

    def __init__(self, dsn: str, replicas: Sequence[str] = ()) -> None:
        self.dsn = dsn
        self.replicas = list(replicas)

    def open(self) -> None: ...
    def close(self) -> None: ...
    def drop(self) -> None: ...
    def write(self, item: Item) -> None: ...
    def write_batch(self, items: Sequence[Item]) -> None: ...
    def read(self, item: Item) -> object: ...
    def search(self, scope: str, query: str) -> int: ...
    def delete(self, item: Item) -> cenotaph.ErasureRequest | None: ...


class Cenotaph(Impl):
    """A cenotaph store in a fresh schema of the database at ``dsn``."""

    name = "cenotaph"

    auto_purge = "background"  # the default: a forget returns shredded, its purge follows in a worker

    def __init__(self, dsn: str, replicas: Sequence[str] = ()) -> None:
        super().__init__(dsn, replicas)
        self.schema = f"bench_c_{os.getpid()}_{next(_serial)}"
        self.keyring = Path(tempfile.mkdtemp(prefix="bench-pg-keyring-"))

    def open(self) -> None:
        backend = open_postgres(self.dsn, schema=self.schema, replicas=self.replicas)
        self.store = Store(backend, LocalKeyring(self.keyring), auto_purge=self.auto_purge)

    def close(self) -> None:
        self.store.close()

    def drop(self) -> None:
        with _admin(self.dsn) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))
        shutil.rmtree(self.keyring, ignore_errors=True)

    def write(self, item: Item) -> None:
        self.store.write(item.scope, item.key, item.value)

    def write_batch(self, items: Sequence[Item]) -> None:
        self.store.write_many([{"scope": i.scope, "key": i.key, "value": i.value} for i in items])

    def read(self, item: Item) -> object:
        rec = self.store.read(item.scope, item.key)
        return None if rec is None else rec.value

    def search(self, scope: str, query: str) -> int:
        return len(self.store.search(scope, query, k=10))

    def delete(self, item: Item) -> cenotaph.ErasureRequest:
        return self.store.forget(item.scope, item.key)  # compliance, the default


class LangGraph(Impl):
    """LangGraph's PostgresStore in a fresh database on the server of ``dsn``."""

    name = "langgraph"

    def __init__(self, dsn: str, replicas: Sequence[str] = ()) -> None:
        super().__init__(dsn, replicas)
        self.database = f"bench_lg_{os.getpid()}_{next(_serial)}"
        with _admin(dsn) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))
        self.conninfo = make_conninfo(dsn, dbname=self.database)
        self._setup = True

    def open(self) -> None:
        self._cm = PostgresStore.from_conn_string(self.conninfo)
        self.store = self._cm.__enter__()
        if self._setup:  # its docs: call setup() the first time the store is used
            self.store.setup()
            self._setup = False

    def close(self) -> None:
        self._cm.__exit__(None, None, None)

    def drop(self) -> None:
        with _admin(self.dsn) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.database))
            )

    def write(self, item: Item) -> None:
        self.store.put(_ns(item.scope), item.key, item.value)

    def write_batch(self, items: Sequence[Item]) -> None:
        self.store.batch([PutOp(_ns(i.scope), i.key, i.value) for i in items])

    def read(self, item: Item) -> object:
        got = self.store.get(_ns(item.scope), item.key)
        return None if got is None else got.value

    def search(self, scope: str, query: str) -> int:
        return len(self.store.search(_ns(scope), query=query, limit=10))

    def delete(self, item: Item) -> None:
        self.store.delete(_ns(item.scope), item.key)


class CenotaphPurgeOff(Cenotaph):
    """For counting round trips: no background worker making its own calls meanwhile (a forget's
    path to return is the same); the purge is counted on its own."""

    auto_purge = "off"


CLASSES: dict[str, type[Impl]] = {
    "cenotaph": Cenotaph,
    "langgraph": LangGraph,
    "cenotaph-purge-off": CenotaphPurgeOff,
}


@contextlib.contextmanager
def fresh(impl: str, dsn: str, replicas: Sequence[str] = ()) -> Iterator[Impl]:
    obj = CLASSES[impl](dsn, replicas)
    try:
        obj.open()
        try:
            yield obj
        finally:
            with contextlib.suppress(Exception):
                obj.close()
    finally:
        obj.drop()


# -- round trips ------------------------------------------------------------------------------
class RoundTrips:
    """Counts and times psycopg's exchanges with the server while active. ``Connection.wait`` is
    where every statement, pipeline sync and commit waits for the server: each wait outside a
    pipeline is one round trip, and a pipeline is one (its statements go out together, its sync
    brings their results back); ``execute``/``executemany`` calls are the statements. Waiting time is
    attributed to the statement that made it (the first words of its SQL)."""

    PIPELINE_END = "(pipeline sync)"

    def __init__(self) -> None:
        self.round_trips = 0
        self.wait_s = 0.0
        self.statements = 0
        self.by_statement: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        self._current: list[str] = []

    @staticmethod
    def _label(query: object) -> str:
        text = query.as_string(None) if isinstance(query, sql.Composable) else str(query)
        return " ".join(text.split())[:70]

    @contextlib.contextmanager
    def active(self) -> Iterator[RoundTrips]:
        wait, execute, executemany = (
            psycopg.Connection.wait,
            psycopg.Cursor.execute,
            psycopg.Cursor.executemany,
        )
        me = self

        def counted_wait(conn: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
            ends_pipeline = getattr(gen, "__qualname__", "") == "BasePipeline._exit_gen"
            if conn._pipeline is None or ends_pipeline:
                me.round_trips += 1
            start = time.perf_counter()
            try:
                return wait(conn, gen, *args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                me.wait_s += spent
                label = me.PIPELINE_END if ends_pipeline or not me._current else me._current[-1]
                me.by_statement[label][1] += spent

        def statement(original: Callable[..., Any]) -> Callable[..., Any]:
            def run(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                label = me._label(query)
                me.statements += 1
                me.by_statement[label][0] += 1
                me._current.append(label)
                try:
                    return original(cursor, query, *args, **kwargs)
                finally:
                    me._current.pop()

            return run

        psycopg.Connection.wait = counted_wait  # type: ignore[method-assign]
        psycopg.Cursor.execute = statement(execute)  # type: ignore[method-assign]
        psycopg.Cursor.executemany = statement(executemany)  # type: ignore[method-assign]
        try:
            yield self
        finally:
            psycopg.Connection.wait = wait  # type: ignore[method-assign]
            psycopg.Cursor.execute = execute  # type: ignore[method-assign]
            psycopg.Cursor.executemany = executemany  # type: ignore[method-assign]


TRIP_OPS = 50  # operations of each kind counted


def measure_trips(
    impl: str, dsn: str, items: list[Item], batch: list[Item], queries: list[tuple[str, str]]
) -> dict[str, Any]:
    """Per operation: round trips, statements, time waiting on the server, and time in all.
    ``items``: 2 x TRIP_OPS records (the first half preloaded, forgotten at the end)."""
    out: dict[str, Any] = {}
    with fresh("cenotaph-purge-off" if impl == "cenotaph" else impl, dsn) as obj:
        victims, singles = items[:TRIP_OPS], items[TRIP_OPS:]
        obj.write_batch(victims)
        obj.search(*queries[0])  # the search index built, outside the count
        cases: list[tuple[str, int, Callable[[], object]]] = [
            ("single write", len(singles), lambda: [obj.write(it) for it in singles]),
            ("read", len(singles), lambda: [obj.read(it) for it in singles]),
            ("read again (warm)", len(singles), lambda: [obj.read(it) for it in singles]),
            (f"batch of {len(batch)}", 1, lambda: obj.write_batch(batch)),
            ("search", len(queries), lambda: [obj.search(s, q) for s, q in queries]),
            ("forget / delete (to return)", len(victims), lambda: [obj.delete(it) for it in victims]),
        ]
        if isinstance(obj, Cenotaph):
            purge = obj.store.purge
            cases.append(("purge + verification of those forgets, per forget", len(victims), purge))
        for label, count, body in cases:
            trips = RoundTrips()
            with trips.active():
                start = time.perf_counter()
                body()
                total = time.perf_counter() - start
            out[label] = {
                "round_trips": trips.round_trips / count,
                "statements": trips.statements / count,
                "waiting_ms": 1000 * trips.wait_s / count,
                "total_ms": 1000 * total / count,
            }
            if impl == "cenotaph" and label in ("single write", f"batch of {len(batch)}"):
                out[f"statements of one {label}"] = [
                    {"statement": k, "calls": n / count, "waiting_ms": 1000 * s / count}
                    for k, (n, s) in sorted(trips.by_statement.items(), key=lambda kv: -kv[1][1])
                ]
    return out


# -- workloads --------------------------------------------------------------------------------
def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _batches(items: list[Item], size: int) -> list[list[Item]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def run_single(obj: Impl, warm: list[Item], items: list[Item]) -> dict[str, float]:
    for it in warm:
        obj.write(it)
    return {"single": len(items) / _timed(lambda: [obj.write(it) for it in items])}


def run_batch_reads_search(
    obj: Impl,
    warm: list[Item],
    items: list[Item],
    batch: int,
    reads: list[Item],
    queries: list[tuple[str, str]],
) -> dict[str, float]:
    obj.write_batch(warm)
    batches = _batches(items, batch)
    out = {"batch": len(items) / _timed(lambda: [obj.write_batch(b) for b in batches])}
    obj.close()
    obj.open()  # cold: a new pool / connection, in-process caches empty
    for it in warm:
        obj.read(it)
    for label in ("read_cold", "read_warm"):
        start = time.perf_counter()
        values = [obj.read(it) for it in reads]
        out[label] = len(reads) / (time.perf_counter() - start)
        if sum(v is not None for v in values) != len(reads):
            raise SystemExit(f"{obj.name}: a read of an existing key returned nothing")
    if obj.read(reads[0]) != reads[0].value:
        raise SystemExit(f"{obj.name}: a read returned the wrong value")
    out["first_search_ms"] = 1000 * _timed(lambda: obj.search(*queries[0]))
    found: list[int] = []
    elapsed = _timed(lambda: found.extend(obj.search(s, q) for s, q in queries))
    if not all(found):
        raise SystemExit(f"{obj.name}: a search found nothing")
    out["search"] = len(queries) / elapsed
    return out


def run_forgets(obj: Impl, items: list[Item], victims: list[Item], batch: int) -> dict[str, float]:
    """Latency of erasing one key: call to return, and for cenotaph also until ``verified`` (each
    forget waited for before the next, so one request's latency, not a backlog's)."""
    for b in _batches(items, batch):
        obj.write_batch(b)
    returned, verified = [], []
    for it in victims:
        start = time.perf_counter()
        req = obj.delete(it)
        returned.append(time.perf_counter() - start)
        if req is not None:
            state = req.wait(timeout=WAIT_TIMEOUT_S).state
            if state != "verified":
                raise SystemExit(f"a compliance forget ended {state}, not verified")
            verified.append(time.perf_counter() - start)
    if obj.read(victims[0]) is not None:
        raise SystemExit(f"{obj.name}: an erased key is still read")
    out = _latency("return", returned)
    if verified:
        out.update(_latency("verified", verified))
    return out


def _latency(label: str, samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        f"{label}_median_ms": 1000 * statistics.median(samples),
        f"{label}_p95_ms": 1000 * samples[int(0.95 * (len(samples) - 1))],
    }


def _load_cluster() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_pg_cluster", CLUSTER_FILE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {CLUSTER_FILE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _server(dsn: str) -> dict[str, Any]:
    with _admin(dsn) as conn:
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("server_version", "fsync", "synchronous_commit", "wal_level", "shared_buffers")
        }
        try:
            with conn.transaction():  # rolled back: the check leaves nothing behind
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                raise psycopg.Rollback
            settings["pgvector"] = "available (CREATE EXTENSION vector succeeded, rolled back)"
        except psycopg.Error as exc:
            settings["pgvector"] = f"missing: CREATE EXTENSION vector failed ({type(exc).__name__})"
        try:
            conn.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
            settings["pg_stat_statements"] = "loaded"
        except psycopg.Error:
            settings["pg_stat_statements"] = (
                "not loaded (not in shared_preload_libraries): trips counted in psycopg"
            )
    return settings


def _best(runs: dict[str, dict[str, list[float]]], lower: bool) -> dict[str, dict[str, float]]:
    pick = min if lower else max
    return {w: {i: pick(v) for i, v in per.items()} for w, per in runs.items()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    warm = make_items("w", WARMUP, args.scopes, rng)
    singles = make_items("s", args.single, args.scopes, rng)
    batch_items = make_items("k", args.records, args.scopes, rng)
    reads = (
        rng.sample(batch_items, args.reads)
        if args.reads <= len(batch_items)
        else rng.choices(batch_items, k=args.reads)
    )
    queries = [
        (rng.choice(batch_items).scope, " ".join(rng.choice(batch_items).value["text"].split()[:3]))
        for _ in range(args.searches)
    ]
    forget_items = make_items("f", args.forget_records, args.scopes, rng)
    victims = rng.sample(forget_items, min(args.forgets, len(forget_items)))
    load_before = os.getloadavg()
    header = (
        f"# bench_postgres  {time.strftime('%Y-%m-%d %H:%M %Z')}  python {platform.python_version()}  "
        f"psycopg {psycopg.__version__}  cpus={os.cpu_count()}  loadavg={load_before[0]:.2f}"
    )
    servers = {"shared": _server(args.dsn)}
    runs: dict[str, dict[str, list[float]]] = {}
    firsts: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for impl in args.impls:
            if "single" in args.workloads:
                with fresh(impl, args.dsn) as obj:
                    for k, v in run_single(obj, warm, singles).items():
                        runs.setdefault(k, {}).setdefault(impl, []).append(v)
            if "batch" in args.workloads or "search" in args.workloads:
                with fresh(impl, args.dsn) as obj:
                    got = run_batch_reads_search(obj, warm, batch_items, args.batch, reads, queries)
                    firsts.setdefault(impl, []).append(got.pop("first_search_ms"))
                    for k, v in got.items():
                        runs.setdefault(k, {}).setdefault(impl, []).append(v)
    forgets: dict[str, dict[str, dict[str, list[float]]]] = {}
    cluster_note = "not run (--no-replica)" if args.no_replica else ""
    if "forget" in args.workloads:
        places: list[tuple[str, str, Sequence[str], str]] = [
            ("shared server, no replica", args.dsn, (), impl) for impl in args.impls
        ]
        cluster = None
        if not args.no_replica:
            try:
                cluster = _load_cluster().Cluster.create()
            except Exception as exc:
                cluster_note = f"unavailable: {exc}"
        try:
            if cluster is not None:
                primary, replica = cluster.primary.dsn, cluster.replica.dsn
                servers["throwaway primary"] = _server(primary)
                places += [("throwaway primary, no replica listed", primary, (), impl) for impl in args.impls]
                if "cenotaph" in args.impls:
                    places.append(
                        ("throwaway primary + 1 streaming replica", primary, (replica,), "cenotaph")
                    )
            for _ in range(args.repeat):
                for place, dsn, replicas, impl in places:
                    with fresh(impl, dsn, replicas) as obj:
                        got = run_forgets(obj, forget_items, victims, args.batch)
                    per = forgets.setdefault(place, {}).setdefault(impl, {})
                    for k, v in got.items():
                        per.setdefault(k, []).append(v)
        finally:
            if cluster is not None:
                cluster.destroy()
    forget_best = {
        p: {i: {k: min(v) for k, v in got.items()} for i, got in per.items()} for p, per in forgets.items()
    }
    trips = {}
    if not args.no_trips:
        for impl in args.impls:
            counted = make_items("r", 2 * TRIP_OPS, args.scopes, rng)
            trips[impl] = measure_trips(impl, args.dsn, counted, batch_items[: args.batch], queries[:20])
    best = _best(runs, lower=False)
    ratios = []
    for key, label in RATE_ROWS:
        got = best.get(key, {})
        if "cenotaph" in got and "langgraph" in got:
            ratios.append({"name": label.format(**vars(args)), "ratio": got["cenotaph"] / got["langgraph"]})
    for place, per in forget_best.items():
        if "cenotaph" in per and "langgraph" in per:
            lg = per["langgraph"]["return_median_ms"]
            for stage in ("return", "verified"):
                ratios.append(
                    {
                        "name": f"forget one key to {stage} / LangGraph delete, {place} (ms, lower is better)",
                        "ratio": per["cenotaph"][f"{stage}_median_ms"] / lg,
                    }
                )
    with_replica = forget_best.get("throwaway primary + 1 streaming replica", {}).get("cenotaph")
    without = forget_best.get("throwaway primary, no replica listed", {}).get("cenotaph")
    if with_replica and without:
        for stage in ("return", "verified"):
            ratios.append(
                {
                    "name": f"forget to {stage}: with a replica / without (ms, lower is better)",
                    "ratio": with_replica[f"{stage}_median_ms"] / without[f"{stage}_median_ms"],
                }
            )
    return {
        "header": header,
        "pid": os.getpid(),  # names its schemas bench_c_<pid>_<n> and databases bench_lg_<pid>_<n>
        "sizes": {
            k: getattr(args, k)
            for k in (
                "single",
                "records",
                "batch",
                "reads",
                "searches",
                "scopes",
                "forget_records",
                "forgets",
                "repeat",
            )
        },
        "ops_per_s": best,
        "ops_per_s_median": {w: {i: statistics.median(v) for i, v in per.items()} for w, per in runs.items()},
        "runs": runs,
        "first_search_ms": {i: min(v) for i, v in firsts.items()},
        "forgets": forget_best,
        "forget_runs": forgets,
        "cluster": cluster_note or "used",
        "ratios": ratios,
        "round_trips": trips,
        "servers": servers,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "psycopg": psycopg.__version__,
            "platform": platform.platform(),
            "server": conninfo_to_dict(args.dsn).get("host", "?"),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


# -- output -----------------------------------------------------------------------------------
def table(result: dict[str, Any]) -> str:
    s = result["sizes"]
    lines = [result["header"], ""]
    lines += [
        f"| workload (ops/s, best of {s['repeat']}) | cenotaph | langgraph | ratio |",
        "|---|---:|---:|---:|",
    ]
    for key, label in RATE_ROWS:
        vals = result["ops_per_s"].get(key, {})
        if not vals:
            continue
        c, g = vals.get("cenotaph"), vals.get("langgraph")
        ratio = f"{c / g:.2f}x" if c and g else "-"
        cells = " | ".join(f"{v:,.0f}" if v else "-" for v in (c, g))
        lines.append(f"| {label.format(**s)} | {cells} | {ratio} |")
    for impl, ms in result["first_search_ms"].items():
        lines.append(f"first search after reopening, {impl}: {ms:,.0f} ms")
    if result["forgets"]:
        lines += [
            "",
            f"| erase one key, store of {s['forget_records']:,} (ms, best of {s['repeat']} medians) "
            "| to return, median | p95 | to verified, median | p95 |",
            "|---|---:|---:|---:|---:|",
        ]
        for place, per in result["forgets"].items():
            for impl, got in per.items():
                what = "cenotaph forget (compliance)" if impl == "cenotaph" else "LangGraph delete"
                ver = (
                    f"{got['verified_median_ms']:.1f} | {got['verified_p95_ms']:.1f}"
                    if "verified_median_ms" in got
                    else "- | -"
                )
                lines.append(
                    f"| {what}, {place} | {got['return_median_ms']:.2f} | {got['return_p95_ms']:.2f} | {ver} |"
                )
    lines.append(f"throwaway primary + replica: {result['cluster']}")
    lines += ["", "| ratio (cenotaph / LangGraph unless named) | |", "|---|---:|"]
    for r in result["ratios"]:
        lines.append(f"| {r['name']} | {r['ratio']:.2f}x |")
    if result["round_trips"]:
        lines += [
            "",
            "| per operation | impl | round trips | statements | waiting on the server, ms | in all, ms |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for impl, per in result["round_trips"].items():
            for op, got in per.items():
                if isinstance(got, dict):
                    lines.append(
                        f"| {op} | {impl} | {got['round_trips']:.1f} | {got['statements']:.1f} | "
                        f"{got['waiting_ms']:.2f} | {got['total_ms']:.2f} |"
                    )
        for op, listed in result["round_trips"].get("cenotaph", {}).items():
            if not op.startswith("statements of one"):
                continue
            lines += ["", f"| {op} (cenotaph) | calls | waiting ms |", "|---|---:|---:|"]
            for st in listed:
                text = st["statement"].replace("|", "\\|")
                lines.append(f"| `{text}` | {st['calls']:.1f} | {st['waiting_ms']:.2f} |")
    lines.append("")
    for name, settings in result["servers"].items():
        lines.append(f"{name} server: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    m = result["machine"]
    lines.append(
        f"machine: {m['cpus']} CPUs, Python {m['python']}, psycopg {m['psycopg']}, server at {m['server']}; "
        f"1-min load average before/after: {m['loadavg_1m_before_after']}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--dsn", default=os.environ.get(PG_DSN_ENV) or DEFAULT_DSN, help=f"the server (${PG_DSN_ENV})"
    )
    ap.add_argument("--single", type=int, default=2000, help="N durable single writes (default 2000)")
    ap.add_argument("--records", type=int, default=20_000, help="M records for batch writes (default 20000)")
    ap.add_argument("--batch", type=int, default=500, help="B records per batch (default 500)")
    ap.add_argument("--reads", type=int, default=5000, help="R reads by key (default 5000)")
    ap.add_argument("--searches", type=int, default=200, help="Q searches (default 200)")
    ap.add_argument("--scopes", type=int, default=20, help="user scopes the records spread over (default 20)")
    ap.add_argument(
        "--forget-records", type=int, default=2000, help="F records in the forget stores (default 2000)"
    )
    ap.add_argument("--forgets", type=int, default=20, help="one-key erasures timed per store (default 20)")
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per measurement; the best is reported (default 3)"
    )
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset of " + ",".join(IMPLS))
    ap.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help="comma-separated subset of "
        + ",".join(WORKLOADS)
        + " (batch and search share one store, with the reads)",
    )
    ap.add_argument(
        "--no-replica", action="store_true", help="skip the throwaway primary + streaming replica"
    )
    ap.add_argument("--no-trips", action="store_true", help="skip the round-trip counting pass")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args(argv)
    args.impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if unknown := set(args.workloads) - set(WORKLOADS):
        ap.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    if unknown := set(args.impls) - set(IMPLS):
        ap.error(f"unknown implementation(s): {', '.join(sorted(unknown))}")
    sizes = (args.single, args.records, args.batch, args.reads, args.searches, args.scopes)
    if min(*sizes, args.forget_records, args.forgets, args.repeat) < 1:
        ap.error("sizes must be positive")
    result = run(args)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
