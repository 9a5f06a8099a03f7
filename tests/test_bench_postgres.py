"""bench/bench_postgres.py runs end to end at tiny sizes on the shared PostgreSQL server: every
workload gives a figure for both stores, the erasures verify, the round trips are counted, and
no schema or database of the run is left behind."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_postgres.py"
CLUSTER = Path(__file__).resolve().parent / "postgres" / "_cluster.py"
PG_DSN_ENV = "CENOTAPH_TEST_PG_DSN"
CI_ENV = "CENOTAPH_CI"
TINY = [
    *("--single", "5", "--records", "200", "--batch", "50", "--reads", "20", "--searches", "3"),
    *("--forget-records", "40", "--forgets", "2", "--repeat", "1"),
]


@pytest.fixture
def dsn() -> str:
    found = os.environ.get(PG_DSN_ENV)
    if not found:
        if os.environ.get(CI_ENV):
            pytest.fail(f"{CI_ENV} is set but {PG_DSN_ENV} is not: CI must run the PostgreSQL benchmark")
        pytest.skip(f"{PG_DSN_ENV} is not set (e.g. postgresql://postgres@127.0.0.1:5432/test)")
    return found


def _cluster_possible() -> bool:
    """Are there PostgreSQL server binaries for a throwaway primary + replica (the harness's test)?"""
    spec = importlib.util.spec_from_file_location("cenotaph_test_cluster", CLUSTER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.find_bindir() is not None


def _left_behind(dsn: str, pid: int) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (f"bench_c_{pid}_%",)
        ).fetchall()
        databases = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"bench_lg_{pid}_%",)
        ).fetchall()
    return [r[0] for r in [*schemas, *databases]]


def test_the_postgres_benchmark_runs_at_tiny_sizes(dsn: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH.parent.parent / "src"), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--dsn", dsn, "--json", *TINY],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)

    for workload in ("single", "batch", "read_cold", "read_warm", "search"):
        rates = result["ops_per_s"][workload]
        assert set(rates) == {"cenotaph", "langgraph"} and min(rates.values()) > 0, workload
    shared = result["forgets"]["shared server, no replica"]
    assert shared["cenotaph"]["verified_median_ms"] >= shared["cenotaph"]["return_median_ms"] > 0
    assert "verified_median_ms" not in shared["langgraph"]  # a delete has no verification
    if _cluster_possible():  # this machine can run the throwaway primary + replica
        assert result["cluster"] == "used"
        replicated = result["forgets"]["throwaway primary + 1 streaming replica"]["cenotaph"]
        assert replicated["verified_median_ms"] > 0
    names = {r["name"] for r in result["ratios"]}
    assert any(n.startswith("single durable writes") for n in names)

    trips = result["round_trips"]
    assert trips["langgraph"]["single write"]["round_trips"] == 1.0  # one pipelined INSERT
    assert trips["cenotaph"]["single write"]["round_trips"] >= 2  # at least the transaction and its commit
    assert trips["cenotaph"]["statements of one single write"]
    assert "pgvector" in result["servers"]["shared"]

    table = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json,sys; sys.path.insert(0, sys.argv[1]); import bench_postgres as b; "
            "print(b.table(json.load(sys.stdin)))",
            str(BENCH.parent),
        ],
        input=done.stdout,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout
    assert "| single durable writes (N=5) |" in table and "loadavg=" in table

    assert _left_behind(dsn, result["pid"]) == []
