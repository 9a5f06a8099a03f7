"""What a PostgreSQL store's server looks like from here, for opening and for ``cenotaph doctor``.

:func:`schema_state` connects once and says whether the URL's schema exists and holds a store
(what :func:`cenotaph.open` decides on before it creates anything). :func:`server_checks` are
the doctor's lines for a store that exists: the role's privileges on the schema and its
tables, each configured replica's replay (what a purge waits for), and when VACUUM is due
(dead tuples and the last vacuum of the store's tables, from ``pg_stat_user_tables``). Every
message names a server as ``host:port``, never the address it was given (it may hold a
password).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ...errors import StorageError
from ..physical import Check
from .address import split_schema, split_url
from .backend import CONNECT_TIMEOUT_S, no_store_message, schema_description
from .errors import Endpoint, endpoint, translate, translate_connect
from .pages import PAGE_ACCESS_RELEASE, PAGE_READER, has_page_reader, page_access
from .physical import POSTGRES_FORMAT, REPLAY_WAIT_S, ReplicaProbe
from .schema import MIGRATIONS_TABLE, created_objects
from .txn import Connection

__all__ = ["SchemaState", "schema_state", "server_checks", "url_checks", "url_state", "version_checks"]

_INCOMPLETE = "restore_incomplete"  # dump.py's mark of a loaded copy not yet committed
_DML = ("SELECT", "INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True, slots=True)
class SchemaState:
    """The server a URL names and what its schema holds (no password anywhere)."""

    server: str  # host:port
    user: str  # the role connected as
    database: str
    version: str  # the server's version
    schema: str
    in_recovery: bool  # a replica (or a server still recovering): it accepts no writes
    exists: bool  # the schema exists
    migration: int  # the newest migration applied; 0: no store
    restoring: bool  # a restore loaded the schema and has not committed it yet

    @property
    def holds_store(self) -> bool:
        return self.migration > 0

    @property
    def where(self) -> str:
        """How a message names this schema."""
        return schema_description(self.schema, self.database, self.server)

    @property
    def no_store(self) -> str:
        """Why an open that must find a store here refuses, and what to do."""
        return no_store_message(self.where, self.exists)


@contextlib.contextmanager
def _connected(dsn: str, where: Endpoint) -> Iterator[Connection]:
    timeout: dict[str, Any] = (
        {} if "connect_timeout" in _conninfo(dsn) else {"connect_timeout": CONNECT_TIMEOUT_S}
    )
    try:
        with psycopg.connect(dsn, autocommit=True, **timeout) as conn:
            yield conn
    except psycopg.OperationalError as exc:
        raise translate_connect(exc, where) from exc
    except psycopg.Error as exc:
        raise translate(exc, where) from exc


def _conninfo(dsn: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(dsn)
    except psycopg.Error:  # endpoint() refused it already, without quoting it
        raise StorageError("the PostgreSQL address is malformed") from None


def url_state(url: str) -> SchemaState:
    """What the schema a store's URL names (its ``?schema=``, default ``cenotaph``) holds."""
    return schema_state(*split_url(url))


def url_checks(url: str, replicas: Sequence[str]) -> list[Check]:
    """:func:`server_checks` for a store's URL and its replicas' URLs."""
    address, schema = split_url(url)
    return server_checks(address, schema, [split_schema(r)[0] for r in replicas])


def schema_state(dsn: str, schema: str) -> SchemaState:
    """What ``schema`` of the database at ``dsn`` (no ``?schema=`` left in it) holds."""
    where = endpoint(dsn, schema)
    with _connected(dsn, where) as conn:
        row = conn.execute(
            "SELECT current_user, current_database(), current_setting('server_version'), "
            "pg_is_in_recovery(), EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s), "
            "to_regclass(quote_ident(%s) || '.' || %s) IS NOT NULL, "
            "to_regclass(quote_ident(%s) || '.meta') IS NOT NULL",
            (schema, schema, MIGRATIONS_TABLE, schema),
        ).fetchone()
        assert row is not None
        user, database, version, in_recovery, exists, migrated, has_meta = row
        migration = _applied(conn, schema) if migrated else 0
        restoring = bool(has_meta) and _marked_restoring(conn, schema)
    return SchemaState(
        server=where.server,
        user=str(user),
        database=str(database),
        version=str(version),
        schema=schema,
        in_recovery=bool(in_recovery),
        exists=bool(exists),
        migration=migration,
        restoring=restoring,
    )


def _applied(conn: Connection, schema: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(sql.Identifier(schema, MIGRATIONS_TABLE))
    ).fetchone()
    return 0 if row is None else int(row[0])


