"""Run the residue scan in a child process.

Why a child: SQLite locks a database with POSIX advisory locks, and POSIX drops *every* lock a
process holds on a file as soon as that process closes *any* descriptor of it. A scan that opens
and closes ``cenotaph.db``, its ``-wal`` and ``-shm`` inside a process that has the store open
would silently release that process's SQLite locks and let two writers in at once (our race
tests caught exactly this). The child has no SQLite connection, so its reads disturb no lock.

One child serves every store of a process (started on first use, ended at exit). Protocol: one
JSON line per request on its stdin (``roots``, ``probes`` as hex); JSON lines back on stdout
(``{"progress": [done, total]}`` ... then ``{"result": {...}}`` or ``{"error": "..."}``).
Probes travel only through the pipe, never through a file.
"""

from __future__ import annotations

import atexit
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from ..errors import CenotaphError, StorageError
from .scanner import ResidueScanner, ScanResult

__all__ = ["scan_in_child"]

_CHUNK = 1 << 20  # the positive control writes about one chunk, so keep it small
_lock = threading.Lock()
_child: subprocess.Popen[bytes] | None = None


def _start() -> subprocess.Popen[bytes]:
    global _child
    if _child is None or _child.poll() is not None:
        _child = subprocess.Popen(
            [sys.executable, "-m", "cenotaph.erasure.scan_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    return _child


def _stop() -> None:
    global _child
    if _child is not None:
        if _child.stdin is not None:
            _child.stdin.close()
        try:
            _child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _child.kill()
            _child.wait()
        if _child.stdout is not None:
            _child.stdout.close()
        _child = None


atexit.register(_stop)


def _exchange(
    child: subprocess.Popen[bytes], request: bytes, progress: Callable[[int, int], None] | None
) -> Any:
    stdin: IO[bytes] | None = child.stdin
    stdout: IO[bytes] | None = child.stdout
    assert stdin is not None and stdout is not None
    stdin.write(request)
    stdin.flush()
    for line in stdout:
        message = json.loads(line)
        if "progress" in message:
            if progress is not None:
                progress(*message["progress"])
            continue
        return message
    return None


def scan_in_child(
    roots: Sequence[Path], probes: Sequence[bytes], progress: Callable[[int, int], None] | None = None
) -> ScanResult:
    """Scan every file under ``roots`` for ``probes`` in the child; returns the combined result."""
    request = (
        json.dumps({"roots": [str(r) for r in roots], "probes": [p.hex() for p in probes]}) + "\n"
    ).encode()
    with _lock:
        message = None
        for _ in range(2):  # a child that died (e.g. killed) is restarted once
            try:
                message = _exchange(_start(), request, progress)
            except (BrokenPipeError, ValueError, OSError):
                message = None
            if message is not None:
                break
            _stop()
    if message is None or "error" in message:
        reason = "the scanner process died" if message is None else message["error"]
        raise StorageError(f"the residue scan failed ({reason}); check the data directory is readable")
    result = message["result"]
    return ScanResult(**{**result, "matched_files": tuple(result["matched_files"])})


def _serve_one(line: bytes) -> dict[str, Any]:
    request = json.loads(line)
    scanner = ResidueScanner((bytes.fromhex(p) for p in request["probes"]), chunk_size=_CHUNK)
    last = 0.0

    def report(done: int, total: int) -> None:
        nonlocal last
        if time.monotonic() - last > 0.1 or done == total:
            last = time.monotonic()
            print(json.dumps({"progress": [done, total]}), flush=True)

    results = [scanner.scan(Path(root), progress=report) for root in request["roots"]]
    return {
        "files": sum(r.files for r in results),
        "bytes": sum(r.bytes for r in results),
        "probes": scanner.probe_count,
        "matches": sum(r.matches for r in results),
        "positive_control": all(r.positive_control for r in results),
        "matched_files": [f for r in results for f in r.matched_files],
    }


def _main() -> None:
    for line in sys.stdin.buffer:
        try:
            reply: dict[str, Any] = {"result": _serve_one(line)}
        except CenotaphError as exc:
            reply = {"error": str(exc)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    _main()
