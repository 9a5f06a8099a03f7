"""A PostgreSQL location's two parts: the address libpq connects to, and the store's schema.

The ``schema`` query parameter is cenotaph's, not libpq's (which would refuse it), so it is
taken out of the URL before connecting; its value is checked as a schema name.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...errors import InvalidValueError, StorageError
from .schema import DEFAULT_SCHEMA, check_schema_name

__all__ = ["SCHEMA_PARAMETER", "split_schema", "split_url"]

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
    if len(set(named)) > 1:
        raise InvalidValueError("the URL names ?schema= more than once; give the schema once")
    rest = urlencode([(key, value) for key, value in query if key != SCHEMA_PARAMETER])
    return urlunsplit(parts._replace(query=rest)), check_schema_name(named[-1])


def split_url(url: str) -> tuple[str, str]:
    """``url``'s address (without ``?schema=``) and the store's schema (default ``cenotaph``)."""
    address, named = split_schema(url)
    return address, DEFAULT_SCHEMA if named is None else named
