"""Named crash points for crash-injection tests (SIGKILL of this process at a named step).

Set ``CENOTAPH_FAULT=<point>`` in a child process's environment; when execution reaches that
point the process kills itself with SIGKILL, exactly as a power cut would stop it.
``CENOTAPH_FAULT=<point>@<n>`` kills it the n-th time the point is reached (a chunk boundary of
a large forget, say). Unset (the normal case), each point costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["FAULT_ENV", "FAULT_POINTS", "fault_point"]

FAULT_ENV = "CENOTAPH_FAULT"
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
)

_hits: dict[str, int] = {}
_hits_lock = threading.Lock()


def fault_point(name: str) -> None:
    wanted = os.environ.get(FAULT_ENV)
    if wanted is None or not wanted.startswith(name):
        return
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    point, _, nth = wanted.partition("@")
    if point == name and nth.isdigit():
        with _hits_lock:
            _hits[name] = _hits.get(name, 0) + 1
            if _hits[name] == int(nth):
                os.kill(os.getpid(), signal.SIGKILL)
