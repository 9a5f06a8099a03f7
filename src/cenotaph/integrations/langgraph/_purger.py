"""Background purges for the erasures a store's deletes start (coalesced, as cenotaph intends).

A delete returns once its forget is durable and the item's keys are destroyed (the item is then
unreadable by any path, state ``shredded``); removing the rows, truncating the WAL and verifying by
scan is the purge, which this thread runs after each batch of deletes, one purge for however many
deletes arrived meanwhile. ``close()`` runs a last purge in the caller's thread, so a closed store
has nothing pending. A purge that fails is raised to the next caller of :meth:`check` (the store's
next operation), never swallowed.
"""

from __future__ import annotations

import threading

from cenotaph import Store

__all__ = ["Purger"]


class Purger:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def request(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="cenotaph-langgraph-purge", daemon=True
                )
                self._thread.start()
        self._wanted.set()

    def check(self) -> None:
        """Raise the failure of the last background purge, if it failed."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _loop(self) -> None:
        while True:
            self._wanted.wait()
            if self._stop.is_set():
                return
            self._wanted.clear()
            try:
                self._store.purge()
            except BaseException as exc:  # noqa: BLE001 - kept and raised to the next caller
                self._failure = exc

    def close(self) -> None:
        """Stop the thread and purge what is left, here."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            self._wanted.set()
            thread.join()
        self.check()
        self._store.purge()
