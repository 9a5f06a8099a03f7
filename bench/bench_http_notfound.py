"""The 404 timing class: foreign, missing and forgotten lookups through `cenotaph serve`, side by side.

    python bench/bench_http_notfound.py                # defaults (~20 s on 2 cores), table
    python bench/bench_http_notfound.py --json         # the same numbers as JSON
    python bench/bench_http_notfound.py --samples 400  # more samples per cell

A key must not learn from an answer whether something outside its prefix exists: a foreign scope,
a missing one and a forgotten record answer the same 404 with the same body (tests/http/test_auth.py
checks the bytes). This measures the other half, the time: for each lookup route it sends, with an
agent key bound to ``tenant:a/user:alice``, requests for

  * foreign   another tenant's existing record, scope or erasure request,
  * missing   something inside the prefix that never existed,
  * forgotten something inside the prefix that was written, then forgotten (compliance, verified),

interleaved (one of each in turn, so drift hits all three alike), and prints the median and the 90th
percentile of each, and the largest ratio between the three medians of a route. The server is a real
``cenotaph serve`` process on 127.0.0.1 with one keep-alive client in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from bench_http import _start_server

import cenotaph
from cenotaph.service.apikeys import ApiKeyRing

ALICE = "tenant:a/user:alice"
BOB = "tenant:b/user:bob"


def _prepare(data: Path, records: int) -> dict[str, Any]:
    """Both tenants' records, alice's forgotten ones, and each side's erasure request ids."""
    with cenotaph.open(data) as store:
        for owner in (ALICE, BOB):
            items = [
                {"scope": f"{owner}/s:{i % 10}", "key": f"k{i}", "value": f"v{i}"} for i in range(records)
            ]
            store.write_many(items)
        ring = ApiKeyRing(store)
        alice = ring.create(tenant="a", prefix=ALICE, role="agent")[1]
        bob = ring.create(tenant="b", prefix=BOB, role="agent")[1]
    return {"alice": alice, "bob": bob}


def _cases(http: httpx.Client, keys: dict[str, str]) -> dict[str, dict[str, Callable[[], httpx.Response]]]:
    ha, hb = {"Authorization": f"Bearer {keys['alice']}"}, {"Authorization": f"Bearer {keys['bob']}"}

    def read(headers: dict[str, str], scope: str, key: str) -> dict[str, Any]:
        r = http.get("/v1/memories", params={"scope": scope, "key": key}, headers=headers)
        return dict(r.json()) if r.status_code == 200 else {}

    bob_record = read(hb, f"{BOB}/s:1", "k1")
    doomed = read(ha, f"{ALICE}/s:2", "k2")
    forgotten_erasure = http.post(
        "/v1/forget", json={"scope": f"{ALICE}/s:2", "key": "k2"}, headers=ha
    ).json()
    http.post("/v1/forget", json={"scope": f"{ALICE}/s:3"}, headers=ha)  # a whole scope
    bob_erasure = http.post("/v1/forget", json={"scope": f"{BOB}/s:2", "key": "k2"}, headers=hb).json()
    deadline = time.monotonic() + 60
    while http.get(forgotten_erasure["status_url"], headers=ha).json()["status"]["state"] != "verified":
        if time.monotonic() > deadline:
            raise RuntimeError("the forget did not verify")
        time.sleep(0.1)

    def get(path: str, **params: str) -> Callable[[], httpx.Response]:
        return lambda: http.get(path, params=params, headers=ha)

    return {
        "GET /v1/memories": {
            "foreign": get("/v1/memories", scope=f"{BOB}/s:1", key="k1"),
            "missing": get("/v1/memories", scope=f"{ALICE}/s:1", key="never"),
            "forgotten": get("/v1/memories", scope=f"{ALICE}/s:2", key="k2"),
        },
        "GET /v1/memories/{id}": {
            "foreign": get(f"/v1/memories/{bob_record['id']}"),
            "missing": get("/v1/memories/" + "0" * 32),
            "forgotten": get(f"/v1/memories/{doomed['id']}"),
        },
        "GET /v1/memories/list": {
            "foreign": get("/v1/memories/list", scope=f"{BOB}/s:1"),
            "missing": get("/v1/memories/list", scope=f"{ALICE}/s:never"),
            "forgotten": get("/v1/memories/list", scope=f"{ALICE}/s:3"),
        },
        "GET /v1/erasures/{id}": {
            "foreign": get(f"/v1/erasures/{bob_erasure['request_id']}"),
            "missing": get("/v1/erasures/er_" + "0" * 24),
            # an erasure request of alice's own is visible to her (200): the forgotten column is n/a
        },
    }


def _measure(cases: dict[str, Callable[[], httpx.Response]], samples: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(20):  # warm-up
        for call in cases.values():
            call()
    for _ in range(samples):
        for name, call in cases.items():
            started = time.perf_counter()
            r = call()
            times[name].append((time.perf_counter() - started) * 1000)
            if r.status_code != 404:
                raise RuntimeError(f"{name} answered {r.status_code}, not 404")
    return {
        name: {"median_ms": statistics.median(t), "p90_ms": statistics.quantiles(t, n=10)[-1]}
        for name, t in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="requests per cell")
    parser.add_argument("--records", type=int, default=2000, help="records per tenant")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cenotaph-bench-404-"))
    os.environ.pop("CENOTAPH_KEYRING", None)
    os.environ.pop("CENOTAPH_MASTER_KEY", None)
    load_before = os.getloadavg()
    try:
        data = base / "data"
        keys = _prepare(data, args.records)
        proc, url = _start_server(data)
        try:
            with httpx.Client(base_url=url, timeout=30) as http:
                results = {
                    route: _measure(cases, args.samples) for route, cases in _cases(http, keys).items()
                }
        finally:
            proc.terminate()
            proc.wait(30)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()
    if args.json:
        print(json.dumps({"results": results, "load": [load_before[0], load_after[0]]}, indent=2))
        return
    print(
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; {args.samples} samples per cell"
    )
    print(f"{'route':24} {'case':10} {'median ms':>10} {'p90 ms':>8}   max/min of medians")
    for route, cells in results.items():
        medians = [c["median_ms"] for c in cells.values()]
        spread = f"{max(medians) / min(medians):.2f}"
        for n, (case, cell) in enumerate(cells.items()):
            tail = spread if n == 0 else ""
            print(f"{route:24} {case:10} {cell['median_ms']:10.2f} {cell['p90_ms']:8.2f}   {tail}")


if __name__ == "__main__":
    main()
