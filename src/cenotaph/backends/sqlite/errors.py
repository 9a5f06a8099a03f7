"""``sqlite3`` errors become :class:`cenotaph.errors.StorageError` here, and only here.

What an error is, is decided by SQLite's result code, never by its message: every error SQLite
itself reports carries its extended result code (``sqlite_errorcode``, Python 3.11), whose low
byte is the primary code (``SQLITE_BUSY``, ``SQLITE_CORRUPT``, ...). A message is English that
can change between SQLite versions and can quote what a statement was about, so "locked" in it
proves nothing: a ``UNIQUE`` violation on a value holding that word is still a constraint.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ...errors import StorageError

__all__ = ["busy_error", "is_busy", "primary_code", "translate"]

_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_CORRUPT = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


def primary_code(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code for ``exc``; None when the driver raised it without one."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_busy(exc: sqlite3.Error) -> bool:
    """Did SQLite refuse because another connection holds a lock (``BUSY`` or ``LOCKED``)?"""
    return primary_code(exc) in _BUSY


def busy_error() -> StorageError:
    return StorageError(
        "the data directory is locked by another process for too long (a long write, or a stuck "
        "process holding it open); retry, or wait longer with CENOTAPH_BUSY_TIMEOUT_MS"
    )


def translate(exc: sqlite3.Error, path: Path | None = None) -> StorageError:
    """The one place a driver error becomes ours (naming the database file ``path`` when known)."""
    code = primary_code(exc)
    if code is None:
        # Raised by the sqlite3 module's own Python code (a closed connection, a failed callback,
        # a misuse of the API), not by SQLite reading the database: there is no code to decide
        # by, and its text is not one either. Such an error says nothing about locks, corruption
        # or permissions, so it gets the generic message, never a guess from its wording.
        return _failed(exc)
    where = "the database" if path is None else str(path)
    if code in _BUSY:
        return busy_error()
    if code in _CORRUPT:
        return StorageError("the database file is corrupt; restore it from a backup with cenotaph.restore()")
    if code == sqlite3.SQLITE_READONLY:
        return _read_only(where, path)
    if code == sqlite3.SQLITE_CANTOPEN:
        return StorageError(
            f"cannot open {where} (SQLite: {exc}); check that this user may read the data directory "
            "and its files"
        )
    if code == sqlite3.SQLITE_FULL:
        return StorageError(
            f"the disk holding {where} is full (or the database reached its size limit); free disk "
            "space, then retry"
        )
    if code == sqlite3.SQLITE_CONSTRAINT:
        # the store checks everything a constraint guards before it writes, so a violation means
        # the rows are not what it wrote (an edited database, a bug): the storage failed it
        return StorageError(
            f"the database refused a row that breaks one of its constraints ({_name(exc)}), which the "
            "store does not write: the database may have been altered; run store.check_integrity() "
            "and investigate"
        )
    return _failed(exc)


def _read_only(where: str, path: Path | None) -> StorageError:
    from .backend import unwritable  # here, not at the top: backend.py imports this module

    denied = [] if path is None else unwritable(path.parent)
    named = f"{where} (or its directory)" if not denied else ", ".join(map(str, denied))
    return StorageError(
        f"read-only for this user: {named}; reads work, but this step writes, so it needs write "
        "permission on the data directory and every cenotaph.db* file in it"
    )


def _failed(exc: sqlite3.Error) -> StorageError:
    kind = type(exc).__name__ if primary_code(exc) is None else f"{type(exc).__name__}, {_name(exc)}"
    return StorageError(f"the database failed ({kind}); check disk space and permissions")


def _name(exc: sqlite3.Error) -> str:
    """SQLite's name for the error's extended code (``SQLITE_CONSTRAINT_UNIQUE``): no values."""
    return str(getattr(exc, "sqlite_errorname", None) or "SQLITE_ERROR")
