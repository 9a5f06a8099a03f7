"""Group commit: concurrent writers of one store share one write transaction and one fsync.

Every write joins a queue. The writer at its head leads: it takes the writes queued behind it (up
to a bound), commits them in one transaction, hands each of their callers its own outcome, and
wakes the next writer in line, who leads the next group with whatever queued meanwhile. A writer
alone finds the queue empty and commits at once, in its own thread: a lone write pays for no
hand-over. Followers sleep until their group's transaction is over, so every caller returns only
after the commit holding its write is durable (W7), or with the error that stopped it.

The queue knows nothing of records: ``commit`` gets the group's work in queue order and returns one
outcome per item (a result, or the exception that refused that item alone); if it raises, every
item of the group fails with that error and none is acknowledged.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ..errors import StorageError

__all__ = ["GroupCommit"]

T = TypeVar("T")
R = TypeVar("R")

MAX_GROUP_RECORDS = 1024  # a group stops growing here (the transaction and its wait stay bounded)


class _Entry(Generic[T, R]):
    __slots__ = ("alone", "done", "error", "result", "size", "taken", "wake", "work")

    def __init__(self, work: T, size: int, alone: bool) -> None:
        self.work = work
        self.size = size
        self.alone = alone
        self.taken = False  # in a group being committed: its outcome is coming
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None
        self.wake: threading.Condition | None = None  # made only if the entry has to wait


class GroupCommit(Generic[T, R]):
    """A queue of writes committed in groups by whichever caller is at its head."""

    def __init__(
        self,
        commit: Callable[[Sequence[T]], Sequence[R | BaseException]],
        max_records: int = MAX_GROUP_RECORDS,
    ) -> None:
        self._commit = commit
        self._max = max_records
        self._lock = threading.Lock()
        self._queue: deque[_Entry[T, R]] = deque()
        self.groups = 0  # groups committed (or failed) so far
        self.largest = 0  # the most writes one group held

    def queued(self) -> int:
        """Writes in the queue now, the group being committed included."""
        with self._lock:
            return len(self._queue)

    def submit(self, work: T, size: int = 1, *, alone: bool = False) -> R:
        """Commit ``work`` (``size`` records) in the next group, and return its outcome once that
        group's transaction is over. ``alone``: never share a transaction with other work."""
        entry: _Entry[T, R] = _Entry(work, size, alone)
        with self._lock:
            self._queue.append(entry)
            try:
                while not entry.done and self._queue[0] is not entry:
                    if entry.wake is None:
                        entry.wake = threading.Condition(self._lock)
                    entry.wake.wait()
            except BaseException:
                self._abandon(entry)
                raise
            group = None if entry.done else self._take()
        if group is not None:
            self._lead(group)
        if entry.error is not None:
            raise entry.error
        return entry.result  # type: ignore[return-value]  # set with done, error None

    def _take(self) -> list[_Entry[T, R]]:
        """The group the head leads: itself and the writes behind it, up to the bound (called
        with the lock held)."""
        group = [self._queue[0]]
        records = group[0].size
        if not group[0].alone:
            for entry in list(self._queue)[1:]:
                if entry.alone or records + entry.size > self._max:
                    break
                group.append(entry)
                records += entry.size
        for entry in group:
            entry.taken = True
        return group

    def _lead(self, group: list[_Entry[T, R]]) -> None:
        try:
            outcomes = self._commit([e.work for e in group])
            if len(outcomes) != len(group):
                raise RuntimeError("a group commit must return one outcome per write")
            for entry, outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    entry.error = outcome
                else:
                    entry.result = outcome
        except Exception as exc:  # noqa: BLE001 - a storage failure: no write of the group is acknowledged
            for entry in group:
                entry.error = exc
        except BaseException as exc:  # noqa: BLE001 - an interrupt in the leader: the others fail too
            for entry in group[1:]:
                entry.error = StorageError(
                    "the transaction this write shared with other writes was interrupted, so whether "
                    "it landed is unknown; read the key back, and write it again if it is missing"
                )
            group[0].error = exc
        finally:
            with self._lock:
                self.groups += 1
                self.largest = max(self.largest, len(group))
                for entry in group:
                    self._queue.popleft()  # the group is the head of the queue, in order
                    entry.done = True
                    if entry.wake is not None:
                        entry.wake.notify()
                if self._queue and self._queue[0].wake is not None:
                    self._queue[0].wake.notify()  # the next in line leads

    def _abandon(self, entry: _Entry[T, R]) -> None:
        """A waiting caller was interrupted (lock held): leave the queue unless a leader already
        took the entry (then its outcome lands unseen), and wake the new head if it was the head."""
        if entry.done or entry.taken:
            return
        was_head = self._queue[0] is entry
        self._queue.remove(entry)
        if was_head and self._queue and self._queue[0].wake is not None:
            self._queue[0].wake.notify()
