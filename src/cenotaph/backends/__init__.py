"""Storage backends. Each implements :class:`cenotaph.backends.base.Backend`; the store holds the policy.

What a backend does to bytes is its ``physical`` part (:mod:`cenotaph.backends.physical`). A data
directory (a path location) holds the embedded SQLite backend: :func:`directory_format` is how its
files are laid out and checked, for the code that works on a directory without opening a store
(restore, the command line), which so never imports a backend module itself.

This module is the one place a location becomes a backend: a ``postgresql://`` (or
``postgres://``) URL is a PostgreSQL database (``backends.postgres``), anything else is the data
directory of the embedded SQLite backend (``backends.sqlite``). Each backend is imported only
when a location names it, so the store imports none of them and a missing driver only matters
to the locations that need it.

>>> import tempfile
>>> backend = open_backend(tempfile.mkdtemp())
>>> backend.location is not None  # a local data directory: the SQLite backend
True
>>> backend.close()
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidValueError, StorageError
from ..validation import check_path

if TYPE_CHECKING:
    from types import ModuleType

    from .base import Backend
    from .physical import DirectoryFormat

__all__ = [
    "POSTGRES_SCHEMES",
    "Location",
    "directory_format",
    "is_postgres_url",
    "locate",
    "looks_like_store",
    "open_backend",
    "postgres_dump",
]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_DRIVERS = ("psycopg", "psycopg_pool")  # what cenotaph[postgres] installs


def is_postgres_url(location: object) -> bool:
    """Does ``location`` name a PostgreSQL database (a string, never a path object)?"""
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


@dataclass(frozen=True, slots=True)
class Location:
    """Where a store lives, checked and ready to open: the data directory of the SQLite backend,
    or a PostgreSQL URL (no local directory). Opening is a separate step, so a caller can settle
    what depends on the directory (the default keyring) before a database file exists in it."""

    directory: Path | None
    url: str | None = None

    def open(self, **options: Any) -> Backend:
        """The backend for this location; ``options`` go to a PostgreSQL backend (``replicas``)."""
        if self.url is not None:
            return _open_postgres(self.url, options)
        if options:
            raise InvalidValueError(
                f"{', '.join(sorted(options))} applies to a PostgreSQL store only; a data directory "
                "takes no backend options"
            )
        if self.directory is None:
            raise InvalidValueError("a location is a data directory or a postgresql:// URL")
        from .sqlite.backend import SQLiteBackend  # imported when a location names it

        return SQLiteBackend(self.directory)


def locate(location: str | os.PathLike[str]) -> Location:
    """Check ``location`` and make it ready: a PostgreSQL URL whose backend is installed, or a
    data directory, created (mode 0700) if missing, that this process may read."""
    if is_postgres_url(location):
        _postgres()  # refused now, before anything else is settled for a store it cannot open
        return Location(directory=None, url=str(location))
    path = check_path(location, "the location (a data directory path or a postgresql:// URL)")
    return Location(directory=_data_directory(path))


def open_backend(location: str | os.PathLike[str], **options: Any) -> Backend:
    """The backend ``location`` names (see :func:`locate`), opened."""
    return locate(location).open(**options)


def _data_directory(directory: Path) -> Path:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidValueError(
            f"cannot create the data directory ({exc.strerror}); choose a writable path"
        ) from exc
    if not directory.is_dir():
        raise InvalidValueError("the data location exists and is not a directory; choose another path")
    if not os.access(directory, os.R_OK | os.X_OK):
        raise StorageError(
            f"cannot read the data directory {directory} (permission denied); check its owner and mode"
        )
    return directory


def _postgres() -> ModuleType:
    """``cenotaph.backends.postgres``, imported; refused clearly if absent or missing its driver."""
    try:
        return importlib.import_module(f"{__name__}.postgres")
    except ModuleNotFoundError as exc:
        raise _unavailable(exc) from exc


def postgres_dump() -> ModuleType:
    """``backends.postgres.dump`` (a PostgreSQL store's logical backup, and restore's loading of
    one), imported; refused clearly if the driver is missing."""
    try:
        return importlib.import_module(f"{__name__}.postgres.dump")
    except ModuleNotFoundError as exc:
        raise _unavailable(exc) from exc


def _open_postgres(url: str, options: dict[str, Any]) -> Backend:
    try:
        backend: Backend = _postgres().open_postgres(url, **options)
    except ModuleNotFoundError as exc:  # a driver imported only once a connection is made
        raise _unavailable(exc) from exc
    return backend


def _unavailable(exc: ModuleNotFoundError) -> ModuleNotFoundError | InvalidValueError:
    """The refusal a missing module makes of a PostgreSQL location: the backend itself (not in
    this version) or its driver (not installed). Any other missing module is a bug, reported as
    the import error it is."""
    if exc.name == f"{__name__}.postgres":
        return InvalidValueError(
            "the PostgreSQL backend is not available in this version; use a data directory"
        )
    if exc.name is not None and exc.name.split(".")[0] in _DRIVERS:
        return InvalidValueError(
            "a postgresql:// location needs the PostgreSQL driver, which is not installed: "
            "pip install 'cenotaph[postgres]'"
        )
    return ModuleNotFoundError(str(exc), name=exc.name)


def directory_format() -> DirectoryFormat:
    """How a data directory's files are laid out and checked (SQLite's)."""
    from .sqlite.physical import SQLITE_FORMAT  # on first use: importing the package loads no engine

    return SQLITE_FORMAT


def looks_like_store(path: Path) -> bool:
    """Does the directory ``path`` hold a store (its database, not merely a keyring)?"""
    return directory_format().holds_store(path)
