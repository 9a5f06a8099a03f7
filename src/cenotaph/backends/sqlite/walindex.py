"""The WAL-index header of a database in WAL mode: a commit stamp read without a statement.

SQLite keeps the WAL-index in the ``-shm`` file beside the database, shared by every connection of
every process. Its first 96 bytes are two copies of the index header (the WAL's frame count, a
change counter and checksums, see sqlite.org/walformat.html); the writer rewrites both on every
commit, and while any connection is open the file is neither deleted nor truncated (each holds a
shared lock on it). So while those bytes stay the same, nobody committed: a cache hit compares them
with the ones its last full check saw, a memory compare instead of a ``PRAGMA data_version``
statement. Any difference -- a commit, a torn read of a header being written, a checkpoint --
only sends the caller to the full check. A read-only store opened immutable has no ``-shm``: then
there is no stamp and every check is the full one.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

__all__ = ["WalIndex"]

_HEADER_BYTES = 96  # two copies of the 48-byte WalIndexHdr


class WalIndex:
    """The ``-shm`` file of ``database`` mapped read-only, if it exists and holds a header."""

    __slots__ = ("_map",)

    def __init__(self, database: Path) -> None:
        self._map: mmap.mmap | None = None
        shm = Path(f"{database}-shm")
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(shm, os.O_RDONLY)
            try:
                if os.fstat(fd).st_size >= _HEADER_BYTES:
                    self._map = mmap.mmap(fd, _HEADER_BYTES, prot=mmap.PROT_READ)
            finally:
                os.close(fd)

    def stamp(self) -> bytes | None:
        """The header's bytes now (they change with every commit of any connection), or ``None``
        when there is no WAL-index to read."""
        return None if self._map is None else self._map[:_HEADER_BYTES]

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
