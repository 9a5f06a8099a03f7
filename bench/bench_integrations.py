"""The integrations next to their peers, same data, one run.

    python bench/bench_integrations.py                 # defaults (~1-2 min on 2 cores)
    python bench/bench_integrations.py --items 200 --repeat 1 --json
    python bench/bench_integrations.py --only memory-tool

LangGraph: ``CenotaphStore`` next to LangGraph's own ``SqliteStore`` as ``from_conn_string`` opens it
(rollback journal, synchronous=FULL: its defaults) and tuned to WAL (journal_mode=WAL, synchronous
left FULL, so all three are durable at every commit), all with the same IndexConfig (a deterministic
64-dim bag-of-words embedder, identical cost for everyone). SqliteStore loads the sqlite-vec extension
for vector search, which needs a sqlite3 module that can load extensions: ``pysqlite3`` is used for it
when installed (the benchmark says which). Workloads, each timed per operation, in this order on the
same store: ``put`` (N single puts into 10 user namespaces), ``get`` (N gets), ``search`` (Q semantic
searches within a user's namespace, limit 10), ``delete`` (D single deletes; cenotaph's is a compliance
forget that returns once the item's keys are destroyed, its purge and verification following in the
background) and ``delete, until verified`` (the same D deletes timed until the last one is verified;
for SqliteStore, which has nothing to verify, the same as ``delete``).

Anthropic memory tool: ``CenotaphMemoryTool`` next to the SDK's ``BetaLocalFilesystemMemoryTool`` (files
on disk), commands per second for ``create``, ``view`` (a file), ``str_replace``, ``view`` (the
directory) and ``delete`` over F files. cenotaph's tool starts each phase with a fresh read set (as
a new conversation would): otherwise every edit would derive from every file viewed before it.

Every (workload, implementation) runs --repeat times, implementations interleaved in fresh temp dirs;
the tables use the best run (the least disturbed on a shared machine). The load average is printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool
from langgraph.store.base import BaseStore
from langgraph.store.sqlite import SqliteStore

import cenotaph
from cenotaph.integrations.anthropic import CenotaphMemoryTool
from cenotaph.integrations.langgraph import CenotaphStore

DIMS = 64
WORDS = [
    "tea",
    "coffee",
    "cardiology",
    "tuesday",
    "morning",
    "calls",
    "chess",
    "lyon",
    "penicillin",
    "garden",
    "piano",
    "running",
]


def embed(texts: Sequence[str]) -> list[list[float]]:
    out = []
    for text in texts:
        vector = [0.0] * DIMS
        for word in text.split():
            vector[int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big") % DIMS] += (
                1.0
            )
        out.append(vector)
    return out


INDEX: dict[str, Any] = {"dims": DIMS, "embed": embed, "fields": ["text"]}


def full_sqlite() -> tuple[Any, str]:
    try:
        import pysqlite3.dbapi2 as full  # type: ignore[import-not-found]
    except ImportError:
        return sqlite3, "stdlib sqlite3"
    return full, f"pysqlite3 (SQLite {full.sqlite_version})"


@contextmanager
def langgraph_store(kind: str, directory: str) -> Iterator[BaseStore]:
    if kind == "cenotaph":
        with CenotaphStore(
            os.path.join(directory, "data"), index=INDEX, users=[("memories", "{u}")]
        ) as store:
            yield store
        return
    module, _ = full_sqlite()
    conn = module.connect(os.path.join(directory, "lg.db"), check_same_thread=False, isolation_level=None)
    if kind == "sqlite-wal":
        conn.execute("PRAGMA journal_mode=WAL")
    store = SqliteStore(conn, index=INDEX)  # type: ignore[arg-type]
    store.setup()
    try:
        yield store
    finally:
        conn.close()


def value(i: int) -> dict[str, Any]:
    words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(4))
    return {"text": f"memory {i}: {words}", "n": i}


def timed(calls: Sequence[Callable[[], object]]) -> float:
    start = time.perf_counter()
    for call in calls:
        call()
    return len(calls) / (time.perf_counter() - start)


def langgraph_run(kind: str, items: int, searches: int, deletes: int) -> dict[str, float]:
    directory = tempfile.mkdtemp(prefix="bench-lg-")
    try:
        with langgraph_store(kind, directory) as store:
            ns = [("memories", f"u{i % 10}") for i in range(items)]
            rates = {"put": timed([lambda i=i: store.put(ns[i], f"k{i}", value(i)) for i in range(items)])}
            rates["get"] = timed([lambda i=i: store.get(ns[i], f"k{i}") for i in range(items)])
            queries = [f"{WORDS[i % len(WORDS)]} {WORDS[(i * 3) % len(WORDS)]}" for i in range(searches)]
            rates["search"] = timed(
                [lambda i=i: store.search(ns[i], query=queries[i], limit=10) for i in range(searches)]
            )
            start = time.perf_counter()
            rates["delete"] = timed([lambda i=i: store.delete(ns[i], f"k{i}") for i in range(deletes)])
            if isinstance(store, CenotaphStore):  # and until every one of them is purged and verified
                max(store.cenotaph.erasures(), key=lambda r: r.version).wait(300)
            rates["delete, until verified"] = deletes / (time.perf_counter() - start)
            return rates
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def memory_tool_run(kind: str, files: int) -> dict[str, float]:
    directory = tempfile.mkdtemp(prefix="bench-mt-")
    store = None
    try:
        if kind == "cenotaph":
            store = cenotaph.open(os.path.join(directory, "data"))
            tool: Any = CenotaphMemoryTool(store, "tenant:bench/user:u1")
        else:
            tool = BetaLocalFilesystemMemoryTool(base_path=os.path.join(directory, "fs"))
        paths = [f"/memories/notes/n{i}.md" for i in range(files)]
        commands = {
            "create": [
                {"command": "create", "path": p, "file_text": f"note {i}\nline two\n"}
                for i, p in enumerate(paths)
            ],
            "view file": [{"command": "view", "path": p} for p in paths],
            "str_replace": [
                {"command": "str_replace", "path": p, "old_str": "two", "new_str": "2"} for p in paths
            ],
            "view dir": [{"command": "view", "path": "/memories"}] * max(1, files // 10),
            "delete": [{"command": "delete", "path": p} for p in paths],
        }
        rates = {}
        for name, batch in commands.items():
            if kind == "cenotaph":
                # each phase as a new conversation: without it every edit would derive from every file
                # viewed before (that lineage is the tool's rule; its cost is per source, not timed here)
                tool.files.reset_reads()
            rates[name] = timed([lambda c=c: tool.call(c) for c in batch])
        return rates
    finally:
        if store is not None:
            store.close()
        shutil.rmtree(directory, ignore_errors=True)


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: max(r[k] for r in runs) for k in runs[0]}


def table(title: str, results: dict[str, dict[str, float]], base: str) -> str:
    impls = list(results)
    lines = [
        title,
        "| operation | "
        + " | ".join(f"{i} (ops/s)" for i in impls)
        + " | "
        + " | ".join(f"{base} / {i}" for i in impls if i != base)
        + " |",
        "|---" * (1 + len(impls) + len(impls) - 1) + "|",
    ]
    for op in results[base]:
        rates = " | ".join(f"{results[i][op]:,.0f}" for i in impls)
        ratios = " | ".join(f"{results[base][op] / results[i][op]:.2f}x" for i in impls if i != base)
        lines.append(f"| {op} | {rates} | {ratios} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--deletes", type=int, default=100)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=("langgraph", "memory-tool"), help="run one of the two halves")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    lg_kinds = () if args.only == "memory-tool" else ("cenotaph", "sqlite-default", "sqlite-wal")
    mt_kinds = () if args.only == "langgraph" else ("cenotaph", "sdk-filesystem")
    lg: dict[str, list[dict[str, float]]] = {k: [] for k in lg_kinds}
    mt: dict[str, list[dict[str, float]]] = {k: [] for k in mt_kinds}
    for _ in range(args.repeat):
        for kind in lg_kinds:
            lg[kind].append(langgraph_run(kind, args.items, args.searches, args.deletes))
        for kind in mt_kinds:
            mt[kind].append(memory_tool_run(kind, args.files))
    results = {
        "langgraph": {k: best(v) for k, v in lg.items()},
        "memory_tool": {k: best(v) for k, v in mt.items()},
    }
    tables = [
        ("LangGraph store (best of runs):", "langgraph"),
        ("Anthropic memory tool (best of runs):", "memory_tool"),
    ]
    if args.json:
        print(
            json.dumps(
                {"best": results, "runs": {"langgraph": lg, "memory_tool": mt}, "args": vars(args)}, indent=2
            )
        )
        return
    print(f"load average before {load_before}, after {os.getloadavg()}; SqliteStore on {full_sqlite()[1]}")
    print(
        f"items={args.items} searches={args.searches} deletes={args.deletes} files={args.files} repeat={args.repeat}"
    )
    for title, name in tables:
        if results[name]:
            print()
            print(table(title, results[name], "cenotaph"))


if __name__ == "__main__":
    main()
