"""Run the residue scan in a child process.

Why a child: SQLite locks a database with POSIX advisory locks, and POSIX drops *every* lock a
process holds on a file as soon as that process closes *any* descriptor of it. A scan that opens
and closes ``cenotaph.db``, its ``-wal`` and ``-shm`` inside a process that has the store open
would silently release that process's SQLite locks and let two writers in at once (our race
tests caught exactly this). The child has no SQLite connection, so its reads disturb no lock.

One child serves every store of a process (started on first use, ended at exit). Protocol: one
JSON line per request on its stdin (``id``, ``roots``, ``probes`` as hex); JSON lines back on
stdout, each carrying the request's ``id`` (``{"progress": [done, total]}`` ... then
``{"result": {...}}`` or ``{"error": "..."}``). A reply with another id is never taken, and a
request cut short (its progress callback raised, KeyboardInterrupt) kills the child.
Probes travel only through the pipe, never through a file.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from ...errors import CenotaphError, StorageError
from .scanner import ResidueScanner, ScanResult

__all__ = ["scan_in_child"]

_CHUNK = 1 << 20  # the positive control writes about one chunk, so keep it small
_lock = threading.Lock()
_child: subprocess.Popen[bytes] | None = None
_owner: int | None = None  # the thread inside scan_in_child (its progress callback may not re-enter)


def _start() -> subprocess.Popen[bytes]:
    global _child
    if _child is None or _child.poll() is not None:
        _child = subprocess.Popen(
            [sys.executable, "-m", "cenotaph.erasure.proof.scan_worker"],
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


class _CallbackFailed(Exception):
    """The progress callback raised ``error`` (carried through the pipe-reading code intact)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


def _kill() -> None:
    """End a child in the middle of a request: its pending answer must never reach another scan."""
    global _child
    if _child is not None:
        _child.kill()
        _child.wait()
        for pipe in (_child.stdin, _child.stdout):
            if pipe is not None:
                pipe.close()
        _child = None


def _exchange(
    child: subprocess.Popen[bytes], request: dict[str, Any], progress: Callable[[int, int], None] | None
) -> Any:
    stdin: IO[bytes] | None = child.stdin
    stdout: IO[bytes] | None = child.stdout
    assert stdin is not None and stdout is not None
    stdin.write((json.dumps(request) + "\n").encode())
    stdin.flush()
    for line in stdout:
        try:
            message = json.loads(line)
        except ValueError:
            return None
        if message.get("id") != request["id"]:
            continue  # never another request's answer, whatever happened before
        if "progress" in message:
            if progress is not None:
                try:
                    progress(*message["progress"])
                except BaseException as exc:  # the caller's own error, never "the child died"
                    raise _CallbackFailed(exc) from exc
            continue
        return message
    return None


def scan_in_child(
    roots: Sequence[Path],
    probes: Sequence[bytes],
    progress: Callable[[int, int], None] | None = None,
    *,
    labels: Sequence[str] | None = None,
) -> ScanResult:
    """Scan every file under ``roots`` for ``probes`` in the child; returns the combined result.
    ``labels`` (one per root) prefix the names of matched files, so two roots' files never share
    a name.

    If anything interrupts the wait (the progress callback raised, KeyboardInterrupt), the child is
    killed: a child left running would hand its answer to the next scan."""
    global _owner
    if _owner == threading.get_ident():
        raise StorageError(
            "a scan's progress callback started another scan (purge or forget); do that after it returns"
        )
    request = {
        "id": os.urandom(8).hex(),
        "roots": [str(r) for r in roots],
        "labels": list(labels) if labels is not None else [""] * len(roots),
        "probes": [p.hex() for p in probes],
    }
    with _lock:
        try:
            _owner = threading.get_ident()
            message = None
            for _ in range(2):  # a child that died (e.g. killed) is restarted once
                try:
                    message = _exchange(_start(), request, progress)
                except _CallbackFailed as failed:
                    _kill()
                    raise failed.error from None
                except (BrokenPipeError, OSError):
                    message = None
                except BaseException:
                    _kill()
                    raise
                if message is not None:
                    break
                _kill()
        finally:
            _owner = None
    if message is None or "error" in message:
        reason = "the scanner process died" if message is None else message["error"]
        raise StorageError(f"the residue scan failed ({reason}); check the data directory is readable")
    result = message["result"]
    return ScanResult(
        **{
            **result,
            "matched_files": tuple(result["matched_files"]),
            "matched_probes": tuple(bytes.fromhex(p) for p in result.get("matched_probes", [])),
        }
    )


def _serve_one(request: dict[str, Any]) -> dict[str, Any]:
    scanner = ResidueScanner((bytes.fromhex(p) for p in request["probes"]), chunk_size=_CHUNK)
    last = 0.0

    def report(done: int, total: int) -> None:
        nonlocal last
        if time.monotonic() - last > 0.1 or done == total:
            last = time.monotonic()
            print(json.dumps({"id": request["id"], "progress": [done, total]}), flush=True)

    results = [scanner.scan(Path(root), progress=report) for root in request["roots"]]
    return {
        "files": sum(r.files for r in results),
        "bytes": sum(r.bytes for r in results),
        "probes": scanner.probe_count,
        "matches": sum(r.matches for r in results),
        "positive_control": all(r.positive_control for r in results),
        "matched_files": [
            label + f for label, r in zip(request["labels"], results, strict=True) for f in r.matched_files
        ],
        # back through the pipe only, like the probes themselves
        "matched_probes": sorted({p.hex() for r in results for p in r.matched_probes}),
    }


def _main() -> None:
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            reply: dict[str, Any] = {"id": request["id"], "result": _serve_one(request)}
        except CenotaphError as exc:
            reply = {"id": request["id"], "error": str(exc)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    _main()
