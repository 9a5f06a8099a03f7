"""The PostgreSQL backend: one store per PostgreSQL schema, for many app servers over one
database (``pip install 'cenotaph[postgres]'``).

A location is a ``postgresql://`` URL; its ``schema`` query parameter names the store's schema
(default ``cenotaph``), which libpq itself would refuse, so it is taken out before connecting::

    cenotaph.open("postgresql://app@db.internal/prod?schema=memories", key_provider=...)
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...errors import InvalidValueError, StorageError
from .backend import PostgresBackend

__all__ = ["DEFAULT_SCHEMA", "PostgresBackend", "open_postgres", "split_schema"]

DEFAULT_SCHEMA = "cenotaph"
SCHEMA_PARAMETER = "schema"


def split_schema(dsn: str) -> tuple[str, str | None]:
    """``dsn`` without its ``schema`` query parameter, and that parameter's value (None if absent)."""
    if "://" not in dsn or "?" not in dsn:
        return dsn, None
    try:
        parts = urlsplit(dsn)
    except ValueError:  # its message never quotes the URL, which may hold a password
        raise StorageError(
            "the PostgreSQL address is malformed; write it as postgresql://user[:password]@host[:port]/database"
        ) from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == SCHEMA_PARAMETER]
    if not named:
        return dsn, None
    rest = urlencode([(key, value) for key, value in query if key != SCHEMA_PARAMETER])
    return urlunsplit(parts._replace(query=rest)), named[-1]


def open_postgres(dsn: str, *, schema: str = DEFAULT_SCHEMA, replicas: Sequence[str] = ()) -> PostgresBackend:
    """The backend of the store kept in ``schema`` (or the URL's ``?schema=``) of the database at
    ``dsn``, created and migrated if needed; ``replicas`` are the addresses of its streaming
    replicas, each of which a purge waits for to replay past its commit."""
    address, named = split_schema(dsn)
    if named is not None and schema not in (DEFAULT_SCHEMA, named):
        raise InvalidValueError(
            f"the URL names schema {named!r} and schema= names {schema!r}; give the schema once"
        )
    return PostgresBackend(address, schema=named or schema, replicas=[split_schema(r)[0] for r in replicas])
