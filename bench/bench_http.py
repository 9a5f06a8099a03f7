"""HTTP throughput: requests/s through `cenotaph serve` next to the library called in-process, one run.

    python bench/bench_http.py                 # defaults (~1 min on 2 cores), table
    python bench/bench_http.py --json          # the same numbers as JSON
    python bench/bench_http.py --seconds 5     # longer cells

Workloads, each at 1 and 16 concurrent clients:
  * write   durable single writes of new keys (``POST /v1/memories`` / ``store.write``),
  * read    reads by key of preloaded records, with fall-through from a child scope
            (``GET /v1/memories`` / ``store.read``),
  * search  top-10 searches over the preloaded records (``POST /v1/search`` / ``store.search``).

The server is a real ``cenotaph serve`` process on 127.0.0.1 (port 0), with an agent key. The load
generator is another process: one thread per concurrent client, each with its own keep-alive
``httpx.Client``; every answer is checked (201/200) and counted. The library column runs the same
calls with the same number of threads on a store opened in this process over its own copy of the
data. Each cell runs ``--seconds`` after a warm-up; cells are interleaved (server, library) per
workload. The load average is printed before and after: on 2 cores the server, the load generator
and the library compete for the same CPUs, so the ratio (server / library) is what to compare.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

import cenotaph
from cenotaph.service.apikeys import ApiKeyRing

TENANT = "bench"
USER = f"tenant:{TENANT}/user:u"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
]
CONCURRENCY = (1, 16)
WORKLOADS = ("write", "read", "search")


def _value(i: int) -> str:
    return " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) + f" #{i}"


def _preload(data: Path, records: int) -> None:
    with cenotaph.open(data) as store:
        items = [{"scope": f"{USER}{i % 20}", "key": f"k{i}", "value": _value(i)} for i in range(records)]
        for start in range(0, len(items), 500):
            store.write_many(items[start : start + 500])


def _ops(records: int) -> dict[str, Callable[[int, int], tuple[str, str, dict[str, Any]]]]:
    """workload -> (client n, op i) -> (method, path, request options)."""
    return {
        "write": lambda n, i: (
            "POST",
            "/v1/memories",
            {"json": {"scope": f"{USER}{n}", "key": f"w{n}-{i}-{time.monotonic_ns()}", "value": _value(i)}},
        ),
        "read": lambda n, i: (
            "GET",
            "/v1/memories",
            {
                "params": {
                    "scope": f"{USER}{(i * 31 + n) % 20}/session:s",
                    "key": f"k{(i * 31 + n) % records}",
                }
            },
        ),
        "search": lambda n, i: (
            "POST",
            "/v1/search",
            {
                "json": {
                    "scope": f"{USER}{(i + n) % 20}",
                    "query": f"{WORDS[i % len(WORDS)]} {WORDS[(i + 5) % len(WORDS)]}",
                    "k": 10,
                }
            },
        ),
    }


def _run_threads(clients: int, seconds: float, one: Callable[[int, int], None]) -> tuple[int, float]:
    """``clients`` threads calling ``one(n, i)`` until ``seconds`` pass; (operations, elapsed)."""
    counts = [0] * clients
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    stop = time.monotonic() + 3600.0
    holder = {"stop": stop}

    def worker(n: int) -> None:
        start.wait()
        i = 0
        try:
            while time.monotonic() < holder["stop"]:
                one(n, i)
                i += 1
        except BaseException as exc:
            errors.append(exc)
        counts[n] = i

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    begun = time.monotonic()
    holder["stop"] = begun + seconds
    start.wait()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts), time.monotonic() - begun


def _load_generator(
    url: str, secret: str, workload: str, clients: int, seconds: float, records: int, out: Any
) -> None:
    """Runs in another process: ``clients`` keep-alive httpx clients hammering one workload."""
    op = _ops(records)[workload]
    expect = 201 if workload == "write" else 200
    sessions = [
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=60)
        for _ in range(clients)
    ]

    def one(n: int, i: int) -> None:
        method, path, options = op(n, i)
        r = sessions[n].request(method, path, **options)
        if r.status_code != expect:
            raise RuntimeError(f"{workload}: HTTP {r.status_code} {r.text[:200]}")

    _run_threads(clients, min(1.0, seconds / 3), one)  # warm-up
    done, elapsed = _run_threads(clients, seconds, one)
    for s in sessions:
        s.close()
    out.put((done, elapsed))


def _server_cell(url: str, secret: str, workload: str, clients: int, seconds: float, records: int) -> float:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_load_generator, args=(url, secret, workload, clients, seconds, records, queue))
    proc.start()
    done, elapsed = queue.get(timeout=seconds * 10 + 120)
    proc.join(60)
    return float(done / elapsed)


def _library_cell(store: cenotaph.Store, workload: str, clients: int, seconds: float, records: int) -> float:
    op = _ops(records)[workload]

    def one(n: int, i: int) -> None:
        _, _, options = op(n, i)
        if workload == "write":
            body = options["json"]
            store.write(body["scope"], body["key"], body["value"])
        elif workload == "read":
            params = options["params"]
            if store.read(params["scope"], params["key"]) is None:
                raise RuntimeError("read found nothing")
        else:
            body = options["json"]
            store.search(body["scope"], body["query"], k=body["k"])

    _run_threads(clients, min(1.0, seconds / 3), one)
    done, elapsed = _run_threads(clients, seconds, one)
    return float(done / elapsed)


def _start_server(data: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cenotaph.cli.main", "serve", "--data", str(data), "--port", "0", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    url = json.loads(proc.stdout.readline())["listening"]
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per cell")
    parser.add_argument("--records", type=int, default=2000, help="records preloaded for read and search")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="cenotaph-bench-http-"))
    os.environ.pop("CENOTAPH_KEYRING", None)
    os.environ.pop("CENOTAPH_MASTER_KEY", None)
    load_before = os.getloadavg()
    try:
        served, local = base / "served", base / "local"
        _preload(served, args.records)
        _preload(local, args.records)
        secret = ApiKeyRing(served).create(tenant=TENANT, role="agent")[1]
        proc, url = _start_server(served)
        results: dict[str, dict[int, dict[str, float]]] = {}
        try:
            with cenotaph.open(local) as store:
                for workload in WORKLOADS:
                    for clients in CONCURRENCY:
                        server = _server_cell(url, secret, workload, clients, args.seconds, args.records)
                        library = _library_cell(store, workload, clients, args.seconds, args.records)
                        results.setdefault(workload, {})[clients] = {"server": server, "library": library}
        finally:
            proc.terminate()
            proc.wait(60)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    doc = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
        },
        "seconds_per_cell": args.seconds,
        "records": args.records,
        "requests_per_second": results,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(
        f"load average before {load_before[0]:.2f}, after {doc['machine']['load_after'][0]:.2f}; {os.cpu_count()} CPUs"
    )
    print(f"{'workload':<8} {'clients':>7} {'server req/s':>13} {'library ops/s':>14} {'server/library':>15}")
    for workload, by in results.items():
        for clients, cell in by.items():
            ratio = cell["server"] / cell["library"]
            print(
                f"{workload:<8} {clients:>7} {cell['server']:>13.0f} {cell['library']:>14.0f} {ratio:>15.2f}"
            )


if __name__ == "__main__":
    main()
