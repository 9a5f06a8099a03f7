"""Where SQLite's SQL and PostgreSQL's differ, each difference named once.

The store's statements are written once, in SQLite's spelling of a parameter (``?``); a
:class:`Dialect` says how each engine takes them:

- **placeholders**: ``?`` (sqlite3) or ``%s`` (psycopg): :meth:`Dialect.sql`.
- **lists of values**: SQLite binds each value (``col IN (?,?,...)``, at most ``CHUNK`` a
  statement); PostgreSQL binds one typed array (``col = ANY(%s::text[])``), whole:
  :meth:`Dialect.chunks`, :meth:`Dialect.any_of`, :meth:`Dialect.list_args`.
- **typed parameters**: PostgreSQL must be told a parameter's type where nothing else says it
  (the first row of a recursive query): :meth:`Dialect.param`.
- **keys**: PostgreSQL's tables that a distribution by tenant would spread lead their keys with
  a ``tenant`` column its triggers fill (``postgres/schema.py``, migration 4); SQLite's keys
  have none: :meth:`Dialect.key`, where a statement names a key (``ON CONFLICT (...)``).
- **row order**: PostgreSQL promises none without ``ORDER BY``; SQLite's scans return the order
  of the index they walk, which the store's lists rely on no more than PostgreSQL's, so SQLite
  skips the sort: :meth:`Dialect.order`.

Upserts are ``ON CONFLICT`` in both. What differs in more than these is a backend's own, not
the dialect's: bulk inserts and pair deletes (``executemany`` against ``unnest`` of arrays),
searching plain columns as bytes (``instr(CAST(c AS BLOB), ?)`` against ``position(... IN
convert_to(c, 'UTF8'))``), and transactions and locking (``BEGIN IMMEDIATE`` against an
advisory lock).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["CHUNK", "POSTGRES", "SQLITE", "Dialect"]

CHUNK = 500  # SQLite: a bound on host parameters per statement


@lru_cache(maxsize=512)
def _percent(sql: str) -> str:
    return sql.replace("?", "%s")


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    arrays: bool  # lists go as one typed array (PostgreSQL), not one parameter a value
    ordered: bool  # lists need an ORDER BY to have one
    tenant_keys: bool = False  # keys of tenant-distributable tables lead with their tenant column

    def sql(self, text: str) -> str:
        """``text`` (written with ``?`` parameters) as this engine's driver takes it."""
        return _percent(text) if self.arrays else text

    def chunks(self, values: Sequence[Any]) -> Iterator[list[Any]]:
        """``values`` in the parts a list goes in: every part of at most ``CHUNK`` (SQLite, none
        when there are no values), or all at once (PostgreSQL, an empty array too)."""
        listed = list(values)
        if self.arrays:
            yield listed
            return
        for start in range(0, len(listed), CHUNK):
            yield listed[start : start + CHUNK]

    def any_of(self, column: str, sql_type: str, n: int) -> str:
        """``column`` is one of a list of ``n`` values of ``sql_type`` (PostgreSQL's name)."""
        return f"{column} = ANY(?::{sql_type}[])" if self.arrays else f"{column} IN ({','.join('?' * n)})"

    def list_args(self, values: Sequence[Any]) -> list[Any]:
        """The parameters of an :meth:`any_of` list."""
        return [list(values)] if self.arrays else list(values)

    def param(self, sql_type: str) -> str:
        """A parameter whose type nothing else in its statement gives."""
        return f"?::{sql_type}" if self.arrays else "?"

    def key(self, columns: str) -> str:
        """The key of a table distributable by tenant whose own key is ``columns``."""
        return f"tenant, {columns}" if self.tenant_keys else columns

    def order(self, clause: str) -> str:
        """`` ORDER BY clause`` where the engine needs it for a list to have an order."""
        return f" ORDER BY {clause}" if self.ordered else ""


SQLITE = Dialect("sqlite", arrays=False, ordered=False)
POSTGRES = Dialect("postgresql", arrays=True, ordered=True, tenant_keys=True)
