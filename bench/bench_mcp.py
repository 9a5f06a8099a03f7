"""MCP server throughput, side by side in one run.

1. ``cenotaph mcp`` (memory profile): tool calls per second for memory_write, memory_read and
   memory_search, over stdio and over streamable HTTP, the SDK's ``Client`` in this process and
   the server in another (a real ``cenotaph mcp`` process). Calls are sequential, one client; the
   HTTP server is also read by 4 clients at once.
2. ``cenotaph mcp --profile knowledge-graph`` next to the reference server
   (``@modelcontextprotocol/server-memory``, run with node; installed with npm into a cache
   directory outside the repository) on the same calls: create_entities, add_observations,
   create_relations, search_nodes, open_nodes, read_graph, delete_entities, over stdio.
3. Two processes writing one graph at once (each creates entities, one per call): how many
   writes survive, cenotaph vs the reference (which rewrites its whole file on every call).

    .venv/bin/python bench/bench_mcp.py            # ~2 min on 2 cores
    .venv/bin/python bench/bench_mcp.py --n 100 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

CENOTAPH = str(Path(sys.executable).with_name("cenotaph"))
SCOPE = "tenant:bench/user:u1/session:s1"
PREFIX = "tenant:bench/user:u1"
REFERENCE = "@modelcontextprotocol/server-memory"
REFERENCE_VERSION = "2026.8.31"
CACHE = Path(os.environ.get("CENOTAPH_REFERENCE_CACHE", Path.home() / ".cache" / "cenotaph-tests"))


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def reference_entry() -> Path | None:
    target = CACHE / f"server-memory-{REFERENCE_VERSION}"
    entry = target / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
    if not entry.is_file() and shutil.which("npm") and shutil.which("node"):
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(target),
                "--no-audit",
                "--no-fund",
                f"{REFERENCE}@{REFERENCE_VERSION}",
            ],
            capture_output=True,
            check=False,
        )
    return entry if entry.is_file() else None


def init_store(root: Path, name: str) -> Path:
    data = root / name
    subprocess.run([CENOTAPH, "init", "--data", str(data)], check=True, capture_output=True)
    return data


def cenotaph_params(data: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=CENOTAPH, args=["mcp", "--data", str(data), *args], env=dict(os.environ)
    )


def reference_params(entry: Path, memory_file: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command="node", args=[str(entry)], env={**os.environ, "MEMORY_FILE_PATH": str(memory_file)}
    )


@contextlib.contextmanager
def http_server(data: Path, *args: str) -> Iterator[str]:
    process = subprocess.Popen(
        [CENOTAPH, "mcp", "--data", str(data), "--transport", "streamable-http", "--port", "0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        url = None
        while url is None:
            line = process.stderr.readline()
            if not line:
                raise SystemExit("cenotaph mcp did not start")
            found = re.search(r"serving (http://\S+)", line)
            url = found.group(1) if found else None
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


async def call(client: Client, name: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(name, arguments)
    if result.is_error:
        raise SystemExit(f"{name} failed: {result.content[0].text}")  # type: ignore[union-attr]
    return result.structured_content


async def timed(n: int, one: Callable[[int], Awaitable[Any]]) -> float:
    """Calls per second of ``n`` sequential calls."""
    start = time.perf_counter()
    for i in range(n):
        await one(i)
    return n / (time.perf_counter() - start)


async def memory_ops(client: Client, n: int, tag: str) -> dict[str, float]:
    for i in range(10):  # warm-up: imports, first search builds the in-memory index
        await call(client, "memory_write", {"key": f"warm{i}", "value": f"warm up {i}"})
    await call(client, "memory_search", {"query": "warm up"})
    words = ["tennis", "vegetarian", "cardiology", "holiday", "invoice", "garden", "piano", "python"]

    def note(i: int) -> str:
        return f"{tag} note {i}: {words[i % 8]} and {words[(i * 3) % 8]} on day {i % 31}"

    return {
        "write": await timed(n, lambda i: call(client, "memory_write", {"key": f"k{i}", "value": note(i)})),
        "read": await timed(n, lambda i: call(client, "memory_read", {"key": f"k{i}"})),
        "search": await timed(n, lambda i: call(client, "memory_search", {"query": words[i % 8], "k": 5})),
    }


async def concurrent_reads(url: str, n: int, clients: int) -> float:
    async def reader(index: int) -> None:
        async with Client(url) as client:
            for i in range(n // clients):
                await call(client, "memory_read", {"key": f"k{(i * clients + index) % n}"})

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for index in range(clients):
            group.start_soon(reader, index)
    return (n // clients) * clients / (time.perf_counter() - start)


async def kg_ops(client: Client, n: int) -> dict[str, float]:
    def entity(i: int) -> dict[str, Any]:
        return {
            "name": f"person {i}",
            "entityType": "person",
            "observations": [f"born on day {i}", "likes tea"],
        }

    await call(client, "read_graph", {})
    results = {
        "create_entities": await timed(
            n, lambda i: call(client, "create_entities", {"entities": [entity(i)]})
        ),
        "add_observations": await timed(
            n,
            lambda i: call(
                client,
                "add_observations",
                {"observations": [{"entityName": f"person {i}", "contents": [f"visited {i}"]}]},
            ),
        ),
        "create_relations": await timed(
            n,
            lambda i: call(
                client,
                "create_relations",
                {
                    "relations": [
                        {"from": f"person {i}", "to": f"person {(i + 1) % n}", "relationType": "knows"}
                    ]
                },
            ),
        ),
        "search_nodes": await timed(n, lambda i: call(client, "search_nodes", {"query": f"day {i}"})),
        "open_nodes": await timed(n, lambda i: call(client, "open_nodes", {"names": [f"person {i}"]})),
        "read_graph": await timed(max(n // 10, 1), lambda i: call(client, "read_graph", {})),
    }
    deletes = max(n // 10, 1)
    results["delete_entities"] = await timed(
        deletes, lambda i: call(client, "delete_entities", {"entityNames": [f"person {i}"]})
    )
    graph = await call(client, "read_graph", {})
    assert len(graph["entities"]) == n - deletes, "every write kept, every delete done"
    return results


async def two_writers(params: Callable[[], StdioServerParameters], n: int) -> int:
    """Entities that survive when two server processes create ``n`` each at once."""

    async def writer(tag: str) -> None:
        async with Client(params()) as client:
            for i in range(n):
                entity = {"name": f"{tag} {i}", "entityType": "t", "observations": []}
                await call(client, "create_entities", {"entities": [entity]})

    async with anyio.create_task_group() as group:
        group.start_soon(writer, "a")
        group.start_soon(writer, "b")
    async with Client(params()) as client:
        return len((await call(client, "read_graph", {}))["entities"])


@contextlib.asynccontextmanager
async def stdio(params: StdioServerParameters) -> AsyncIterator[Client]:
    async with Client(params) as client:
        yield client


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"loadavg_before": loadavg(), "n": args.n, "kg_n": args.kg_n}
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        root = Path(tmp)
        memory: dict[str, Any] = {}
        data = init_store(root, "memory-stdio")
        async with stdio(cenotaph_params(data, "--scope", SCOPE, "--prefix", PREFIX)) as client:
            memory["stdio"] = await memory_ops(client, args.n, "stdio")
        data = init_store(root, "memory-http")
        with http_server(data, "--scope", SCOPE, "--prefix", PREFIX) as url:
            async with Client(url) as client:
                memory["streamable-http"] = await memory_ops(client, args.n, "http")
            memory["streamable-http"]["read, 4 clients"] = await concurrent_reads(url, args.n, 4)
        report["memory"] = memory

        entry = reference_entry()
        kg: dict[str, Any] = {}
        data = init_store(root, "kg")
        async with stdio(cenotaph_params(data, "--profile", "knowledge-graph", "--prefix", PREFIX)) as client:
            kg["cenotaph"] = await kg_ops(client, args.kg_n)
        if entry is not None:
            async with stdio(reference_params(entry, root / "reference.jsonl")) as client:
                kg["reference"] = await kg_ops(client, args.kg_n)
        report["knowledge_graph"] = kg

        data = init_store(root, "kg-two")
        survivors = {
            "cenotaph": await two_writers(
                lambda: cenotaph_params(data, "--profile", "knowledge-graph", "--prefix", PREFIX), args.race_n
            )
        }
        if entry is not None:
            survivors["reference"] = await two_writers(
                lambda: reference_params(entry, root / "race.jsonl"), args.race_n
            )
        report["two_writers"] = {"written": 2 * args.race_n, "kept": survivors}
    report["loadavg_after"] = loadavg()
    return report


def print_report(report: dict[str, Any]) -> None:
    print(
        f"# bench_mcp  python {sys.version.split()[0]}  cpus={os.cpu_count()}  loadavg={report['loadavg_before']}"
    )
    print(
        f"\nmemory profile: tool calls/s, sequential, {report['n']} calls each (client and server in separate processes)"
    )
    print(f"{'operation':<18}{'stdio':>10}{'streamable-http':>18}")
    memory = report["memory"]
    for op in memory["streamable-http"]:
        stdio_rate = memory["stdio"].get(op)
        shown = f"{stdio_rate:10.0f}" if stdio_rate else f"{'-':>10}"
        print(f"{op:<18}{shown}{memory['streamable-http'][op]:18.0f}")
    kg = report["knowledge_graph"]
    print(
        f"\nknowledge-graph profile vs the reference server, calls/s over stdio ({report['kg_n']} entities)"
    )
    print(f"{'tool':<18}{'cenotaph':>10}{'reference':>11}{'ratio':>8}")
    for op, ours in kg["cenotaph"].items():
        theirs = kg.get("reference", {}).get(op)
        print(
            f"{op:<18}{ours:10.0f}" + (f"{theirs:11.0f}{ours / theirs:7.2f}x" if theirs else f"{'n/a':>11}")
        )
    race = report["two_writers"]
    print(
        f"\ntwo processes writing one graph at once: {race['written']} entities created, kept: {race['kept']}"
    )
    print(f"loadavg after: {report['loadavg_after']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300, help="calls per memory operation")
    parser.add_argument("--kg-n", type=int, default=200, help="entities in the knowledge-graph run")
    parser.add_argument("--race-n", type=int, default=100, help="entities per process in the two-writer run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    report = anyio.run(run, args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)


if __name__ == "__main__":
    main()
