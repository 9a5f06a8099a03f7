"""Erasure cost: forgetting one subject as the store grows, and purge (with its verification scan).

    python bench/bench_erasure.py                       # forget at 10k and 100k records + ~100 MB purge
    python bench/bench_erasure.py --big 1000000         # also forget at 1M records (purge skipped there
                                                        # unless --big-purge: the scan reads every byte)
    python bench/bench_erasure.py --sizes 10000 --mb 20 # smaller
    python bench/bench_erasure.py --profile             # + cProfile of one forget_subject at the largest size

(a) forget cost vs store size, all sizes side by side. For each size N a fresh store holds N records: filler
    records of other subjects (scopes ``tenant:acme/user:u<i>``, ~100 records per user, ~80-char texts), plus
    2 x --targets target subjects, each with 20 records in its own scope ``tenant:acme/user:target<t>`` (its
    default subject) and 5 records in filler scopes ``derived_from`` one of them (they inherit the subject),
    written half way through the fill. Every store is then opened at once with
    ``cenotaph.open(dir, auto_purge="off")`` (so ``forget_subject`` itself is timed, and ``store.purge()``
    separately), and each round forgets one target subject in every store, the store order rotating per
    round, so load drift on a shared machine hits every size alike:
      * cold     rounds 0 .. --targets-1, stores just reopened (nothing searched, in-memory index not built).
                 After round 0 each store is purged once: the purge figure (rows deleted, WAL truncated,
                 index cleared, then the verification scan that reads every file of the store). Later
                 rounds' purges are left pending.
      * serving  rounds --targets .. 2x--targets-1, after one search per store, so the in-memory index holds
                 every vector (and the key cache every record's key) and each forget removes the subject's
                 vectors from it. The first serving forget also drops the caches the index build filled.
    The scan time is measured by wrapping ``Verifier._scan`` (a bench-side wrapper; nothing in the
    library changes); scan bytes, probes and matches come from ``PurgeReport.scan``. A request whose scan
    fails stays ``purged`` and is scanned again by every later purge (its probes add to the next scan).
    Target: median forget at the largest size <= 1.2x the median at the smallest (10k).
(b) purge latency at ~--mb MB: records with ~1 KB values are written until the data dir is ~--mb MB; then
    (reopened, auto_purge="off") one subject is forgotten and ``store.purge()`` is timed, --big-runs times.

Times are wall clock (perf_counter). The page cache is warm (the store was just written), so scan MB/s is a
warm-cache figure.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import cenotaph
from cenotaph.erasure.proof import verification

TARGET_RECORDS = 20
DERIVED_RECORDS = 5
PER_USER = 100

# -- scan timing (bench-side wrapper, library unchanged) ----------------------------------------
_scan_seconds: list[float] = []
_original_scan = verification.Verifier._scan


def _timed_scan(self: Any, probes: list[bytes], progress: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return _original_scan(self, probes, progress)
    finally:
        _scan_seconds.append(time.perf_counter() - t0)


verification.Verifier._scan = _timed_scan  # type: ignore[method-assign]


# -- data ----------------------------------------------------------------------------------------
_WORDS = [
    a + b
    for a in ("ka", "lo", "mi", "ne", "pu", "ra", "si", "to", "vu", "ze", "ba", "do", "fe", "gi")
    for b in ("ran", "sel", "tor", "min", "vak", "lun", "pes", "dor", "kim", "bal", "fis", "gon")
]


def text(rng: random.Random, approx_chars: int) -> str:
    words = []
    size = 0
    while size < approx_chars:
        w = rng.choice(_WORDS)
        words.append(w)
        size += len(w) + 1
    return " ".join(words)


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def subject_of(t: int) -> str:
    return f"tenant:acme/user:target{t}"


def build(
    data: str,
    n: int,
    targets: int,
    value_chars: int,
    batch: int,
    seed: int,
    stop_at_bytes: int | None = None,
) -> dict[str, Any]:
    """Fill a store: ``n`` records (or until ``stop_at_bytes``), ``targets`` subjects of 20+5 records each."""
    rng = random.Random(seed)
    store = cenotaph.open(data, auto_purge="off")
    expected = n if stop_at_bytes is None else stop_at_bytes // (value_chars + 1800)  # ~bytes per record
    users = max(1, expected // PER_USER)
    per_target = TARGET_RECORDS + DERIVED_RECORDS
    filler_total = n - targets * per_target
    # the targets' records land in the middle of the fill (early on when filling up to a size)
    insert_at = filler_total // 2 if stop_at_bytes is None else 2 * batch
    written = 0
    filler = 0
    t0 = time.perf_counter()
    targets_done = False
    while True:
        if stop_at_bytes is None and filler >= filler_total and targets_done:
            break
        if stop_at_bytes is not None and targets_done and dir_bytes(data) >= stop_at_bytes:
            break
        if not targets_done and filler >= insert_at:
            for t in range(targets):
                sources = store.write_many(
                    [
                        {"scope": subject_of(t), "key": f"note{j}", "value": text(rng, value_chars)}
                        for j in range(TARGET_RECORDS)
                    ]
                )
                store.write_many(
                    [
                        {
                            "scope": f"tenant:acme/user:u{rng.randrange(users)}",
                            "key": f"derived-t{t}-{j}",
                            "value": text(rng, value_chars),
                            "derived_from": [sources[j].id],
                        }
                        for j in range(DERIVED_RECORDS)
                    ]
                )
                written += per_target
            targets_done = True
            continue
        size = batch if stop_at_bytes is not None else min(batch, filler_total - filler)
        if stop_at_bytes is None and insert_at > filler:
            size = min(size, insert_at - filler)
        store.write_many(
            [
                {
                    "scope": f"tenant:acme/user:u{(filler + i) % users}",
                    "key": f"k{filler + i}",
                    "value": text(rng, value_chars),
                }
                for i in range(size)
            ]
        )
        filler += size
        written += size
    seconds = time.perf_counter() - t0
    store.close()
    return {"records": written, "build_s": seconds, "bytes": dir_bytes(data)}


def forget(store: cenotaph.Store, t: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    request = store.forget_subject(subject_of(t))
    seconds = time.perf_counter() - t0
    return {"forget_s": seconds, "request": request, "state_after_forget": request.status().state}


def purge(store: cenotaph.Store, requests: list[Any]) -> dict[str, Any]:
    _scan_seconds.clear()
    t0 = time.perf_counter()
    report = store.purge()
    purge_s = time.perf_counter() - t0
    statuses = [r.status() for r in requests]
    return {
        "purge_s": purge_s,
        "scan_s": sum(_scan_seconds),
        "scan_bytes": int(report.scan.get("bytes", 0)),
        "scan_files": int(report.scan.get("files", 0)),
        "scan_probes": int(report.scan.get("probes", 0)),
        "scan_matches": int(report.scan.get("matches", 0)),
        "requests": len(requests),
        "states_after_purge": sorted(st.state for st in statuses),
        "records_erased": sorted(st.layers["rows"].evidence.get("records") for st in statuses),
        "gaps": sorted({g for st in statuses for g in st.gaps}),
    }


def forget_and_purge(store: cenotaph.Store, t: int) -> dict[str, Any]:
    f = forget(store, t)
    return {**f, **purge(store, [f["request"]])}


def med(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def run_sizes(root: str, sizes: list[int], targets: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """All sizes side by side: every store is built, then opened at once, and each round forgets one subject in
    every store (the store order rotating per round), so machine-load drift hits all sizes alike.

    cold: round 0, then one purge per store (the purge figure), then rounds 1 .. targets-1 (their purges are
    left pending); one search per store builds its in-memory index; serving: rounds targets .. 2*targets-1."""
    res: list[dict[str, Any]] = []
    for n in sizes:
        data = os.path.join(root, f"n{n}")
        built = build(data, n, 2 * targets, args.value_chars, args.batch, args.seed)
        print(
            f"  built {built['records']:,} records in {built['build_s']:.1f} s, {built['bytes'] / 1e6:.1f} MB",
            flush=True,
        )
        res.append(
            {"n": built["records"], "size": n, "data": data, "built": built, "cold": [], "serving": []}
        )
    stores = [cenotaph.open(r["data"], auto_purge="off") for r in res]

    def round_(t: int, scen: str) -> None:
        order = list(range(len(res)))
        shift = t % len(order)
        for i in order[shift:] + order[:shift]:
            res[i][scen].append(forget(stores[i], t))

    round_(0, "cold")
    for r, store in zip(res, stores, strict=True):
        do_purge = not (args.big and r["size"] == args.big and not args.big_purge)
        r["purge_single"] = purge(store, [r["cold"][0]["request"]]) if do_purge else None
        r["purge_multi"] = None
    for t in range(1, targets):
        round_(t, "cold")
    for r, store in zip(res, stores, strict=True):
        t0 = time.perf_counter()
        store.search("tenant:acme/user:u0", "kalun torsel", k=10)  # builds the in-memory index
        r["index_s"] = time.perf_counter() - t0
    for t in range(targets, 2 * targets):
        round_(t, "serving")
    for r in res:
        print(
            f"  {r['n']:,}: cold forgets {[round(f['forget_s'] * 1e3, 1) for f in r['cold']]} ms; "
            f"serving forgets {[round(f['forget_s'] * 1e3, 1) for f in r['serving']]} ms",
            flush=True,
        )
    for store in stores:
        store.close()
    for r in res:
        r["profile"] = None
    if args.profile:
        # the largest store, reopened and searched (index and key caches full), then one more subject
        r = res[-1]
        store = cenotaph.open(r["data"], auto_purge="off")
        extra = build_extra(store, args)
        store.close()
        store = cenotaph.open(r["data"], auto_purge="off")
        store.search("tenant:acme/user:u0", "kalun torsel", k=10)
        prof = cProfile.Profile()
        prof.enable()
        store.forget_subject(extra)
        prof.disable()
        store.close()
        r["profile"] = profile_text(prof, args.top)
    for r in res:
        shutil.rmtree(r["data"], ignore_errors=True)
    return res


def build_extra(store: cenotaph.Store, args: argparse.Namespace) -> str:
    rng = random.Random(args.seed + 1)
    subject = "tenant:acme/user:profiled"
    sources = store.write_many(
        [
            {"scope": subject, "key": f"note{j}", "value": text(rng, args.value_chars)}
            for j in range(TARGET_RECORDS)
        ]
    )
    store.write_many(
        [
            {
                "scope": "tenant:acme/user:u1",
                "key": f"derived-p-{j}",
                "value": text(rng, args.value_chars),
                "derived_from": [sources[j].id],
            }
            for j in range(DERIVED_RECORDS)
        ]
    )
    return subject


def profile_text(prof: cProfile.Profile, top: int) -> str:
    parts = []
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(top)
        lines = [
            line
            for line in buf.getvalue().splitlines()
            if line.strip() and not line.startswith(("   Ordered", "   List reduced"))
        ]
        parts.append(f"## sorted by {key}\n" + "\n".join(lines))
    return "\n".join(parts)


def fmt_ms(rows: list[dict[str, Any]], key: str) -> str:
    vals = [r[key] * 1e3 for r in rows]
    return f"{statistics.median(vals):8.1f} ({min(vals):.1f}-{max(vals):.1f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="store sizes for (a), comma-separated")
    ap.add_argument("--big", type=int, default=0, help="also run (a) at this size, e.g. 1000000")
    ap.add_argument(
        "--targets", type=int, default=10, help="subjects forgotten per scenario per size (default 10)"
    )
    ap.add_argument(
        "--value-chars", type=int, default=80, help="value text length in (a) (default ~80 chars)"
    )
    ap.add_argument("--batch", type=int, default=2000, help="write_many batch size (default 2000)")
    ap.add_argument("--mb", type=float, default=100.0, help="store size for (b) in MB (default 100; 0 skips)")
    ap.add_argument("--big-runs", type=int, default=3, help="forget+purge runs in (b) (default 3)")
    ap.add_argument(
        "--big-purge", action="store_true", help="also purge at the --big size (slow: the scan reads it all)"
    )
    ap.add_argument("--big-value-chars", type=int, default=1000, help="value length in (b) (default ~1 KB)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--dir", default=None, help="parent of the temp data dirs")
    ap.add_argument("--profile", action="store_true", help="cProfile one forget_subject at the largest size")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.big:
        sizes.append(args.big)
    args.all_sizes = sizes
    print(
        f"# bench_erasure  {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}  python {platform.python_version()}"
        f"  cpus={os.cpu_count()}  loadavg={os.getloadavg()[0]:.2f}"
    )
    root = tempfile.mkdtemp(prefix="cenotaph-bench-erasure-", dir=args.dir)
    out: dict[str, Any] = {"sizes": {}}
    try:
        # -- (a) ---------------------------------------------------------------------------
        print(f"(a) sizes {sizes}", flush=True)
        results = run_sizes(root, sizes, args.targets, args)
        print()
        print(
            f"(a) forget_subject of one subject ({TARGET_RECORDS} records + {DERIVED_RECORDS} derived), "
            f"auto_purge='off'; forget ms: median (min-max) of {args.targets} subjects per scenario; "
            "purge = store.purge() right after the first (cold) forget"
        )
        print(
            f"{'records':>10} {'data MB':>8} {'forget cold':>20} {'forget serving':>20} {'purge s':>8} "
            f"{'scan s':>7} {'scan MB':>8} {'scan MB/s':>9} {'probes':>7} {'matches':>7}  state"
        )
        for r in results:
            p = r["purge_single"]
            lead = (
                f"{r['n']:>10,} {r['built']['bytes'] / 1e6:8.1f} {fmt_ms(r['cold'], 'forget_s'):>20} "
                f"{fmt_ms(r['serving'], 'forget_s'):>20}"
            )
            if p:
                mbps = p["scan_bytes"] / p["scan_s"] / 1e6 if p["scan_s"] else float("nan")
                print(
                    f"{lead} {p['purge_s']:8.2f} {p['scan_s']:7.2f} {p['scan_bytes'] / 1e6:8.1f} {mbps:9.1f} "
                    f"{p['scan_probes']:>7} {p['scan_matches']:>7}  {p['states_after_purge']}"
                )
            else:
                print(f"{lead}  (purge not run at this size)")
            m = r["purge_multi"]
            if m:
                mbps = m["scan_bytes"] / m["scan_s"] / 1e6 if m["scan_s"] else float("nan")
                print(
                    f"{'':>10} purge of the {m['requests']} cold forgets at once: {m['purge_s']:.2f} s, scan "
                    f"{m['scan_s']:.2f} s ({mbps:.1f} MB/s), {m['scan_probes']} probes, {m['scan_matches']} "
                    f"matches, states {m['states_after_purge']}"
                )
            gaps = sorted({g for x in (p, m) if x for g in x["gaps"]})
            if gaps:
                print(f"{'':>10} gaps: {gaps}")
            print(
                f"{'':>10} index build (first search) {r['index_s'] * 1e3:.0f} ms; "
                f"build {r['built']['records'] / r['built']['build_s']:,.0f} rec/s"
            )
            out["sizes"][r["n"]] = {
                "data_mb": r["built"]["bytes"] / 1e6,
                "forget_cold_ms": [x["forget_s"] * 1e3 for x in r["cold"]],
                "forget_serving_ms": [x["forget_s"] * 1e3 for x in r["serving"]],
                "purge_single": p,
                "purge_multi": m,
                "index_ms": r["index_s"] * 1e3,
            }
        base = results[0]
        for r in results[1:]:
            for scen in ("cold", "serving"):
                ratio = med(r[scen], "forget_s") / med(base[scen], "forget_s")
                verdict = "MET" if ratio <= 1.2 else "MISSED"
                print(
                    f"forget {scen:7} at {r['n']:,} / at {base['n']:,}: {ratio:.2f}x   target <= 1.2x: {verdict}"
                )
        for r in results:
            if r["profile"]:
                print(
                    f"\ncProfile of one forget_subject at {r['n']:,} records (store reopened, then one search "
                    f"built the index and filled the key cache)\n{r['profile']}"
                )

        # -- (b) ---------------------------------------------------------------------------
        if args.mb > 0:
            print(f"\n(b) purge at ~{args.mb:.0f} MB, ~{args.big_value_chars}-char values", flush=True)
            data = os.path.join(root, "big")
            built = build(
                data,
                10**9,
                args.big_runs,
                args.big_value_chars,
                500,
                args.seed,
                stop_at_bytes=int(args.mb * 1e6),
            )
            print(
                f"  built {built['records']:,} records in {built['build_s']:.1f} s, {built['bytes'] / 1e6:.1f} MB"
            )
            store = cenotaph.open(data, auto_purge="off")
            runs = [forget_and_purge(store, t) for t in range(args.big_runs)]
            store.close()
            mbps = [x["scan_bytes"] / x["scan_s"] / 1e6 for x in runs]
            total_mbps = [x["scan_bytes"] / x["purge_s"] / 1e6 for x in runs]
            print(
                f"{'store MB':>9} {'records':>9} {'forget ms':>20} {'purge ms':>22} {'scan ms':>22} "
                f"{'scan MB':>8} {'scan MB/s':>9} {'scan MB/purge s':>16}"
            )
            print(
                f"{built['bytes'] / 1e6:9.1f} {built['records']:>9,} {fmt_ms(runs, 'forget_s'):>20} "
                f"{fmt_ms(runs, 'purge_s'):>22} {fmt_ms(runs, 'scan_s'):>22} "
                f"{med(runs, 'scan_bytes') / 1e6:8.1f} {statistics.median(mbps):9.1f} "
                f"{statistics.median(total_mbps):16.1f}"
            )
            print(
                "  per run: "
                + "; ".join(
                    f"purge {x['purge_s']:.2f} s, scan {x['scan_s']:.2f} s, {x['scan_probes']} probes, "
                    f"{x['scan_matches']} matches, {x['states_after_purge']}"
                    for x in runs
                )
            )
            gaps = sorted({g for x in runs for g in x["gaps"]})
            if gaps:
                print(f"  gaps: {gaps}")
            for x in runs:
                x.pop("request", None)
            out["purge_100mb"] = {"built": built, "runs": runs}
        print(f"\nloadavg after: {os.getloadavg()[0]:.2f}")
        if args.json:
            print(json.dumps(out, indent=2, default=str))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
