"""Storage backends. Each implements :class:`cenotaph.backends.base.Backend`; the store holds the policy.

What a backend does to bytes is its ``physical`` part (:mod:`cenotaph.backends.physical`). A data
directory (a path location) holds the embedded SQLite backend: :func:`directory_format` is how its
files are laid out and checked, for the code that works on a directory without opening a store
(restore, the command line), which so never imports a backend module itself.

This module is the one place a location becomes a backend: a ``postgresql://`` (or
``postgres://``) URL is a PostgreSQL database (``backends.postgres``), any other path the data
directory of the embedded SQLite backend (``backends.sqlite``). A URL is never a path: any
other ``scheme://`` string (or a ``postgresql:`` missing its ``//``) is refused, not made a
directory (a path object is always a path).
Each backend is imported only when a location names it, so the store imports none of them and a
missing driver only matters to the locations that need it.

>>> import tempfile
>>> backend = open_backend(tempfile.mkdtemp())
>>> backend.location is not None  # a local data directory: the SQLite backend
True
>>> backend.close()
"""

from __future__ import annotations

import importlib
import os
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import InvalidValueError, StorageError
from ..validation import check_path

if TYPE_CHECKING:
    from types import ModuleType

    from .base import Backend
    from .physical import DirectoryFormat

__all__ = [
    "POSTGRES_DEFAULT_SCHEMA",
    "POSTGRES_SCHEMES",
    "Location",
    "Found",
    "directory_format",
    "discard_created",
    "holds_database_snapshot",
    "is_postgres_url",
    "locate",
    "looks_like_store",
    "names_a_url",
    "load_snapshot",
    "open_backend",
    "postgres_health",
    "redacted",
]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
POSTGRES_DEFAULT_SCHEMA = "cenotaph"  # the schema of a postgresql:// URL without ?schema=
_DRIVERS = ("psycopg", "psycopg_pool")  # what cenotaph[postgres] installs
_URL_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|postgres(?:ql)?:", re.IGNORECASE)
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})


def is_postgres_url(location: object) -> bool:
    """Does ``location`` name a PostgreSQL database (a string, never a path object)?"""
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def names_a_url(location: object) -> bool:
    """Is ``location`` a string that reads as a URL (``scheme://``, or ``postgresql:`` without
    its ``//``), so that it must never become a directory of that name? A path object is a path."""
    return isinstance(location, str) and _URL_LIKE.match(location) is not None


def redacted(url: str) -> str:
    """A PostgreSQL URL as a message or a document may show it: without its password (in the
    user part or as a query parameter); a URL that does not parse shows as its scheme alone."""
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return f"{url.split('://', 1)[0]}://..."
    userinfo, at, hosts = parts.netloc.rpartition("@")
    netloc = f"{userinfo.partition(':')[0]}{at}{hosts}"
    kept = urlencode([(k, v) for k, v in query if k.lower() not in _SECRET_PARAMETERS], safe="/:")
    return urlunsplit(parts._replace(netloc=netloc, query=kept))


@dataclass(frozen=True, slots=True)
class Found:
    """What a location holds now: a store or not, and how a message names the location (a
    directory's path, or a PostgreSQL schema, database and ``host:port``, never a password)."""

    existing: bool
    where: str
    no_store: str  # why an open that must find a store there refuses, and what to do


