"""The page scan of a PostgreSQL store: its tables VACUUMed, then every page of each table, its
TOAST table and every index of both read raw through the ``pageinspect`` extension and searched
for a request's probes.

A deleted row stays in its heap page as a dead tuple until VACUUM prunes it, and pruning compacts
the page without zeroing the space the tuple held; an index entry likewise. The page scan reads
what the server would write to its data files (``get_raw_page`` reads through the buffer cache,
so a page not yet flushed is read as it will be written), so a probe found there is residue in the
server's files. What it cannot read: the server's WAL (and segments already archived), and any
other server's files (a replica, a base backup).

``get_raw_page`` serves a superuser only (it checks, whatever EXECUTE was granted). Another role
reads through ``<schema>.cenotaph_raw_page``, a ``SECURITY DEFINER`` wrapper a superuser installs
with :func:`grant_page_scan`: it reads only the pages of that schema's tables, their TOAST tables
and indexes, and only a role granted EXECUTE may call it. A role with neither gets a
:class:`PageScan` naming the gap, never a pass.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import ahocorasick
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from ..physical import PageScan

__all__ = [
    "BATCH_PAGES",
    "PAGE_ACCESS_RELEASE",
    "PAGE_READER",
    "grant_page_scan",
    "has_page_reader",
    "page_access",
    "scan_pages",
]

BATCH_PAGES = 512  # pages fetched per statement (4 MiB at the default 8 KiB block size)

_RELATIONS = """
WITH tables AS (
    SELECT c.oid, c.reltoastrelid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %s AND c.relkind = 'r'
), heaps AS (
    SELECT oid FROM tables UNION SELECT reltoastrelid FROM tables WHERE reltoastrelid <> 0
), rels AS (
    SELECT oid FROM heaps UNION SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT oid FROM heaps)
)
SELECT r.oid::regclass::text, r.oid::bigint, (pg_relation_size(r.oid) / current_setting('block_size')::int)::bigint
FROM rels r ORDER BY 1
"""

PAGE_READER = "cenotaph_raw_page"  # the SECURITY DEFINER wrapper, in the store's schema

PAGE_ACCESS_RELEASE = (
    "pageinspect's raw page functions serve a superuser only (the server refuses any other role, "
    "whatever it was granted): have a superuser run cenotaph.backends.postgres.pages.grant_page_scan"
    "(dsn, schema, role) once (it installs <schema>.cenotaph_raw_page, which reads only that schema's "
    "pages, for that role), or open the store with a superuser role, then run store.purge(); until "
    "then the request's horizon (a rotation destroying its KEK epochs) is what covers the server's pages"
)

# The wrapper's body: the relation must be one the page scan reads (a table of the schema, its
# TOAST table, or an index of either), else it refuses; pageinspect's schema is looked up by the
# definer and its function called with exact argument types, so no caller's object is resolved.
_READER_BODY = """
DECLARE
    heap oid := coalesce((SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = rel), rel);
    page bytea;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = {schema} AND c.relkind = 'r' AND heap IN (c.oid, c.reltoastrelid)
    ) THEN
        RAISE EXCEPTION 'cenotaph_raw_page reads only the pages of schema %', {schema}
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    EXECUTE format('SELECT %I.get_raw_page($1, $2, $3)', (
        SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pageinspect'
    )) INTO page USING rel::text, 'main'::text, blk;
    RETURN page;
