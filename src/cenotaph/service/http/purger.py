"""The server's background purge: a forget answers 202 once its tombstone and key destruction are
durable, and this thread carries it to ``verified`` (purge, WAL truncation, scan), coalescing
forgets that arrive together into one purge."""

from __future__ import annotations

import logging
import threading

from ...store import Store

__all__ = ["Purger"]

log = logging.getLogger("cenotaph.http")
RETRY_SECONDS = 5.0  # a pending layer (an open reader held the WAL) is retried this often


class Purger:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pending = True  # a request left pending by an earlier run is finished at start
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cenotaph-purge", daemon=True)
        self._thread.start()

    def kick(self) -> None:
        """A compliance forget committed: purge soon."""
        self._pending = True
        self._wake.set()

    def stop(self) -> None:
        """Finish the purge under way (if any), then end the thread."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(RETRY_SECONDS)
            self._wake.clear()
            if self._stop.is_set() or not self._pending:
                continue
            self._pending = False
            try:
                report = self._store.purge()
            # not swallowed: the type is logged, the request stays pending (its status says so) and the
            # purge is retried; a thread that died here would leave every later forget unpurged
            except Exception as exc:  # noqa: BLE001
                log.warning(
                    "background purge failed (%s); retrying in %.0f s", type(exc).__name__, RETRY_SECONDS
                )
                self._pending = True
                continue
            # compliance requests short of verified (operational ones stay tombstoned by design)
            if any(state in ("shredded", "purged") for state in report.requests.values()):
                self._pending = True  # some layer is still pending: try again later
