"""How long a large forget keeps every other writer out.

    python bench/bench_forget_lock.py                  # 100k records, both targets, table
    python bench/bench_forget_lock.py --records 20000 --targets scope --json
    python bench/bench_forget_lock.py --profile        # + where the forget's time goes (cProfile)

A store gets ``--records`` records in one subtree (``tenant:acme/user:big/session:s<i % 50>``, so
they all carry the subject ``tenant:acme/user:big``) and a few in an unrelated scope. For each
target (``scope``: forget the subtree; ``subject``: forget_subject of that subject), a copy of it
is opened and a writer in ANOTHER PROCESS writes to the unrelated scope in a loop, timing every
write, while this process runs a compliance forget with the default background purge and then
waits until the request is verified. Reported per target: the forget's call-to-return time, the
time until verified, and the unrelated writer's worst and 99th percentile wait over the whole
run and its failed writes (a write that waited out the busy timeout, 30 s by default). The
target is a worst wait under 1 s.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import cenotaph

BIG = "tenant:acme/user:big"
OTHER = "tenant:acme/user:other/session:s1"

_WRITER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import cenotaph
    from cenotaph.errors import StorageError

    data, stop, ready, scope = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    waits, failures, i = [], 0, 0
    with cenotaph.open(data) as store:
        store.write(scope, "warm", 0)
        ready.touch()
        while not stop.exists():
            start = time.perf_counter()
            try:
                store.write(scope, f"k{i % 100}", i)
            except StorageError:
                failures += 1
            waits.append(time.perf_counter() - start)
            i += 1
            time.sleep(0.002)
    print(json.dumps({"waits": waits, "failures": failures}))
    """
)


def build(data: Path, records: int, batch: int) -> None:
    with cenotaph.open(data) as store:
        for start in range(0, records, batch):
            store.write_many(
                [
                    {
                        "scope": f"{BIG}/session:s{i % 50}",
                        "key": f"k{i}",
                        "value": {"n": i, "text": "x" * 150},
                    }
                    for i in range(start, min(records, start + batch))
                ]
            )
        store.write(OTHER, "before", 1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="cenotaph-forget-lock-", dir=args.dir))
    template = base / "template"
    started = time.perf_counter()
    build(template, args.records, args.batch)
    doc: dict[str, Any] = {"records": args.records, "build_s": round(time.perf_counter() - started, 2)}
    for target in args.targets:
        data = base / target
        shutil.copytree(template, data)
        doc[target] = forget_beside_a_writer(base, data, target, args.profile)
        shutil.rmtree(data)
    doc["load_average"] = [round(x, 2) for x in os.getloadavg()]
    shutil.rmtree(base)
    return doc


def forget_beside_a_writer(base: Path, data: Path, target: str, profiled: bool) -> dict[str, Any]:
    stop, ready = base / f"stop-{target}", base / f"ready-{target}"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(data), str(stop), str(ready), OTHER],
        stdout=subprocess.PIPE,
        text=True,
    )
    while not ready.exists():
        time.sleep(0.01)
    time.sleep(0.3)  # the writer's baseline
    profile = cProfile.Profile() if profiled else None
    with cenotaph.open(data) as store:
        start = time.perf_counter()
        if profile is not None:
            profile.enable()
        request = store.forget(BIG) if target == "scope" else store.forget_subject(BIG)
        forget_s = time.perf_counter() - start
        returned = request.status().state
        state = request.wait(timeout=600).state
        verified_s = time.perf_counter() - start
        if profile is not None:
            profile.disable()
    time.sleep(0.3)
    stop.touch()
    out, _ = writer.communicate(timeout=120)
    result = json.loads(out)
    waits = sorted(result["waits"])
    doc: dict[str, Any] = {
        "forget_s": round(forget_s, 3),
        "returned_state": returned,
        "verified_s": round(verified_s, 2),
        "final_state": state,
        "writer_writes": len(waits),
        "writer_failures": result["failures"],
        "writer_worst_wait_s": round(waits[-1], 3) if waits else None,
        "writer_p99_wait_s": round(waits[int(len(waits) * 0.99) - 1], 3) if len(waits) > 1 else None,
    }
    if profile is not None:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(35)
        doc["profile"] = text.getvalue()
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000, help="records in the forgotten subtree")
    ap.add_argument("--batch", type=int, default=1000, help="records per write_many while building")
    ap.add_argument("--dir", default=None, help="base directory for the temp dir (default: system temp)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--profile", action="store_true", help="also cProfile the forget (to verified)")
    ap.add_argument(
        "--targets", default="scope,subject", help="comma-separated: scope, subject (default both)"
    )
    args = ap.parse_args(argv)
    args.targets = [t for t in args.targets.split(",") if t]
    if not args.targets or set(args.targets) - {"scope", "subject"}:
        ap.error("--targets takes scope and/or subject")
    doc = run(args)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
        return 0
    print(f"records: {doc['records']:,} (built in {doc['build_s']} s), load average {doc['load_average']}")
    print("| measure | " + " | ".join(args.targets) + " |\n|---|" + "---:|" * len(args.targets))
    for name in doc[args.targets[0]]:
        if name != "profile":
            print(f"| {name} | " + " | ".join(str(doc[t][name]) for t in args.targets) + " |")
    for target in args.targets:
        if doc[target].get("profile"):
            print(f"\n{target}:\n{doc[target]['profile']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