@dataclass(frozen=True, slots=True)
class Location:
    """Where a store lives, checked and ready to open: the data directory of the SQLite backend,
    or a PostgreSQL URL (no local directory). Opening is a separate step, so a caller can settle
    what depends on the directory (the default keyring) before a database file exists in it."""

    directory: Path | None
    url: str | None = None
    made_directory: bool = False  # locating it created the data directory (empty)

    def survey(self) -> Found:
        """Whether a store is there (a PostgreSQL URL: its server is asked, on a connection of
        its own; opening it is still a separate step)."""
        if self.url is not None:
            state = postgres_health().url_state(self.url)
            return Found(state.holds_store, state.where, state.no_store)
        if self.directory is None:
            raise InvalidValueError("a location is a data directory or a postgresql:// URL")
        return Found(
            looks_like_store(self.directory),
            f"the data directory {self.directory}",
            _no_store(self.directory),
        )

    def open(self, *, create: bool = True, **options: Any) -> Backend:
        """The backend for this location; ``options`` go to a PostgreSQL backend (``replicas``,
        ``read_replicas``).
        ``create=False``: a PostgreSQL schema without a store is refused, not made (a data
        directory's caller checks that before, see :func:`locate`)."""
        if self.url is not None:
            return _open_postgres(self.url, options if create else {**options, "create": False})
        if options:
            raise InvalidValueError(
                f"{', '.join(sorted(options))} applies to a PostgreSQL store only; a data directory "
                "takes no backend options"
            )
        if self.directory is None:
            raise InvalidValueError("a location is a data directory or a postgresql:// URL")
        from .sqlite.backend import SQLiteBackend  # imported when a location names it

        return SQLiteBackend(self.directory)


def locate(location: str | os.PathLike[str], *, create: bool = True) -> Location:
    """Check ``location`` and make it ready: a PostgreSQL URL whose backend is installed, or a
    data directory, created (mode 0700) if missing, that this process may read (with
    ``create=False``, one that holds no store is refused, and nothing is created)."""
    if is_postgres_url(location):
        _postgres()  # refused now, before anything else is settled for a store it cannot open
        return Location(directory=None, url=str(location))
    if names_a_url(location):
        raise InvalidValueError(
            "the location is a URL but not a postgresql:// one; give a data directory path or a "
            "postgresql://user@host/database URL (as a string)"
        )
    path = check_path(location, "the location (a data directory path or a postgresql:// URL)")
    if not create and not looks_like_store(path):
        raise InvalidValueError(_no_store(path))
    existed = path.exists()
    return Location(directory=_data_directory(path), made_directory=not existed)


def _no_store(directory: Path) -> str:
    return (
        f"no cenotaph store in the data directory {directory}; name the store's directory, or open it "
        "with create=True to make a new store there"
    )


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


def _postgres(module: str = "") -> ModuleType:
    """``cenotaph.backends.postgres`` (or its ``module``), imported; refused clearly if absent or
    missing its driver."""
    try:
        return importlib.import_module(f"{__name__}.postgres{'.' if module else ''}{module}")
    except ModuleNotFoundError as exc:
        raise _unavailable(exc) from exc


def postgres_health() -> ModuleType:
    """``backends.postgres.health`` (what a PostgreSQL store's server looks like: the doctor's
    checks), imported; refused clearly if the driver is missing."""
    return _postgres("health")


@runtime_checkable
class _Discards(Protocol):
    def discard_created(self) -> bool: ...


def discard_created(backend: Backend) -> None:
    """Undo what opening ``backend`` created (a PostgreSQL schema or tables), if no transaction
    committed in it since: a store whose first open is refused leaves nothing behind. A data
    directory's backend creates nothing this undoes."""
    if isinstance(backend, _Discards):
        backend.discard_created()


def load_snapshot(backup: Path, url: str) -> AbstractContextManager[Backend]:
    """Restore's step for a database location: load the snapshot in ``backup`` (a PostgreSQL
    store's logical dump) into the new or empty schema ``url`` names, and yield the restored
    backend, whose first write transaction finishes the restore; a body that raises leaves
    nothing loaded. Refused clearly if the driver is missing. (A data directory's snapshot is
    files, which :func:`directory_format` installs.)"""
    loaded: AbstractContextManager[Backend] = _postgres("dump").load_snapshot(backup, url)
    return loaded


def holds_database_snapshot(backup: Path) -> bool:
    """Is ``backup`` a database store's snapshot (a PostgreSQL logical dump), which restores into
    a schema, never a data directory? Not where the driver is missing: no dump was made here."""
    try:
        dump = _postgres("dump")
    except (ModuleNotFoundError, InvalidValueError):
        return False
    held: bool = dump.holds_dump(backup)
    return held


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
