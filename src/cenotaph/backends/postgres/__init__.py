"""The PostgreSQL backend: one store per PostgreSQL schema, for many app servers over one
database (``pip install 'cenotaph[postgres]'``)."""

from __future__ import annotations

from collections.abc import Sequence

from .backend import PostgresBackend

__all__ = ["PostgresBackend", "open_postgres"]


def open_postgres(dsn: str, *, schema: str = "cenotaph", replicas: Sequence[str] = ()) -> PostgresBackend:
    """The backend of the store kept in ``schema`` of the database at ``dsn`` (a
    ``postgresql://`` URL), created and migrated if needed; ``replicas`` are the addresses of its
    streaming replicas, which an erasure's confirmation checks."""
    return PostgresBackend(dsn, schema=schema, replicas=replicas)
