"""The PostgreSQL backend: one store per PostgreSQL schema, for many app servers over one
database (``pip install 'cenotaph[postgres]'``).

A location is a ``postgresql://`` URL; its ``schema`` query parameter names the store's schema
(default ``cenotaph``), which libpq itself would refuse, so it is taken out before connecting::

    cenotaph.open("postgresql://app@db.internal/prod?schema=memories", key_provider=...)

A schema name is an unquoted PostgreSQL identifier in lower case (``schema.check_schema_name``):
what a ``psql`` session means by the same name, unquoted.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import InvalidValueError
from .address import SCHEMA_PARAMETER, split_schema, split_url
from .backend import PostgresBackend
from .schema import DEFAULT_SCHEMA, check_schema_name

__all__ = [
    "DEFAULT_SCHEMA",
    "SCHEMA_PARAMETER",
    "PostgresBackend",
    "check_schema_name",
    "open_postgres",
    "split_schema",
    "split_url",
]


def open_postgres(
    dsn: str,
    *,
    schema: str = DEFAULT_SCHEMA,
    replicas: Sequence[str] = (),
    read_replicas: Sequence[str] = (),
    create: bool = True,
) -> PostgresBackend:
    """The backend of the store kept in ``schema`` (or the URL's ``?schema=``) of the database at
    ``dsn``, created and migrated if needed (``create=False``: a schema without a store is
    refused); ``replicas`` are the addresses of its streaming replicas, each of which a purge
    waits for to replay past its commit; ``read_replicas`` are streaming replicas that may also
    serve read transactions, each only once it has replayed past every commit this backend has
    seen (``routing``), and that a purge waits for too."""
    address, named = split_schema(dsn)
    if named is not None and schema not in (DEFAULT_SCHEMA, named):
        raise InvalidValueError(
            f"the URL names schema {named!r} and schema= names {schema!r}; give the schema once"
        )
    return PostgresBackend(
        address,
        schema=named or schema,
        replicas=[split_schema(r)[0] for r in replicas],
        read_replicas=[split_schema(r)[0] for r in read_replicas],
        create=create,
    )
