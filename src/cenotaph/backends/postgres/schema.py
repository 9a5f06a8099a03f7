"""PostgreSQL schema migrations as numbered data, applied inside one PostgreSQL schema per store.

The tables and columns are SQLite schema 8's (``backends/sqlite/schema.py``): every name column
holds an HMAC token (W4), every content column AES-GCM ciphertext (S1). PostgreSQL's migrations
are numbered on their own, from 1, which already is the lean layout of SQLite's schema 8; the
applied numbers are rows of ``schema_migrations``. Each script runs with ``search_path`` set to
the store's schema, so it names no schema itself.
"""

from __future__ import annotations

import re

from psycopg import sql

from ...errors import InvalidValueError
from ...validation import echo
from .. import POSTGRES_DEFAULT_SCHEMA as DEFAULT_SCHEMA

__all__ = [
    "DEFAULT_SCHEMA",
    "LATEST",
    "MAX_IDENTIFIER",
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "check_schema_name",
    "create_schema",
    "created_objects",
    "set_search_path",
]

MIGRATIONS_TABLE = "schema_migrations"
MAX_IDENTIFIER = 63  # bytes; PostgreSQL truncates longer names, so two stores could share one schema
# What psql and every SQL tool mean by an unquoted name: PostgreSQL folds those to lower case,
# so a store's schema is lower case or it is a name only quoting reaches ("Memories" and
# memories would be two schemas here and one in a psql session). No "$": the SQL standard
# does not allow it, and in a shell it starts a variable.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]*")

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
        INSERT INTO meta (name, value) VALUES ('clock', 0), ('forget_epoch', 0);

        -- bumped by every write transaction, read by every process before it trusts its caches
        -- (what SQLite's PRAGMA data_version tells a connection); one row
        CREATE TABLE change_marker (
            one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), value BIGINT NOT NULL
        );
        INSERT INTO change_marker (value) VALUES (0);

        -- one row per scope path ever written, wrapped is NULL once the scope key is destroyed
        CREATE TABLE scopes (
            token BYTEA PRIMARY KEY, parent BYTEA, wrapped BYTEA, epoch BIGINT, destroyed_version BIGINT
        );
        CREATE INDEX scopes_parent ON scopes (parent);

        CREATE TABLE subjects (
            token BYTEA PRIMARY KEY, wrapped BYTEA, epoch BIGINT, destroyed_version BIGINT
        );

        -- live and hidden records, at most one per (scope, key) slot, keyed by version (one clock
        -- tick per write: inserts append); found through lineage, which indexes ids and slots once
        CREATE TABLE records (
            version BIGINT PRIMARY KEY, id TEXT NOT NULL, scope_token BYTEA NOT NULL,
            key_token BYTEA NOT NULL, expires_at DOUBLE PRECISION, hidden_version BIGINT,
            hidden_mode TEXT, wrapped BYTEA, epoch BIGINT, ciphertext BYTEA, vector BYTEA
        );
        CREATE INDEX records_expiry ON records (expires_at) WHERE expires_at IS NOT NULL;
        CREATE INDEX records_hidden ON records (hidden_version) WHERE hidden_version IS NOT NULL;

        -- one row per record ever written: its lineage key outlives operational expiry (W3).
        -- lineage_slot ends with version, as SQLite's does implicitly (its rowid): a slot's newest
        -- version is one index probe
        CREATE TABLE lineage (
            version BIGINT PRIMARY KEY, record_id TEXT NOT NULL UNIQUE, scope_token BYTEA NOT NULL,
            key_token BYTEA NOT NULL, wrapped BYTEA, epoch BIGINT, subject_tokens BYTEA NOT NULL,
            subjects BYTEA, sources TEXT NOT NULL, destroyed_version BIGINT, forgotten_version BIGINT
        );
        CREATE INDEX lineage_slot ON lineage (scope_token, key_token, version);

        CREATE TABLE record_subjects (
            subject_token BYTEA NOT NULL, record_id TEXT NOT NULL, PRIMARY KEY (subject_token, record_id)
        );

        CREATE TABLE derivations (
            source_id TEXT NOT NULL, derived_id TEXT NOT NULL, PRIMARY KEY (source_id, derived_id)
        );

        CREATE TABLE tombstones (
            target BYTEA NOT NULL, version BIGINT NOT NULL, kind TEXT NOT NULL,
            request_id TEXT NOT NULL, PRIMARY KEY (target, version)
        );

        CREATE TABLE lifts (target BYTEA NOT NULL, version BIGINT NOT NULL, PRIMARY KEY (target, version));

        -- subject: a token from reauthorize(scope[, key], subject=...) names it here
        CREATE TABLE reauth_tokens (
            digest BYTEA PRIMARY KEY, kind TEXT NOT NULL, target BYTEA NOT NULL,
            issued_version BIGINT NOT NULL, consumed_version BIGINT, subject BYTEA
        );

        CREATE TABLE erasures (
            id TEXT PRIMARY KEY, mode TEXT NOT NULL, target_kind TEXT NOT NULL, target BYTEA NOT NULL,
            version BIGINT NOT NULL, requested_at TEXT NOT NULL, state TEXT NOT NULL, layers TEXT NOT NULL,
            plan TEXT NOT NULL, probes BYTEA, horizon TEXT, horizon_reason TEXT, verified_at TEXT, scan TEXT
        );

        CREATE TABLE audit (seq BIGINT PRIMARY KEY, entry TEXT NOT NULL);

        -- ids (random, content-free) of records a compliance purge removed, so a late write
        -- derived from one is still refused
        CREATE TABLE erased_records (record_id TEXT PRIMARY KEY, version BIGINT NOT NULL);

        -- the key sealing a pending request's probes, wrapped by the KEK epoch current at the forget
        CREATE TABLE probe_keys (request_id TEXT PRIMARY KEY, wrapped BYTEA NOT NULL, epoch BIGINT NOT NULL);

        -- a large request's cursors, apart from its row (see SQLite schema 7)
        CREATE TABLE erasure_progress (
            request_id TEXT PRIMARY KEY, applied BIGINT, purged BIGINT NOT NULL DEFAULT 0,
            rows_removed BIGINT NOT NULL DEFAULT 0
        );

        -- the search index's sealed vectors, one cell per live record keyed by its version; a cell
        -- goes with its record in the same statement: when the row is deleted, and as soon as the
        -- record is hidden or its key destroyed
        CREATE TABLE vectors (version BIGINT PRIMARY KEY, cell BYTEA NOT NULL);
        CREATE FUNCTION vectors_follow_record() RETURNS trigger LANGUAGE plpgsql
            SET search_path FROM CURRENT AS $$
        BEGIN
            DELETE FROM vectors WHERE version = OLD.version;
            RETURN NULL;
        END
        $$;
        CREATE TRIGGER vectors_follow_delete AFTER DELETE ON records
            FOR EACH ROW EXECUTE FUNCTION vectors_follow_record();
        CREATE TRIGGER vectors_follow_forget AFTER UPDATE OF wrapped, hidden_version ON records
            FOR EACH ROW WHEN (NEW.wrapped IS NULL OR NEW.hidden_version IS NOT NULL)
            EXECUTE FUNCTION vectors_follow_record();
        """,
    ),
    (
        2,
        """
        -- downstream consumers (see SQLite schema 9)
        CREATE TABLE consumers (
            id TEXT PRIMARY KEY, name TEXT NOT NULL, ack_days BIGINT NOT NULL,
            registered_at TEXT NOT NULL
        );
        CREATE TABLE consumer_takes (
            record_id TEXT NOT NULL, consumer_id TEXT NOT NULL, version BIGINT NOT NULL,
            taken_at TEXT NOT NULL, PRIMARY KEY (record_id, consumer_id)
        );
        CREATE TABLE consumer_events (
            consumer_id TEXT NOT NULL, request_id TEXT NOT NULL, records TEXT NOT NULL,
            created_at TEXT NOT NULL, deadline TEXT NOT NULL, acknowledged_at TEXT, evidence TEXT,
            PRIMARY KEY (consumer_id, request_id)
        );
        CREATE INDEX consumer_events_request ON consumer_events (request_id);
        """,
    ),
)

LATEST = MIGRATIONS[-1][0]


def check_schema_name(name: object) -> str:
    """``name`` if it can be a store's schema: an unquoted PostgreSQL identifier in lower case
    (a letter or ``_``, then letters, digits and ``_``), at most 63 bytes, not ``pg_...``
    (PostgreSQL reserves those); otherwise InvalidValueError saying what to write."""
    if not isinstance(name, str) or not name:
        raise InvalidValueError("the PostgreSQL schema must be a non-empty name, e.g. ?schema=memories")
    if len(name.encode()) > MAX_IDENTIFIER:
        raise InvalidValueError(f"the PostgreSQL schema name must be at most {MAX_IDENTIFIER} bytes")
    if not _SCHEMA_NAME.fullmatch(name):
        raise InvalidValueError(
            f"the PostgreSQL schema name {echo(name)} is not a plain identifier: use lower-case letters, "
            "digits and '_', starting with a letter or '_' (e.g. ?schema=memories); PostgreSQL folds "
            "unquoted names to lower case"
        )
    if name.startswith("pg_"):
        raise InvalidValueError(
            f"the PostgreSQL schema name {echo(name)} starts with 'pg_', which PostgreSQL reserves; "
            "choose another"
        )
    return name


def created_objects() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tables and functions the migrations create (the migrations table included), read from
    the scripts themselves: what removing a store that was never used drops."""
    scripts = "\n".join(script for _, script in MIGRATIONS)
    tables = (*re.findall(r"CREATE TABLE (\w+)", scripts), MIGRATIONS_TABLE)
    return tables, tuple(re.findall(r"CREATE FUNCTION (\w+)", scripts))


def create_schema(schema: str) -> sql.Composed:
    """The statements that make ``schema`` and its migrations table exist (idempotent)."""
    return sql.SQL(
        "CREATE SCHEMA IF NOT EXISTS {s}; CREATE TABLE IF NOT EXISTS {s}.{t} "
        "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    ).format(s=sql.Identifier(schema), t=sql.Identifier(MIGRATIONS_TABLE))


def set_search_path(schema: str, *, local: bool = False) -> sql.Composed:
    """``SET [LOCAL] search_path`` to the store's schema alone (so no other schema's table of the
    same name is ever meant)."""
    return sql.SQL("SET {local}search_path TO {s}").format(
        local=sql.SQL("LOCAL " if local else ""), s=sql.Identifier(schema)
    )
