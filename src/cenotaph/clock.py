"""The store's clock: where a record's time to live is measured from, and against.

A store reads the wall clock for two things only: a record's ``created_at`` and ``expires_at``
when it is written (``ttl`` seconds from now), and whether a record has expired when it is read,
searched, forgotten over or swept by a purge. Both go through one :class:`Clock`, given to
``cenotaph.open(..., clock=...)``; the default is the system's. A clock of your own lets a test
(or a simulation) move time forward instead of waiting for it::

    >>> import cenotaph, tempfile
    >>> class Frozen:
    ...     def __init__(self) -> None:
    ...         self.at = 1_700_000_000.0
    ...     def now(self) -> float:
    ...         return self.at
    >>> clock = Frozen()
    >>> with cenotaph.open(tempfile.mkdtemp(), clock=clock) as store:
    ...     _ = store.write("tenant:acme/user:alice", "otp", "493817", ttl=60)
    ...     clock.at += 61
    ...     print(store.read("tenant:acme/user:alice", "otp"))
    None

Time limits that bound a wait (a purge's timeout, a lock's) are not the clock's: they measure
how long this process has waited, on the monotonic clock, and a test waits on the event itself.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch (UTC), as :func:`time.time` counts them."""
        ...


class SystemClock:
    """The system's wall clock: :func:`time.time`."""

    def now(self) -> float:
        return time.time()


SYSTEM_CLOCK = SystemClock()
