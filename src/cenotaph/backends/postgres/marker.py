"""The change marker as a PostgreSQL backend reports it (``Backend.marker``, ``ops.Marker``).

``change_marker`` holds stripes (schema 3): every committed write transaction of every process
bumps one of them by one -- its connection's, chosen by backend pid, so writers of different
targets do not queue on one row -- in the round trip of its COMMIT. Their sum counts every
committed write transaction, and a snapshot sees a bump exactly when it sees the commit (a
row, not a sequence: a sequence would show it early). The marker a backend reports is that sum
less its own commits, so it moves when, and only when, another connection commits, as SQLite's
``data_version`` does.
"""

from __future__ import annotations

__all__ = ["BUMP", "OwnCommits", "STRIPES", "SUM"]

STRIPES = 64  # rows of change_marker (migration 3 makes 0 .. 63; migration 5's bump_marker picks one)
# both are migration 5's functions, the one text of each (write_begin and write_record use them too)
BUMP = "SELECT bump_marker()"
SUM = "SELECT value FROM change_marker_sum()"


class OwnCommits:
    """How many write transactions this backend committed (used under the backend's lock).

    The backend's transactions are serialised by its lock, and each bump is sent with its
    COMMIT: every snapshot the backend takes, in or out of a transaction, begins after its
    earlier commits returned and before its next one is sent, so it sees exactly the own
    commits counted so far."""

    def __init__(self) -> None:
        self._count = 0

    def committed(self) -> None:
        self._count += 1

    def marker(self, counter: int) -> int:
        """The marker of a snapshot whose stripes sum to ``counter``."""
        return counter - self._count
