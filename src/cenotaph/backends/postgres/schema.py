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
    "DISTRIBUTED",
    "LATEST",
    "MAX_IDENTIFIER",
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "NUMBERS",
    "REFERENCE",
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
    (
        3,
        """
        -- writers of different targets run at once (see backend.py): no row every writer updates.
        -- Versions come from a sequence (the 'clock' meta row is no longer kept), handed out in
        -- consecutive blocks by reserve_versions; owned by meta.value, so it goes with the tables
        CREATE SEQUENCE clock_seq MINVALUE 0 START 0 OWNED BY meta.value;

        -- the newest version anything in the store carries (what the sequence must never be behind)
        CREATE FUNCTION clock_floor() RETURNS bigint LANGUAGE sql STABLE
            SET search_path FROM CURRENT AS $$
            SELECT GREATEST(
                (SELECT max(value) FROM meta WHERE name = 'clock'),
                (SELECT max(version) FROM lineage), (SELECT max(version) FROM records),
                (SELECT max(version) FROM tombstones), (SELECT max(version) FROM erasures),
                (SELECT max(issued_version) FROM reauth_tokens), 0)
        $$;

        -- versions last+1 .. last+n for one transaction, never at or below floor; returns last.
        -- A sequence is not transactional: the block is reserved for good when this returns (a
        -- rolled-back transaction leaves a gap). The session lock makes the read, the setval and
        -- the block's transaction lock one step (held for this call only); the transaction lock,
        -- keyed by the block's first version in the schema's space, says the block may still
        -- commit until the transaction ends (clock_settled)
        CREATE FUNCTION reserve_versions(n bigint, floor bigint) RETURNS bigint LANGUAGE plpgsql
            SET search_path FROM CURRENT AS $$
        DECLARE
            lock_id integer := 'clock_seq'::regclass::oid::integer;
            space bigint := (hashtext(current_schema()) & 4194303)::bigint << 40;
            current bigint;
            last bigint;
        BEGIN
            PERFORM pg_advisory_lock(1667591012, lock_id);
            BEGIN
                SELECT last_value INTO current FROM clock_seq;
                IF n = 1 AND current >= floor THEN
                    -- nextval WAL-logs (and takes a transaction id) once in 32 calls, setval each
                    -- time: a lone write holds no transaction id until its COMMIT's round trip
                    last := nextval('clock_seq') - 1;
                ELSE
                    last := GREATEST(current, floor);
                    IF last + n > current THEN
                        PERFORM setval('clock_seq', last + n, true);
                    END IF;
                END IF;
                IF n > 0 THEN
                    PERFORM pg_advisory_xact_lock_shared(space | ((last + 1) & 1099511627775));
                END IF;
            EXCEPTION WHEN OTHERS THEN
                PERFORM pg_advisory_unlock(1667591012, lock_id);
                RAISE;
            END;
            PERFORM pg_advisory_unlock(1667591012, lock_id);
            RETURN last;
        END
        $$;

        -- the settled clock: the newest version v such that every version up to v is committed or
        -- never will be (no transaction holding a block at or below it is still open). Versions
        -- commit out of order here, so this, not the last version handed out, is what a survey
        -- or an index catching up may take as "everything up to here" for a snapshot begun after
        CREATE FUNCTION clock_settled() RETURNS bigint LANGUAGE plpgsql
            SET search_path FROM CURRENT AS $$
        DECLARE
            lock_id integer := 'clock_seq'::regclass::oid::integer;
            space bigint := (hashtext(current_schema()) & 4194303)::bigint;
            last bigint;
            pending bigint;
        BEGIN
            PERFORM pg_advisory_lock(1667591012, lock_id);
            BEGIN
                SELECT last_value INTO last FROM clock_seq;
                SELECT min(((l.classid::bigint << 32) | l.objid::bigint) & 1099511627775) INTO pending
                    FROM pg_locks l
                    WHERE l.locktype = 'advisory' AND l.objsubid = 1
                      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                      AND (l.classid::bigint >> 8) = space;
            EXCEPTION WHEN OTHERS THEN
                PERFORM pg_advisory_unlock(1667591012, lock_id);
                RAISE;
            END;
            PERFORM pg_advisory_unlock(1667591012, lock_id);
            RETURN LEAST(last, coalesce(pending - 1, last));
        END
        $$;
        SELECT setval('clock_seq', clock_floor(), true);

        -- a write transaction's advisory locks, one at a time in the arrays' order (the caller's
        -- one order for every transaction: no two wait for each other in a cycle)
        CREATE FUNCTION lock_targets(keys bigint[], exclusive boolean[]) RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            FOR i IN 1 .. coalesce(array_length(keys, 1), 0) LOOP
                IF exclusive[i] THEN
                    PERFORM pg_advisory_xact_lock(keys[i]);
                ELSE
                    PERFORM pg_advisory_xact_lock_shared(keys[i]);
                END IF;
            END LOOP;
        END
        $$;

        -- the change marker in stripes: a writer bumps the one of its connection (by backend pid),
        -- so disjoint writers do not queue on one row; the marker is their sum
        ALTER TABLE change_marker DROP COLUMN one;
        ALTER TABLE change_marker ADD COLUMN stripe INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE change_marker ADD PRIMARY KEY (stripe);
        ALTER TABLE change_marker ALTER COLUMN stripe DROP DEFAULT;
        INSERT INTO change_marker (stripe, value) SELECT s, 0 FROM generate_series(1, 63) AS s;
        """,
    ),
    (
        4,
        """
        -- Keys that lead with the tenant token, what a distribution by tenant (Citus) needs of
        -- every distributed table's primary and unique keys (docs/sharding.md): the token of a
        -- scope path's first segment, i.e. the scope token of its root. A BEFORE INSERT trigger
        -- fills it from what the row already names (a scope token, a record id), so no statement
        -- of the store names it. Each old key stays a plain index: lookups by it are unchanged,
        -- and it stays unique because the tenant is a function of it.
        ALTER TABLE scopes ADD COLUMN tenant BYTEA;
        WITH RECURSIVE chain(token, tenant) AS (
            SELECT token, token FROM scopes s
            WHERE s.parent IS NULL OR NOT EXISTS (SELECT 1 FROM scopes p WHERE p.token = s.parent)
            UNION ALL
            SELECT s.token, c.tenant FROM scopes s JOIN chain c ON s.parent = c.token
        )
        UPDATE scopes SET tenant = chain.tenant FROM chain WHERE scopes.token = chain.token;
        UPDATE scopes SET tenant = token WHERE tenant IS NULL;  -- a cycle cannot be; never NULL

        ALTER TABLE records ADD COLUMN tenant BYTEA;
        UPDATE records r SET tenant = coalesce(
            (SELECT s.tenant FROM scopes s WHERE s.token = r.scope_token), r.scope_token);
        ALTER TABLE lineage ADD COLUMN tenant BYTEA;
        UPDATE lineage l SET tenant = coalesce(
            (SELECT s.tenant FROM scopes s WHERE s.token = l.scope_token), l.scope_token);
        ALTER TABLE record_subjects ADD COLUMN tenant BYTEA;
        UPDATE record_subjects x SET tenant = coalesce(
            (SELECT l.tenant FROM lineage l WHERE l.record_id = x.record_id), '\\x'::bytea);
        ALTER TABLE derivations ADD COLUMN tenant BYTEA;
        UPDATE derivations x SET tenant = coalesce(
            (SELECT l.tenant FROM lineage l WHERE l.record_id = x.derived_id), '\\x'::bytea);
        ALTER TABLE vectors ADD COLUMN tenant BYTEA;
        UPDATE vectors x SET tenant = coalesce(
            (SELECT r.tenant FROM records r WHERE r.version = x.version), '\\x'::bytea);

        CREATE FUNCTION tenant_of_scope() RETURNS trigger LANGUAGE plpgsql
            SET search_path FROM CURRENT AS $$
        BEGIN
            IF NEW.tenant IS NULL THEN
                NEW.tenant := CASE WHEN NEW.parent IS NULL THEN NEW.token ELSE coalesce(
                    (SELECT tenant FROM scopes WHERE token = NEW.parent), NEW.token) END;
            END IF;
            RETURN NEW;
        END
        $$;
        CREATE FUNCTION tenant_of_scope_token() RETURNS trigger LANGUAGE plpgsql
            SET search_path FROM CURRENT AS $$
        BEGIN
            IF NEW.tenant IS NULL THEN
                NEW.tenant := coalesce(
                    (SELECT tenant FROM scopes WHERE token = NEW.scope_token), NEW.scope_token);
            END IF;
            RETURN NEW;
        END
        $$;
        CREATE FUNCTION tenant_of_record_id() RETURNS trigger LANGUAGE plpgsql
            SET search_path FROM CURRENT AS $$
        BEGIN
            IF NEW.tenant IS NULL THEN
                NEW.tenant := coalesce(
                    (SELECT tenant FROM lineage WHERE record_id = NEW.record_id), '\\x'::bytea);
            END IF;
            RETURN NEW;
        END
        $$;
        -- a derivation lives with the record derived (its source may be another tenant's)
        CREATE FUNCTION tenant_of_derived_id() RETURNS trigger LANGUAGE plpgsql
            SET search_path FROM CURRENT AS $$
        BEGIN
            IF NEW.tenant IS NULL THEN
                NEW.tenant := coalesce(
                    (SELECT tenant FROM lineage WHERE record_id = NEW.derived_id), '\\x'::bytea);
            END IF;
            RETURN NEW;
        END
        $$;
        CREATE FUNCTION tenant_of_version() RETURNS trigger LANGUAGE plpgsql
            SET search_path FROM CURRENT AS $$
        BEGIN
            IF NEW.tenant IS NULL THEN
                NEW.tenant := coalesce(
                    (SELECT tenant FROM records WHERE version = NEW.version), '\\x'::bytea);
            END IF;
            RETURN NEW;
        END
        $$;
        CREATE TRIGGER scopes_tenant BEFORE INSERT ON scopes
            FOR EACH ROW EXECUTE FUNCTION tenant_of_scope();
        CREATE TRIGGER records_tenant BEFORE INSERT ON records
            FOR EACH ROW EXECUTE FUNCTION tenant_of_scope_token();
        CREATE TRIGGER lineage_tenant BEFORE INSERT ON lineage
            FOR EACH ROW EXECUTE FUNCTION tenant_of_scope_token();
        CREATE TRIGGER record_subjects_tenant BEFORE INSERT ON record_subjects
            FOR EACH ROW EXECUTE FUNCTION tenant_of_record_id();
        CREATE TRIGGER derivations_tenant BEFORE INSERT ON derivations
            FOR EACH ROW EXECUTE FUNCTION tenant_of_derived_id();
        CREATE TRIGGER vectors_tenant BEFORE INSERT ON vectors
            FOR EACH ROW EXECUTE FUNCTION tenant_of_version();

        ALTER TABLE scopes ALTER COLUMN tenant SET NOT NULL, DROP CONSTRAINT scopes_pkey,
            ADD PRIMARY KEY (tenant, token);
        CREATE INDEX scopes_token ON scopes (token);
        ALTER TABLE records ALTER COLUMN tenant SET NOT NULL, DROP CONSTRAINT records_pkey,
            ADD PRIMARY KEY (tenant, version);
        CREATE INDEX records_version ON records (version);
        ALTER TABLE lineage ALTER COLUMN tenant SET NOT NULL, DROP CONSTRAINT lineage_pkey,
            DROP CONSTRAINT lineage_record_id_key, ADD PRIMARY KEY (tenant, version),
            ADD UNIQUE (tenant, record_id);
        CREATE INDEX lineage_version ON lineage (version);
        CREATE INDEX lineage_record ON lineage (record_id);
        ALTER TABLE record_subjects ALTER COLUMN tenant SET NOT NULL,
            DROP CONSTRAINT record_subjects_pkey, ADD PRIMARY KEY (tenant, subject_token, record_id);
        CREATE INDEX record_subjects_subject ON record_subjects (subject_token, record_id);
        ALTER TABLE derivations ALTER COLUMN tenant SET NOT NULL, DROP CONSTRAINT derivations_pkey,
            ADD PRIMARY KEY (tenant, source_id, derived_id);
        CREATE INDEX derivations_source ON derivations (source_id, derived_id);
        CREATE INDEX derivations_derived ON derivations (derived_id);
        ALTER TABLE vectors ALTER COLUMN tenant SET NOT NULL, DROP CONSTRAINT vectors_pkey,
            ADD PRIMARY KEY (tenant, version);
        CREATE INDEX vectors_version ON vectors (version);
        """,
    ),
    (
        5,
        """
        -- A record write in five statements, two messages (BEGIN, write_begin; write_record, the
        -- marker's bump, COMMIT), was twelve: each statement costs the client's driver and the
        -- server its own work, whatever it does (docs/architecture.md, "A write is two round
        -- trips"). The reads are set-returning SQL functions, which the planner inlines into the
        -- statement calling them, so the one text of each serves every statement that reads it.
        -- write_begin and write_record plan their statements once (force_generic_plan): their
        -- lookups are by key, and the planner would otherwise plan the slots' probe at every call.

        -- the change marker: the sum of its stripes (marker.py)
        CREATE FUNCTION change_marker_sum() RETURNS TABLE (value bigint) LANGUAGE sql STABLE AS $$
            SELECT coalesce(sum(c.value), 0)::bigint FROM change_marker c
        $$;
        -- a write transaction's bump: one stripe, its connection's (by backend pid)
        CREATE FUNCTION bump_marker() RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
        BEGIN
            UPDATE change_marker SET value = value + 1 WHERE stripe = mod(pg_backend_pid(), 64);
        END
        $$;
        -- the counters: every meta row but 'clock', and the clock from its sequence (schema 3)
        CREATE FUNCTION counters() RETURNS TABLE (name text, value bigint) LANGUAGE sql STABLE AS $$
            SELECT m.name, m.value FROM meta m WHERE m.name <> 'clock'
            UNION ALL SELECT 'clock', q.last_value FROM clock_seq q
        $$;
        -- each (scope, key) slot's record row, if any: its newest lineage version's (a write
        -- replaces the row it finds), by a lateral probe of lineage_slot each
        CREATE FUNCTION slot_records(scope_tokens bytea[], key_tokens bytea[]) RETURNS TABLE (
            id text, scope_token bytea, key_token bytea, version bigint, expires_at double precision,
            hidden_version bigint, wrapped bytea, epoch bigint, ciphertext bytea, vector bytea
        ) LANGUAGE sql STABLE AS $$
            SELECT r.id, r.scope_token, r.key_token, r.version, r.expires_at, r.hidden_version,
                r.wrapped, r.epoch, r.ciphertext, r.vector
            FROM unnest(scope_tokens, key_tokens) AS s(scope_token, key_token) CROSS JOIN LATERAL (
                SELECT n.version FROM lineage n
                WHERE n.scope_token = s.scope_token AND n.key_token = s.key_token
                ORDER BY n.version DESC LIMIT 1
            ) AS l JOIN records r ON r.version = l.version
        $$;

        -- a write transaction's lock_timeout (for the rest of the transaction, as SET LOCAL) and
        -- its advisory locks, taken by lock_targets one by one in the arrays' order
        CREATE FUNCTION lock_write(keys bigint[], exclusive boolean[], timeout_ms integer) RETURNS void
            LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
        BEGIN
            PERFORM set_config('lock_timeout', timeout_ms::text, true);
            PERFORM lock_targets(keys, exclusive);
        END
        $$;

        -- a record write's first round trip in one statement: lock_write, then what the write
        -- reads first, in this order, each statement of a VOLATILE function taking a snapshot of
        -- its own (READ COMMITTED), so each sees every commit before the locks were granted: the
        -- change marker (with_marker), the counters, a block of versions (reserve_versions), the
        -- slots' rows. One row per answer, told apart by kind: 'm' the marker (value), 'c' a
        -- counter (name, value), 'v' the last version before the block (value), 'r' a slot's
        -- record row (the remaining columns)
        CREATE FUNCTION write_begin(
            keys bigint[], exclusive boolean[], timeout_ms integer, with_marker boolean,
            versions bigint, floor_version bigint, scope_tokens bytea[], key_tokens bytea[]
        ) RETURNS TABLE (
            kind "char", name text, value bigint, id text, scope_token bytea, key_token bytea,
            version bigint, expires_at double precision, hidden_version bigint, wrapped bytea,
            epoch bigint, ciphertext bytea, vector bytea
        ) LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $$
        BEGIN
            PERFORM lock_write(keys, exclusive, timeout_ms);
            IF with_marker THEN
                kind := 'm';
                SELECT s.value INTO value FROM change_marker_sum() s;
                RETURN NEXT;
            END IF;
            kind := 'c';
            FOR name, value IN SELECT c.name, c.value FROM counters() c LOOP
                RETURN NEXT;
            END LOOP;
            kind := 'v';
            name := NULL;
            value := reserve_versions(versions, floor_version);
            RETURN NEXT;
            RETURN QUERY SELECT 'r'::"char", NULL::text, NULL::bigint, r.*
                FROM slot_records(scope_tokens, key_tokens) r ORDER BY r.version;
        END
        $$;

        -- one record's rows in one statement: the slot's old record row (by the id it replaces,
        -- through its lineage row), the record, its lineage row, a record_subjects row per subject
        -- token. Many records, or one derived from others, go as one statement a table instead
        CREATE FUNCTION write_record(
            replaced text, subject_list bytea[],
            r_id text, r_scope_token bytea, r_key_token bytea, r_version bigint,
            r_expires_at double precision, r_hidden_version bigint, r_wrapped bytea, r_epoch bigint,
            r_ciphertext bytea, r_vector bytea,
            l_record_id text, l_scope_token bytea, l_key_token bytea, l_version bigint, l_wrapped bytea,
            l_epoch bigint, l_subject_tokens bytea, l_subjects bytea, l_sources text,
            l_destroyed_version bigint, l_forgotten_version bigint
        ) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan
        AS $$
        BEGIN
            IF replaced IS NOT NULL THEN
                DELETE FROM records WHERE version IN (
                    SELECT o.version FROM lineage o WHERE o.record_id = replaced);
            END IF;
            INSERT INTO records (
                id, scope_token, key_token, version, expires_at, hidden_version, wrapped, epoch,
                ciphertext, vector
            ) VALUES (
                r_id, r_scope_token, r_key_token, r_version, r_expires_at, r_hidden_version, r_wrapped,
                r_epoch, r_ciphertext, r_vector
            );
            INSERT INTO lineage (
                record_id, scope_token, key_token, version, wrapped, epoch, subject_tokens, subjects,
                sources, destroyed_version, forgotten_version
            ) VALUES (
                l_record_id, l_scope_token, l_key_token, l_version, l_wrapped, l_epoch,
                l_subject_tokens, l_subjects, l_sources, l_destroyed_version, l_forgotten_version
            );
            INSERT INTO record_subjects (subject_token, record_id)
                SELECT t, l_record_id FROM unnest(subject_list) AS t ON CONFLICT DO NOTHING;
        END
        $$;
        """,
    ),
)

LATEST = MIGRATIONS[-1][0]
# What a distribution by tenant (docs/sharding.md) makes of each table: DISTRIBUTED tables lead
# every primary and unique key with ``tenant`` (migration 4) and would be spread by it, co-located;
# REFERENCE tables hold what spans tenants (a subject, a tombstone, the audit chain, an erasure
# request) or counts for the whole store, and would be copied to every node (or kept on one).
DISTRIBUTED = ("derivations", "lineage", "record_subjects", "records", "scopes", "vectors")
REFERENCE = (
    "audit", "change_marker", "consumer_events", "consumer_takes", "consumers", "erased_records",
    "erasure_progress", "erasures", "lifts", "meta", "probe_keys", "reauth_tokens", "subjects",
    "tombstones", MIGRATIONS_TABLE,
)  # fmt: skip
# Numbers, not a count: a branch may add migration N+2 before N+1 lands, so a schema may hold
# 4 and not 3; the backend applies every known number it does not hold, in order.
NUMBERS = frozenset(number for number, _ in MIGRATIONS)


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
