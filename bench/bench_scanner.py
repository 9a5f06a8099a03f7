"""Residue scanner throughput next to a plain read of the same files.

    python bench/bench_scanner.py --mb 100 --probes 1000

Writes ~MB megabytes of random files (sizes 64 KiB .. 16 MiB, like a store directory with its
-wal and backups) into a temp dir, then times:
  * read      a plain ``f.read()`` of every file,
  * scanner   ``ResidueScanner(probes).scan(root)``, positive control included,
both on a warm page cache (best of --runs) and cold (each file's cached pages dropped first with
posix_fadvise(DONTNEED), which touches only the benchmark's own files), and
  * automaton pyahocorasick alone over the same bytes, warm (what the scanner falls back to),
  * zero pages: the scanner over the same amount of zeros (a secure_delete'd SQLite file) with
    probes from sparse float32 vectors, the scanner's worst ordinary case.
A few probes are planted, so the scan must report exactly that many matches.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

import ahocorasick
import numpy as np

from cenotaph.erasure.proof.scanner import ResidueScanner, probe_windows


def write_files(root: Path, total_mb: int, probes: list[bytes], plant: int, rng: random.Random) -> int:
    remaining = total_mb << 20
    index = 0
    while remaining > 0:
        size = min(remaining, rng.choice([64 << 10, 1 << 20, 4 << 20, 16 << 20]))
        data = bytearray(os.urandom(size))
        if index < plant:
            probe = probes[index]
            at = rng.randrange(size - len(probe))
            data[at : at + len(probe)] = probe
        sub = root / f"d{index % 4}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{index:04d}.db").write_bytes(data)
        remaining -= size
        index += 1
    return index


def sparse_vector_probes(count: int, rng: np.random.Generator) -> list[bytes]:
    probes: list[bytes] = []
    while len(probes) < count:
        vector = np.zeros(384, dtype=np.float32)
        vector[rng.choice(384, 38, replace=False)] = rng.standard_normal(38)
        probes += probe_windows(vector.tobytes())
    return probes[:count]


def drop_cache(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def best_of(runs: int, fn: object, before: object = None) -> float:
    times = []
    for _ in range(runs):
        if before is not None:
            before()  # type: ignore[operator]
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=100, help="megabytes of files to scan")
    parser.add_argument("--probes", type=int, default=1000, help="number of 32-byte probes")
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()

    rng = random.Random(0)
    probes = [os.urandom(32) for _ in range(args.probes)]
    plant = min(5, len(probes))
    with tempfile.TemporaryDirectory(prefix="cenotaph-bench-") as tmp:
        root = Path(tmp)
        nfiles = write_files(root, args.mb, probes, plant, rng)
        paths = sorted(p for p in root.rglob("*") if p.is_file())
        mb = sum(p.stat().st_size for p in paths) / (1 << 20)

        def read_all() -> None:
            for path in paths:
                with open(path, "rb") as f:
                    f.read()

        read_all()  # warm the page cache
        scanner = ResidueScanner(probes)
        result = scanner.scan(root)
        assert result.matches == plant and result.positive_control, result

        automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
        for i, probe in enumerate(probes):
            automaton.add_word(probe.decode("latin-1"), i)
        automaton.make_automaton()

        def automaton_only() -> None:
            for path in paths:
                for _ in automaton.iter(path.read_bytes().decode("latin-1")):
                    pass

        t_read = best_of(args.runs, read_all)
        t_scan = best_of(args.runs, lambda: scanner.scan(root))
        t_auto = best_of(1, automaton_only)
        t_read_cold = best_of(args.runs, read_all, lambda: drop_cache(paths))
        t_scan_cold = best_of(args.runs, lambda: scanner.scan(root), lambda: drop_cache(paths))

    with tempfile.TemporaryDirectory(prefix="cenotaph-bench-zeros-") as tmp:
        root = Path(tmp)
        (root / "zeroed.db").write_bytes(bytes(int(mb * (1 << 20))))
        sparse = ResidueScanner(sparse_vector_probes(args.probes, np.random.default_rng(0)))
        sparse.scan(root)
        t_zeros = best_of(args.runs, lambda: sparse.scan(root))

    print(f"files={nfiles} size={mb:.1f} MB probes={len(probes)} matches={result.matches} (planted {plant})")
    print(f"warm  plain read : {mb / t_read:8.1f} MB/s")
    print(f"warm  scanner    : {mb / t_scan:8.1f} MB/s  ({t_read / t_scan:.2f}x read speed)")
    print(f"cold  plain read : {mb / t_read_cold:8.1f} MB/s")
    print(f"cold  scanner    : {mb / t_scan_cold:8.1f} MB/s  ({t_read_cold / t_scan_cold:.2f}x read speed)")
    print(f"warm  automaton  : {mb / t_auto:8.1f} MB/s  (pyahocorasick alone, for comparison)")
    print(f"warm  zero pages : {mb / t_zeros:8.1f} MB/s  (scanner, sparse-vector probes over zeros)")


if __name__ == "__main__":
    main()
