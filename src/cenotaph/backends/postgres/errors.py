"""The one place psycopg's errors become :class:`cenotaph.errors.StorageError`.

Translated by type (SQLSTATE class, psycopg error class), never by message text. A message names
the server as ``host:port`` (and the user, database or schema where that is what to fix), never
the connection string: it may hold a password. Any server text quoted has the password scrubbed.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import errors as pg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from ...errors import StorageError
from ..base import BUSY_TIMEOUT_ENV

__all__ = ["Endpoint", "connect_reason", "endpoint", "translate", "translate_connect"]


@dataclass(frozen=True)
class Endpoint:
    """Where a store's database is, as a message may name it (no password)."""

    host: str
    port: str
    user: str
    dbname: str
    schema: str
    password: str | None = None  # only to scrub it from quoted server text; never shown

    @property
    def server(self) -> str:
        return self.host if self.host.startswith("/") else f"{self.host}:{self.port}"

    def scrub(self, text: str) -> str:
        return text.replace(self.password, "***") if self.password else text


def endpoint(dsn: str, schema: str) -> Endpoint:
    """The parts of ``dsn`` a message may name; a malformed one is refused without quoting it
    (libpq's own message repeats the whole string, password included)."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.Error:
        raise StorageError(
            "the PostgreSQL address is malformed; write it as postgresql://user[:password]@host[:port]/database"
        ) from None
    host = str(parts.get("host") or parts.get("hostaddr") or "localhost").split(",")[0]
    return Endpoint(
        host=host,
        port=str(parts.get("port") or "5432").split(",")[0],
        user=str(parts.get("user") or "the current user"),
        dbname=str(parts.get("dbname") or "the default database"),
        schema=schema,
        password=None if parts.get("password") is None else str(parts["password"]),
    )


def _busy(where: Endpoint) -> StorageError:
    return StorageError(
        f"the store in schema {where.schema!r} at {where.server} is locked by another writer for too long "
        f"(a long write, or a stuck session holding it); retry, or wait longer with {BUSY_TIMEOUT_ENV}"
    )


def _unreachable(where: Endpoint, reason: str = "") -> StorageError:
    said = f" ({reason})" if reason else ""
    return StorageError(
        f"cannot reach PostgreSQL at {where.server}{said}; check it is running and accepts "
        f"connections from this host for user {where.user!r} to database {where.dbname!r}"
    )


def connect_reason(exc: BaseException, where: Endpoint) -> str:
    """libpq's reason for a failed connection (its first line, after the server's address)."""
    lines = where.scrub(str(exc)).strip().splitlines()
    first = lines[0] if lines else ""
    return first.rsplit(" failed: ", 1)[-1].strip().removeprefix("FATAL:").strip()


# a writer waited too long (lock_timeout, statement_timeout) or lost a race the server broke
_BUSY = (pg.SerializationFailure, pg.DeadlockDetected, pg.LockNotAvailable, pg.QueryCanceled)
# the server went away or is not accepting sessions yet
_GONE = (pg.AdminShutdown, pg.CrashShutdown, pg.CannotConnectNow)


def translate(exc: BaseException, where: Endpoint) -> StorageError:
    """A psycopg (or pool) error raised while using an open store, as a StorageError."""
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, _BUSY):
        return _busy(where)
    if isinstance(exc, (PoolTimeout, *_GONE)) or state.startswith("08"):
        return _unreachable(where)
    if isinstance(exc, psycopg.OperationalError) and not state:  # libpq: the connection broke
        return _unreachable(where, connect_reason(exc, where))
    if isinstance(exc, pg.DiskFull):
        return StorageError(f"PostgreSQL at {where.server} is out of disk space; free some, then retry")
    if isinstance(exc, pg.InsufficientPrivilege):
        return StorageError(
            f"PostgreSQL user {where.user!r} may not use schema {where.schema!r} in database "
            f"{where.dbname!r} at {where.server}; grant it (GRANT ALL ON SCHEMA and its tables), or "
            "choose another schema"
        )
    if isinstance(exc, pg.ReadOnlySqlTransaction):
        return StorageError(
            f"PostgreSQL at {where.server} accepts no writes (a replica, or read-only); point the "
            "store at the primary"
        )
    if isinstance(exc, psycopg.IntegrityError):
        return StorageError(
            f"a PostgreSQL constraint refused the change (SQLSTATE {state}); the rows in schema "
            f"{where.schema!r} are not what this cenotaph wrote: run cenotaph doctor"
        )
    if isinstance(exc, pg.DataCorrupted | pg.IndexCorrupted):
        return StorageError(f"PostgreSQL at {where.server} reports corrupt data; restore from a backup")
    name = type(exc).__name__
    return StorageError(
        f"PostgreSQL failed ({name}{f', SQLSTATE {state}' if state else ''}); check the server's log"
    )


def translate_connect(exc: BaseException, where: Endpoint) -> StorageError:
    """A failure to open a first connection: unreachable, refused login, or no such database
    (libpq reports all three without a SQLSTATE; its reason, which holds no password, is quoted)."""
    if isinstance(exc, psycopg.OperationalError) and not getattr(exc, "sqlstate", None):
        return _unreachable(where, connect_reason(exc, where))
    return translate(exc, where)
