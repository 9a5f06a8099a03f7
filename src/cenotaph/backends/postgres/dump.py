"""A PostgreSQL store's logical backup: its schema's rows dumped, and loaded into a new schema.

A dump is one ``COPY (SELECT ...) TO STDOUT (FORMAT BINARY)`` file per table of the store,
all read in ONE read-only REPEATABLE READ transaction (one snapshot), plus
``cenotaph-pg-dump.json`` naming the format, the schema's migration version and each table's
columns. The tables hold HMAC tokens, AES-GCM ciphertext and content-free bookkeeping, so the
dump is ciphertext only; it carries no dead tuple, no free space and no WAL of the server's.

Loading is ONE transaction on the target schema: it creates the schema at the dump's migration
version and copies every table's rows in, so a restore killed while loading leaves no schema.
The loaded schema keeps its source's audit chain id out of ``meta`` and a ``restore_incomplete``
mark in: until the restored store's first transaction puts the chain id back, verifies the
copy's log and mints its own (:class:`RestoredBackend`), an ordinary open refuses the schema
(a chain id missing where history exists), and a restore run again replaces it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from ...durable import fsync, write_atomically
from ...errors import InvalidValueError, StorageError
from ...faults import fault_point
from ..base import WriteLocks
from ..ops import Op
from ..sql import epochs_in_use
from .address import split_url
from .backend import PostgresBackend, advisory_key
from .errors import endpoint, translate, translate_connect
from .schema import LATEST, MIGRATIONS, MIGRATIONS_TABLE, create_schema, set_search_path
from .txn import Connection, PostgresTxn

__all__ = [
    "DUMP_FORMAT",
    "DUMP_MANIFEST",
    "DUMP_TABLES",
    "RestoredBackend",
    "drop_schema",
    "dump_files",
    "holds_dump",
    "load_dump",
    "load_snapshot",
    "restore_key",
    "split_target",
    "restore_lock",
    "write_dump",
]

DUMP_FORMAT = "cenotaph-pg-dump/1"
DUMP_MANIFEST = "cenotaph-pg-dump.json"
# every table of migration LATEST but the migrations table (the load recreates it)
DUMP_TABLES = (
    "audit",
    "change_marker",
    "consumer_events",
    "consumer_takes",
    "consumers",
    "derivations",
    "erased_records",
    "erasure_progress",
    "erasures",
    "lifts",
    "lineage",
    "meta",
    "probe_keys",
    "reauth_tokens",
    "record_subjects",
    "records",
    "scopes",
    "subjects",
    "tombstones",
    "vectors",
)
_SUFFIX = ".copy"
_CHAIN = "audit_chain"  # ledger.AUDIT_CHAIN: the meta row a loaded copy keeps out until its first commit
_INCOMPLETE = "restore_incomplete"
_SEQUENCED = 3  # the migration that keeps the clock in a sequence
_READ_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_CHUNK = 1 << 20


def dump_files(directory: Path) -> list[Path]:
    """The files :func:`write_dump` writes into ``directory``."""
    return [*(directory / f"{t}{_SUFFIX}" for t in DUMP_TABLES), directory / DUMP_MANIFEST]


def holds_dump(directory: Path) -> bool:
    manifest = directory / DUMP_MANIFEST
    try:
        return bool(json.loads(manifest.read_text()).get("format") == DUMP_FORMAT)
    except (OSError, ValueError, AttributeError):
        return False


def _tables(conn: Connection, schema: str) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
    return {str(r[0]) for r in rows}


def _columns(conn: Connection, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
        "ORDER BY ordinal_position",
        (schema, table),
    ).fetchall()
    return [str(r[0]) for r in rows]


def write_dump(conn: Connection, schema: str, directory: Path) -> set[int]:
    """Dump the store in ``schema`` into ``directory`` in one snapshot (``conn``: outside any
    transaction, its search_path the schema's); the KEK epochs its wrapped keys use, read in
    that same snapshot."""
    conn.execute(_READ_SNAPSHOT)
    try:
        found = _tables(conn, schema)
        if found != {*DUMP_TABLES, MIGRATIONS_TABLE}:
            raise StorageError(
                f"the store's schema {schema!r} does not hold the tables this cenotaph dumps; open it "
                "with the cenotaph that wrote it"
            )
        row = conn.execute(
            sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(
                sql.Identifier(schema, MIGRATIONS_TABLE)
            )
        ).fetchone()
        version = 0 if row is None else int(row[0])
        tables: dict[str, list[str]] = {}
        for table in DUMP_TABLES:
            columns = _columns(conn, schema, table)
            tables[table] = columns
            query = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT (FORMAT BINARY)").format(
                sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(schema, table)
            )
            path = directory / f"{table}{_SUFFIX}"
            with open(path, "wb", opener=_private) as out, conn.cursor().copy(query) as copy:
                for data in copy:
                    out.write(data)
        epochs = epochs_in_use(conn.execute)
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
    for table in DUMP_TABLES:
        fsync(directory / f"{table}{_SUFFIX}")
    manifest = {"format": DUMP_FORMAT, "copy": "binary", "schema_version": version, "tables": tables}
    write_atomically(directory / DUMP_MANIFEST, json.dumps(manifest, indent=1).encode())
    return epochs


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _manifest(src: Path) -> dict[str, Any]:
    if not holds_dump(src):
        raise InvalidValueError(
            "the source is not a backup of a PostgreSQL store (no cenotaph-pg-dump.json); a data "
            "directory's backup restores into a data directory"
        )
    manifest: dict[str, Any] = json.loads((src / DUMP_MANIFEST).read_text())
    version = int(manifest["schema_version"])
    if version > LATEST:
        raise InvalidValueError(
            f"the backup has schema {version}, newer than this cenotaph knows ({LATEST}); restore it "
            "with the newer cenotaph that wrote it"
        )
    if sorted(manifest["tables"]) != sorted(DUMP_TABLES):
        raise InvalidValueError(
            "the backup's dump does not name this cenotaph's tables; nothing was restored"
        )
    return manifest


@contextlib.contextmanager
def _connection(dsn: str, schema: str) -> Iterator[Connection]:
    where = endpoint(dsn, schema)
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise translate_connect(exc, where) from exc
    try:
        with conn:
            yield conn
    except psycopg.Error as exc:
        raise translate(exc, where) from exc


def _state(conn: Connection, schema: str) -> str:
    """``absent``, ``empty`` (a schema with no relation), ``incomplete`` (a load whose restore
    never committed its first transaction) or ``store`` (anything else)."""
    row = conn.execute(
        "SELECT n.oid, count(c.oid) FROM pg_namespace n LEFT JOIN pg_class c ON c.relnamespace = n.oid "
        "WHERE n.nspname = %s GROUP BY n.oid",
        (schema,),
    ).fetchone()
    if row is None:
        return "absent"
    if int(row[1]) == 0:
        return "empty"
    if "meta" in _tables(conn, schema):
        marked = conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE name = %s").format(sql.Identifier(schema, "meta")), (_INCOMPLETE,)
        ).fetchone()
        if marked is not None:
            return "incomplete"
    return "store"


def load_dump(dsn: str, schema: str, src: Path) -> tuple[int, bool]:
    """Load the dump in ``src`` into ``schema`` (absent, empty, or left by an interrupted
    restore) in one transaction; the source's audit chain id (kept out of the loaded ``meta``)
    and whether the schema existed empty before."""
    manifest = _manifest(src)
    version = int(manifest["schema_version"])
    with _connection(dsn, schema) as conn:
        conn.execute("BEGIN")
        try:
            conn.execute(f"SET LOCAL lock_timeout = {PostgresBackend._lock_timeout_ms()}")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key(schema),))
            state = _state(conn, schema)
            if state == "store":
                raise InvalidValueError(
                    f"the restore target schema {schema!r} already holds tables; restore into a new "
                    "or empty schema"
                )
            if state == "incomplete":  # what a killed restore left: it starts over from the backup
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
            conn.execute(create_schema(schema))
            conn.execute(set_search_path(schema, local=True))
            for number, script in MIGRATIONS:
                if number <= version:
                    conn.execute(script)
                    conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} (version) VALUES (%s)", (number,))
            for table in DUMP_TABLES:
                _load_table(conn, schema, table, manifest["tables"][table], src / f"{table}{_SUFFIX}")
            if version >= _SEQUENCED:  # never behind what the copy holds (the dump has no sequence)
                conn.execute("SELECT setval('clock_seq', clock_floor(), true)")
            chain = conn.execute("DELETE FROM meta WHERE name = %s RETURNING value", (_CHAIN,)).fetchone()
            if chain is None:
                raise InvalidValueError("the backup holds no audit chain id: it is not a store's backup")
            conn.execute("INSERT INTO meta (name, value) VALUES (%s, 1)", (_INCOMPLETE,))
            fault_point("restore.loading")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    fault_point("restore.loaded")
    return int(chain[0]), state == "empty"


def _load_table(conn: Connection, schema: str, table: str, columns: Sequence[str], path: Path) -> None:
    if _columns(conn, schema, table) != list(columns):
        raise InvalidValueError(
            f"the backup's {table} columns differ from its schema version's; nothing restored"
        )
    name = sql.Identifier(schema, table)
    conn.execute(sql.SQL("DELETE FROM {}").format(name))  # the rows its migration inserted
    query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
        name, sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    with open(path, "rb") as data, conn.cursor().copy(query) as copy:
        while chunk := data.read(_CHUNK):
            copy.write(chunk)


def split_target(url: str) -> tuple[str, str]:
    """A restore target's address (without ``?schema=``) and schema (default ``cenotaph``)."""
    return split_url(url)


def restore_key(schema: str) -> int:
    """The session advisory lock a restore into ``schema`` holds (not the schema's writers' lock)."""
    return advisory_key(f"{schema}\0restore")


@contextlib.contextmanager
def restore_lock(dsn: str, schema: str) -> Iterator[None]:
    """Hold, for a whole restore, a session lock on ``schema``'s restores: a second restore
    into it meanwhile is refused (it would take the first one's loaded copy for a killed
    restore's, and replace it). The server releases it when the process dies."""
    with _connection(dsn, schema) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (restore_key(schema),)).fetchone()
        if row is None or not row[0]:
            raise InvalidValueError("another restore into this schema is running; wait for it to finish")
        yield  # closing the connection releases the lock