END
"""


def scan_pages(
    conn: psycopg.Connection[tuple[object, ...]], schema: str, probes: Sequence[bytes], lock_timeout_ms: int
) -> PageScan:
    """VACUUM every table of ``schema`` (plain: it needs no exclusive lock), then search every
    page of its tables, their TOAST tables and indexes for ``probes``. ``conn`` is in autocommit
    (VACUUM runs in no transaction block)."""
    started = time.monotonic()
    why = page_access(conn)
    functions = None if why is not None else _pageinspect(conn)
    if functions is not None:
        raw_page = sql.SQL(
            "SELECT {}.get_raw_page(%s, b) FROM generate_series(%s::bigint, %s::bigint) b"
        ).format(sql.Identifier(functions))
    elif why is not None and has_page_reader(conn, schema):
        raw_page = sql.SQL(
            "SELECT {}(%s::oid::regclass, b) FROM generate_series(%s::bigint, %s::bigint) b"
        ).format(sql.Identifier(schema, PAGE_READER))
    else:
        return PageScan(
            gap=f"the store's role may not read the server's pages ({why or 'no pageinspect extension'}): "
            "dead tuples and index entries are not scanned",
            release=PAGE_ACCESS_RELEASE,
        )
    tables = [
        str(r[0])
        for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (schema,)
        ).fetchall()
    ]
    # only a table with pages can hold a dead tuple; one VACUUM statement for all of them
    stored = [
        str(r[0])
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND pg_relation_size(c.oid) > 0 ORDER BY 1",
            (schema,),
        ).fetchall()
    ]
    if stored:
        conn.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
        try:
            names = sql.SQL(", ").join(sql.Identifier(schema, t) for t in stored)
            conn.execute(sql.SQL("VACUUM {}").format(names))
        finally:
            conn.execute("RESET lock_timeout")
    relations = [
        (str(name), int(str(oid)), int(str(n)))
        for name, oid, n in conn.execute(_RELATIONS, (schema,)).fetchall()
    ]
    automaton = _automaton(probes)
    pages = size = 0
    matched: set[bytes] = set()
    where: list[str] = []
    try:
        for name, oid, blocks in relations:
            found_here = False
            # the wrapper takes the oid: the caller may not look a TOAST relation's name up
            relation = name if functions is not None else str(oid)
            for first in range(0, blocks, BATCH_PAGES):
                last = min(blocks, first + BATCH_PAGES) - 1
                for (page,) in conn.execute(raw_page, (relation, first, last)):
                    data = page if isinstance(page, bytes) else bytes(memoryview(page))  # type: ignore[arg-type]
                    pages += 1
                    size += len(data)
                    if automaton is not None:
                        for _, probe in automaton.iter(data.decode("latin-1")):
                            matched.add(probe)
                            found_here = True
            if found_here:
                where.append(name)
    except pg_errors.InsufficientPrivilege:
        return PageScan(
            gap="the store's role may not call pageinspect's get_raw_page (a superuser's only) "
            f"nor {PAGE_READER}: "
            "dead tuples and index entries are not scanned",
            release=PAGE_ACCESS_RELEASE,
        )
    return PageScan(
        tables=len(tables),
        relations=len(relations),
        pages=pages,
        size=size,
        seconds=time.monotonic() - started,
        matched_probes=frozenset(matched),
        matched_relations=tuple(where),
        vacuumed=tuple(stored),
    )


def page_access(conn: psycopg.Connection[tuple[object, ...]]) -> str | None:
    """Why this connection's role cannot read raw pages (None: it can), found without creating
    anything: ``get_raw_page`` serves a superuser only, whatever EXECUTE was granted."""
    row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    return (
        None
        if row is not None and row[0]
        else "the role is not a superuser, the only role pageinspect reads raw pages for"
    )


def has_page_reader(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> bool:
    """Whether ``schema`` holds the page reader wrapper and this connection's role may call it."""
    row = conn.execute(
        "SELECT p IS NOT NULL AND has_function_privilege(p, 'EXECUTE') "
        "FROM to_regprocedure(format('%%I.%%I(regclass, bigint)', %s::text, %s::text)) p",
        (schema, PAGE_READER),
    ).fetchone()
    return row is not None and bool(row[0])


def grant_page_scan(dsn: str, schema: str, role: str) -> None:
    """Let ``role`` read the pages of ``schema``'s tables for the page scan: connected to ``dsn``
    as a superuser, create pageinspect (in ``public``) if absent, (re)create the ``SECURITY
    DEFINER`` wrapper ``<schema>.cenotaph_raw_page(regclass, bigint)`` owned by that superuser,
    with its ``search_path`` pinned, EXECUTE revoked from PUBLIC and granted to ``role``."""
    function = sql.Identifier(schema, PAGE_READER)
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        if page_access(conn) is not None:
            raise PermissionError(
                "grant_page_scan needs a superuser connection (the wrapper runs as its owner)"
            )
        conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect SCHEMA public")
        conn.execute(
            sql.SQL(
                "CREATE OR REPLACE FUNCTION {}(rel regclass, blk bigint) RETURNS bytea "
                "LANGUAGE plpgsql STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {}"
            ).format(
                function,
                sql.Literal(sql.SQL(_READER_BODY).format(schema=sql.Literal(schema)).as_string(conn)),
            )
        )
        conn.execute(sql.SQL("REVOKE ALL ON FUNCTION {}(regclass, bigint) FROM PUBLIC").format(function))
        conn.execute(
            sql.SQL("GRANT EXECUTE ON FUNCTION {}(regclass, bigint) TO {}").format(
                function, sql.Identifier(role)
            )
        )


def _pageinspect(conn: psycopg.Connection[tuple[object, ...]]) -> str | None:
    """The schema holding pageinspect's functions, creating the extension (in ``public``) if this
    role may; None when it is absent and the role may not create it."""
    row = conn.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'pageinspect'"
    ).fetchone()
    if row is not None:
        return str(row[0])
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect SCHEMA public")
    except (pg_errors.InsufficientPrivilege, pg_errors.UndefinedFile, pg_errors.FeatureNotSupported):
        return None
    return "public"


def _automaton(probes: Sequence[bytes]) -> ahocorasick.Automaton | None:
    """An Aho-Corasick automaton over ``probes`` (as latin-1 text: one character per byte)."""
    if not probes:
        return None
    automaton = ahocorasick.Automaton()
    for probe in set(probes):
        automaton.add_word(probe.decode("latin-1"), probe)
    automaton.make_automaton()
    return automaton