def _marked_restoring(conn: Connection, schema: str) -> bool:
    row = conn.execute(
        sql.SQL("SELECT 1 FROM {} WHERE name = %s").format(sql.Identifier(schema, "meta")),
        (_INCOMPLETE,),
    ).fetchone()
    return row is not None


def server_checks(dsn: str, schema: str, replicas: Sequence[str]) -> list[Check]:
    """The doctor's checks of a store that exists in ``schema``: the migration it is at, the
    role's privileges, whether it may read raw pages, each replica's replay and when VACUUM is due."""
    where = endpoint(dsn, schema)
    with _connected(dsn, where) as conn:
        checks = [_privileges(conn, schema, where), _page_scan(conn, schema), _vacuum(conn, schema)]
        in_recovery = bool(_one(conn, "SELECT pg_is_in_recovery()"))
        target = None if in_recovery else str(_one(conn, "SELECT pg_current_wal_lsn()::text"))
    if target is not None:
        checks += _replica_checks(replicas, schema, target)
    return checks


def _page_scan(conn: Connection, schema: str) -> Check:
    """Can the role read the server's pages (the ``pages`` layer of a compliance erasure), as a
    superuser or through the schema's ``SECURITY DEFINER`` page reader?"""
    why = page_access(conn)
    if why is None:
        return Check(
            "postgresql page scan", "ok", "the role reads raw pages (pageinspect): erasures scan dead tuples"
        )
    if has_page_reader(conn, schema):
        return Check(
            "postgresql page scan",
            "ok",
            f"the role reads the schema's raw pages through {PAGE_READER} (granted by a superuser): "
            "erasures scan dead tuples",
        )
    return Check(
        "postgresql page scan",
        "warn",
        f"{why}: compliance erasures stay short of verified (layer 'pages' pending); {PAGE_ACCESS_RELEASE}",
    )


