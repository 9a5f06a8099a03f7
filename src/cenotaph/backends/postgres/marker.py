"""The change marker as a PostgreSQL backend reports it (``Backend.marker``, ``ops.Marker``).

``change_marker`` counts every committed write transaction of every process: each bumps it by
one under the writers' lock, so the committed values are 1, 2, 3, ... with no gap (a rolled-back
bump rolls back). The marker a backend reports is that count less its own commits, so it moves
when, and only when, another connection commits, as SQLite's ``data_version`` does.
"""

from __future__ import annotations

from bisect import bisect_right

__all__ = ["OwnCommits"]


class OwnCommits:
    """The counter values this backend's own commits produced (used under the backend's lock).

    A snapshot sees the commits up to its counter value ``c``; the own ones among them are those
    of value ``<= c``. Values no snapshot can predate any more (read with no transaction open)
    are folded into a count, so what is kept stays short."""

    def __init__(self) -> None:
        self._folded = 0
        self._recent: list[int] = []  # increasing: commits are serialised

    def committed(self, value: int) -> None:
        self._recent.append(value)

    def marker(self, counter: int, pending: int | None = None) -> int:
        """The marker of a snapshot at ``counter``; ``pending``: the bump of the write
        transaction the snapshot is in (its own, not yet committed)."""
        own = self._folded + bisect_right(self._recent, counter)
        if pending is not None and pending <= counter:
            own += 1
        return counter - own

    def fold(self, counter: int) -> None:
        """No transaction of this backend is open: every later snapshot sees ``counter``."""
        done = bisect_right(self._recent, counter)
        self._folded += done
        del self._recent[:done]
