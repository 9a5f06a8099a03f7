"""Named crash points for crash-injection tests (SIGKILL of this process at a named step).

Set ``CENOTAPH_FAULT=<point>`` in a child process's environment; when execution reaches that
point the process kills itself with SIGKILL, exactly as a power cut would stop it;
``CENOTAPH_FAULT=<point>@<n>`` kills it the n-th time the point is reached (a chunk boundary of
a large forget, say). Set ``CENOTAPH_PAUSE=<point>:<file>`` instead to stop there while a test
acts (sends Ctrl-C, say): the process creates ``file`` and waits while it exists (at most a
minute). Unset (the normal case), each point costs two dict lookups.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from .errors import StorageError

__all__ = ["FAIL_ENV", "FAULT_ENV", "FAULT_POINTS", "PAUSE_ENV", "fault_point"]

FAULT_ENV = "CENOTAPH_FAULT"
FAIL_ENV = "CENOTAPH_FAIL"
PAUSE_ENV = "CENOTAPH_PAUSE"
FAULT_POINTS = (
    "forget.planned",  # plan computed, nothing applied
    "forget.applied",  # tombstones and key destruction applied, not in the ledger, not committed
    "forget.ledgered",  # ledger entry durable, database transaction not committed
    "forget.committed",  # committed (caches already dropped), purge not started
    "forget.chunk",  # a large forget: one more chunk of records (or its last step) committed
    "purge.rows",  # erased rows deleted and committed, WAL not truncated
    "purge.chunk",  # a large request: one more chunk of its rows deleted and committed
    "purge.wal",  # WAL truncated, not yet scanned
    "purge.scanned",  # scan done, verdict not recorded
    "purge.done",  # verdict recorded
    "restore.copied",  # backup copied into the target, the copy not yet opened (source's chain id)
    "keyring.copied",  # keyring move: the copy is whole and opened, the source untouched
    "keyring.unkeyed",  # keyring move: the source's key file removed, its ledger and lock not yet
)

_hits: dict[str, int] = {}
_hits_lock = threading.Lock()


def fault_point(name: str) -> None:
    wanted = os.environ.get(FAULT_ENV)
    if wanted is not None and wanted.startswith(name):
        _kill_at(name, wanted)
    pause = os.environ.get(PAUSE_ENV)
    if pause is not None and pause.partition(":")[0] == name:
        _pause(Path(pause.partition(":")[2]))
    if os.environ.get(FAIL_ENV) == name:
        raise StorageError(f"injected storage failure at {name}; unset {FAIL_ENV} to stop it")


def _kill_at(name: str, wanted: str) -> None:
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    point, _, nth = wanted.partition("@")
    if point == name and nth.isdigit():
        with _hits_lock:
            _hits[name] = _hits.get(name, 0) + 1
            if _hits[name] == int(nth):
                os.kill(os.getpid(), signal.SIGKILL)


def _pause(marker: Path) -> None:
    marker.touch()
    deadline = time.monotonic() + 60
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
