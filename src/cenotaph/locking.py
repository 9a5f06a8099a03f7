"""The store's own lock, and whether the calling thread is inside one of its transactions.

A store serialises its threads itself: :class:`LockedBackend` wraps the store's backend so that
each of its transactions holds one re-entrant lock of the store's, for the whole ``with`` block
and the post-commit actions. A caller holds the same lock across several steps with
:meth:`LockedBackend.serial` (a read that syncs, then reads), and asks :meth:`held_here` and
:meth:`in_transaction` what the calling thread is inside. A backend protects only its own
connections (SQLite: the connection's lock, and its writer lock per database file).

The lock is always taken before the backend's own, never the other way round: a backend calls
no store code but its post-commit actions, and those run on a thread that already holds this lock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .backends.base import Backend, Txn, WriteLocks
from .backends.ops import Op
from .backends.physical import Physical

__all__ = ["LockedBackend"]


class LockedBackend:
    """``backend`` with the store's lock around every transaction (itself a :class:`Backend`)."""

    def __init__(self, backend: Backend) -> None:
        self.inner = backend
        self.concurrent_writers = backend.concurrent_writers
        self._lock = threading.RLock()
        self._depth = 0  # transactions the lock's owner is inside (changed only under the lock)

    def serial(self) -> contextlib.AbstractContextManager[Any]:
        """Hold the store's lock (re-entrant) across several calls."""
        return self._lock

    def held_here(self) -> bool:
        """Does the calling thread hold the store's lock (inside a transaction, or :meth:`serial`)?
        Such a thread must not wait for another to commit for it."""
        owned: Callable[[], bool] = self._lock._is_owned  # type: ignore[attr-defined]
        return owned()

    def in_transaction(self) -> bool:
        """Is the calling thread inside a transaction (a callback called back into the store)?
        Meaningful for the calling thread only while it holds :meth:`serial`."""
        return self._depth > 0

    def read(self) -> contextlib.AbstractContextManager[Txn]:
        return self._inside(self.inner.read)

    def write(
        self, locks: WriteLocks | None = None, ahead: Sequence[Op[Any]] = ()
    ) -> contextlib.AbstractContextManager[Txn]:
        return self._inside(lambda: self.inner.write(locks, ahead))

    def statement(self) -> contextlib.AbstractContextManager[Txn]:
        """A read of one operation without a transaction of its own when the backend offers one
        (SQLite: ``SQLiteBackend.statement``), else a :meth:`read`: the caller treats a
        :class:`~cenotaph.backends.base.NeedsSnapshot` as "read again in :meth:`read`"."""
        single: Callable[[], contextlib.AbstractContextManager[Txn]] | None = getattr(
            self.inner, "statement", None
        )
        return _Inside(self, self.inner.read if single is None else single)

    @contextlib.contextmanager
    def _inside(self, begin: Callable[[], contextlib.AbstractContextManager[Txn]]) -> Iterator[Txn]:
        with self._lock:
            self._depth += 1
            try:
                with begin() as txn:
                    yield txn
            finally:
                self._depth -= 1

    # -- the rest is the backend's own ---------------------------------------------------
    def marker(self) -> Hashable:
        return self.inner.marker()

    def forgets_learnt(self) -> None:
        """Tell the backend this process learnt of another's forget from the ledger (a backend
        that reads from replicas must then read at or after it; others need not hear it)."""
        learnt: Callable[[], None] | None = getattr(self.inner, "forgets_learnt", None)
        if learnt is not None:
            learnt()

    @property
    def location(self) -> Path | None:
        return self.inner.location

    def describe(self) -> dict[str, str]:
        return self.inner.describe()

    @property
    def physical(self) -> Physical:
        return self.inner.physical

    def close(self) -> None:
        self.inner.close()


class _Inside:
    """:meth:`LockedBackend._inside` as a class (no generator: a cold read's one statement runs in it)."""

    __slots__ = ("_begin", "_block", "_owner")

    def __init__(
        self, owner: LockedBackend, begin: Callable[[], contextlib.AbstractContextManager[Txn]]
    ) -> None:
        self._owner = owner
        self._begin = begin
        self._block: contextlib.AbstractContextManager[Txn] | None = None

    def __enter__(self) -> Txn:
        owner = self._owner
        owner._lock.acquire()
        owner._depth += 1
        try:
            block = self._block = self._begin()
            return block.__enter__()
        except BaseException:
            owner._depth -= 1
            owner._lock.release()
            raise

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool | None:
        owner = self._owner
        try:
            return None if self._block is None else self._block.__exit__(kind, exc, tb)
        finally:
            owner._depth -= 1
            owner._lock.release()