def _one(conn: Connection, query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def version_checks() -> list[Check]:
    """The driver's version (the server's is in the connection check)."""
    return POSTGRES_FORMAT.version_checks()


# -- privileges ------------------------------------------------------------------------------
def _privileges(conn: Connection, schema: str, where: Endpoint) -> Check:
    """What the role may do: USAGE on the schema and SELECT/INSERT/UPDATE/DELETE on every table
    of the store are needed (fail); CREATE on the schema (a later migration) and owning the
    tables (PostgreSQL's VACUUM FULL, the backend's rewrite, skips a table its role does not
    own) are advised (warn)."""
    usage, create = conn.execute(
        "SELECT has_schema_privilege(%s, 'USAGE'), has_schema_privilege(%s, 'CREATE')", (schema, schema)
    ).fetchone() or (False, False)
    rows = conn.execute(
        "SELECT c.relname, "
        + ", ".join(f"has_table_privilege(c.oid, '{p}')" for p in _DML)
        + ", pg_has_role(c.relowner, 'USAGE') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY c.relname",
        (schema,),
    ).fetchall()
    tables = {str(r[0]): r[1:] for r in rows}
    role = f"role {where.user!r}" if where.user != "the current user" else "this role"
    missing_tables = [t for t in created_objects()[0] if t not in tables]
    if missing_tables:
        return Check(
            "postgresql privileges",
            "fail",
            f"the store's tables {', '.join(missing_tables)} are missing from schema {schema!r}: the "
            "store was altered; restore it from a backup",
        )
    lacking = sorted(
        f"{name} ({', '.join(p for p, ok in zip(_DML, granted[:4], strict=True) if not ok)})"
        for name, granted in tables.items()
        if not all(granted[:4])
    )
    if not usage or lacking:
        needs = ([f"USAGE on schema {schema!r}"] if not usage else []) + (
            [f"on tables {', '.join(lacking)}"] if lacking else []
        )
        return Check(
            "postgresql privileges",
            "fail",
            f"{role} lacks {'; '.join(needs)}: grant them (GRANT USAGE ON SCHEMA, GRANT SELECT, INSERT, "
            "UPDATE, DELETE ON ALL TABLES IN SCHEMA)",
        )
    advice = []
    if not create:
        advice.append(f"no CREATE on schema {schema!r} (a later cenotaph's migration needs it)")
    not_owned = sorted(name for name, granted in tables.items() if not granted[4])
    if not_owned:
        advice.append(
            f"does not own {len(not_owned)} of the {len(tables)} tables, which VACUUM FULL then skips"
        )
    if advice:
        return Check("postgresql privileges", "warn", f"{role} can use the store, but " + "; ".join(advice))
    return Check(
        "postgresql privileges",
        "ok",
        f"{role} has USAGE and CREATE on schema {schema!r} and owns its {len(tables)} tables",
    )


# -- replicas --------------------------------------------------------------------------------
def _replica_checks(replicas: Sequence[str], schema: str, target: str) -> list[Check]:
    if not replicas:
        return [
            Check(
                "postgresql replicas",
                "ok",
                "none configured: a purge waits for no replica (a standby not listed is covered by the "
                "erasure horizon only)",
            )
        ]
    return [_replica_check(dsn, schema, target) for dsn in replicas]


def _replica_check(dsn: str, schema: str, target: str) -> Check:
    """Whether the replica at ``dsn`` replays past ``target`` (the primary's WAL position now)
    within the time a purge waits for it."""
    with contextlib.ExitStack() as stack:
        replica = ReplicaProbe(dsn, schema, stack)
        name = f"postgresql replica {replica.server}"
        started = time.monotonic()
        try:
            while replica.lag(target) != 0 and time.monotonic() - started < REPLAY_WAIT_S:
                time.sleep(0.02)
        except StorageError as exc:  # a server that is no replica
            return Check(name, "fail", " ".join(str(exc).split()))
        elapsed = time.monotonic() - started
    held = "erasures stay shredded, naming it, until it replays past their purge"
    if replica.last_lag is None:
        return Check(
            name,
            "fail",
            f"cannot be reached ({replica.reason or 'no connection'}): {held}; make it reachable, or stop "
            "listing it",
        )
    if replica.paused:
        return Check(
            name,
            "warn",
            f"replay is paused, {replica.last_lag} bytes behind: {held}; run pg_wal_replay_resume on it",
        )
    if replica.last_lag:
        return Check(
            name,
            "warn",
            f"{replica.last_lag} bytes of WAL behind the primary after {REPLAY_WAIT_S:g} s: {held}",
        )
    return Check(name, "ok", f"replayed up to the primary's WAL position in {elapsed:.2f} s")


# -- vacuum ----------------------------------------------------------------------------------
def _vacuum(conn: Connection, schema: str) -> Check:
    """When VACUUM is due: a table whose dead tuples exceed autovacuum's threshold (the server's
    ``autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor * rows``; per-table storage
    parameters are not read), and when each was last vacuumed."""
    settings: dict[str, str] = dict(
        conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', 'track_counts', "
            "'autovacuum_vacuum_threshold', 'autovacuum_vacuum_scale_factor')"
        ).fetchall()
    )
    if settings.get("track_counts") != "on":
        return Check(
            "postgresql vacuum", "warn", "track_counts is off: the server keeps no dead-tuple counts"
        )
    base = float(settings.get("autovacuum_vacuum_threshold", 50))
    scale = float(settings.get("autovacuum_vacuum_scale_factor", 0.2))
    rows = conn.execute(
        "SELECT s.relname, s.n_dead_tup, greatest(c.reltuples, s.n_live_tup, 0), "
        "extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum)) "
        "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid WHERE s.schemaname = %s "
        "ORDER BY s.n_dead_tup DESC, s.relname",
        (schema,),
    ).fetchall()
    due = [
        f"{name} ({dead} dead tuples, threshold {int(base + scale * float(live))}, last vacuumed "
        f"{_ago(since)})"
        for name, dead, live, since in rows
        if int(dead) > base + scale * float(live)
    ]
    dead_total = sum(int(r[1]) for r in rows)
    vacuumed = [float(r[3]) for r in rows if r[3] is not None]
    last = _ago(min(vacuumed)) if vacuumed else "never"
    autovacuum = settings.get("autovacuum") == "on"
    residue = (
        "dead tuples hold ciphertext only; VACUUM FULL of the store's tables removes them from the files"
    )
    if not autovacuum:
        return Check(
            "postgresql vacuum",
            "warn",
            f"autovacuum is off: run VACUUM on the store's tables ({dead_total} dead tuples"
            + (f"; due on {', '.join(due)}" if due else "")
            + f"); {residue}",
        )
    if due:
        return Check(
            "postgresql vacuum",
            "warn",
            f"VACUUM is due on {', '.join(due)}: autovacuum has not reached them yet (or run VACUUM); {residue}",
        )
    most = f", most in {rows[0][0]} ({rows[0][1]})" if rows and int(rows[0][1]) else ""
    return Check(
        "postgresql vacuum",
        "ok",
        f"autovacuum on; no table past its threshold ({dead_total} dead tuples{most}); last vacuum of a "
        f"table: {last}",
    )


def _ago(seconds: object) -> str:
    if seconds is None:
        return "never"
    left = int(float(str(seconds)))
    if left < 120:
        return f"{left} s ago"
    if left < 7200:
        return f"{left // 60} min ago"
    if left < 172800:
        return f"{left // 3600} h ago"
    return f"{left // 86400} days ago"
