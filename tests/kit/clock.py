"""A clock the test moves: time to live without waiting for it.

``cenotaph.open(..., clock=ManualClock())`` gives a store a wall clock that stands still at the
moment it was made until the test advances it, so a record written with ``ttl=60`` expires
exactly when the test says, and never because the host was slow (the ``clock`` fixture)."""

from __future__ import annotations

import threading
import time
from datetime import datetime

from cenotaph import Record

__all__ = ["ManualClock"]


class ManualClock:
    """Stands at ``start`` (default: the real time when made) until advanced."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock only moves forward")
        with self._lock:
            self._now += seconds

    def advance_past(self, *records: Record) -> None:
        """Move to just after the latest ``expires_at`` of ``records`` (each must expire)."""
        expiries = [r.expires_at for r in records]
        assert all(isinstance(e, datetime) for e in expiries), "every record must have a ttl"
        latest = max(e.timestamp() for e in expiries if e is not None)
        self.advance(max(0.0, latest - self.now()) + 0.001)