def drop_schema(dsn: str, schema: str, *, recreate: bool) -> None:
    """Remove what a refused restore loaded (``recreate``: the schema existed, empty, before)."""
    with _connection(dsn, schema) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        if recreate:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


@contextlib.contextmanager
def load_snapshot(backup: Path, url: str) -> Iterator[PostgresBackend]:
    """Restore's step for a PostgreSQL location: under the schema's restore lock, load the dump
    in ``backup`` into the new or empty schema ``url`` names and yield its backend (whose first
    write finishes the restore); a body that raises drops what was loaded."""
    address, schema = split_target(url)
    with restore_lock(address, schema):
        chain, existed = load_dump(address, schema, backup)
        try:
            yield RestoredBackend(address, schema=schema, chain=chain)
        except BaseException:
            drop_schema(address, schema, recreate=existed)
            raise


class RestoredBackend(PostgresBackend):
    """The backend of a just-loaded schema: its first write transaction puts the source's audit
    chain id back and removes the ``restore_incomplete`` mark, so the restored store's first
    transaction (which verifies the copy's log under that id and mints its own) is the one
    that makes the schema a store."""

    def __init__(self, dsn: str, *, schema: str, chain: int) -> None:
        super().__init__(dsn, schema=schema)
        self._chain: int | None = chain

    @contextlib.contextmanager
    def _first_write(self, locks: WriteLocks | None, ahead: Sequence[Op[Any]]) -> Iterator[PostgresTxn]:
        first = self._chain is not None  # store-wide, and nothing read ahead of its own rows
        with super().write(None if first else locks, () if first else ahead) as txn:
            if self._chain is not None:
                txn.connection.execute("DELETE FROM meta WHERE name = %s", (_INCOMPLETE,))
                txn.connection.execute(
                    "INSERT INTO meta (name, value) VALUES (%s, %s)", (_CHAIN, self._chain)
                )
            yield txn
        self._chain = None

    def write(
        self, locks: WriteLocks | None = None, ahead: Sequence[Op[Any]] = ()
    ) -> contextlib.AbstractContextManager[PostgresTxn]:
        return self._first_write(locks, ahead)


def _rollback(conn: Connection) -> None:
    if conn.broken or conn.closed:
        return
    with contextlib.suppress(psycopg.Error):
        conn.execute("ROLLBACK")
