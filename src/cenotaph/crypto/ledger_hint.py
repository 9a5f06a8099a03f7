"""Whether a keyring's ledger may have grown, read from memory instead of a ``stat``.

The first 16 bytes of the keyring's ``.lock`` file count the ledger appends begun and ended (two
little-endian 64-bit integers). An append, under the keyring's lock, bumps *begun* before it
writes its line and sets *ended* to it once the line is durable. Every process maps the bytes
read-only (the page cache makes another process's ``pwrite`` visible at once), so while they are
the ones its last full check began with, and *begun* equals *ended*, no append started since: the
ledger's size is what that check saw. An append that died half way leaves *begun* ahead of *ended*
until the next one completes, and every check meanwhile is the full one. A keyring this process
cannot write gives no hint (``None``): then every check is the full one.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
from pathlib import Path

__all__ = ["LedgerHint", "begin_append", "end_append"]

_COUNT = struct.Struct("<Q")
_BYTES = 2 * _COUNT.size


def begin_append(lock_fd: int) -> int:
    """Bump *begun* (the caller holds the keyring's lock on ``lock_fd``); returns its new value."""
    raw = os.pread(lock_fd, _COUNT.size, 0)
    begun = (_COUNT.unpack(raw)[0] if len(raw) == _COUNT.size else 0) + 1
    os.pwrite(lock_fd, _COUNT.pack(begun), 0)
    return begun


def end_append(lock_fd: int, begun: int) -> None:
    """Mark the append numbered ``begun`` ended: its line is durable."""
    os.pwrite(lock_fd, _COUNT.pack(begun), _COUNT.size)


class LedgerHint:
    """The append counters of the keyring whose lock file is ``lock``, mapped read-only."""

    __slots__ = ("_lock", "_map", "_tried")

    def __init__(self, lock: Path) -> None:
        self._lock = lock
        self._map: mmap.mmap | None = None
        self._tried = False

    def stamp(self) -> bytes | None:
        """The counters now, or ``None`` when they cannot be read (then assume an append)."""
        if self._map is None:
            if self._tried:
                return None
            self._tried = True
            self._map = self._open()
            if self._map is None:
                return None
        return self._map[:_BYTES]

    @staticmethod
    def settled(stamp: bytes) -> bool:
        """No append is under way (or died half way) as of ``stamp``."""
        return stamp[: _COUNT.size] == stamp[_COUNT.size :]

    def _open(self) -> mmap.mmap | None:
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(self._lock, os.O_RDWR)
            try:
                if os.fstat(fd).st_size < _BYTES:  # made before the counters existed: zero them
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    try:
                        if os.fstat(fd).st_size < _BYTES:
                            os.ftruncate(fd, _BYTES)
                    finally:
                        fcntl.flock(fd, fcntl.LOCK_UN)
                return mmap.mmap(fd, _BYTES, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        return None

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
