"""Schema migrations as numbered data. Every name column holds an HMAC token (W4); every
content column holds AES-GCM ciphertext (S1); nothing here is plaintext personal data."""

from __future__ import annotations

import sqlite3


def statements(script: str) -> list[str]:
    """The statements of a migration script, in order; ``--`` comment lines are dropped first,
    so a comment may hold any text (a ';' in one would otherwise cut a statement). A ';' inside a
    statement (a trigger's body) does not end it: pieces are joined until SQLite calls them complete."""
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("--"))
    found: list[str] = []
    pending = ""
    for part in code.split(";"):
        pending = f"{pending};{part}" if pending else part
        if pending.strip() and sqlite3.complete_statement(pending + ";"):
            found.append(pending.strip())
            pending = ""
    if pending.strip():
        found.append(pending.strip())
    return found


MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        INSERT INTO meta VALUES ('clock', 0), ('forget_epoch', 0);

        -- one row per scope path ever written, wrapped is NULL once the scope key is destroyed
        CREATE TABLE scopes (
            token BLOB PRIMARY KEY, parent BLOB, wrapped BLOB, epoch INTEGER,
            destroyed_version INTEGER
        ) WITHOUT ROWID;
        CREATE INDEX scopes_parent ON scopes(parent);

        CREATE TABLE subjects (
            token BLOB PRIMARY KEY, wrapped BLOB, epoch INTEGER, destroyed_version INTEGER
        ) WITHOUT ROWID;

        -- live and hidden records, at most one per (scope, key) slot
        -- keyed by version (unique: one clock tick per write), so catching up by version is a
        -- rowid range scan and each write touches one B-tree fewer
        CREATE TABLE records (
            version INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, scope_token BLOB NOT NULL,
            key_token BLOB NOT NULL, expires_at REAL, hidden_version INTEGER, hidden_mode TEXT,
            wrapped BLOB, epoch INTEGER, ciphertext BLOB, vector BLOB
        );
        CREATE UNIQUE INDEX records_slot ON records(scope_token, key_token);
        CREATE INDEX records_expiry ON records(expires_at) WHERE expires_at IS NOT NULL;
        CREATE INDEX records_hidden ON records(hidden_version) WHERE hidden_version IS NOT NULL;

        -- one row per record ever written: its lineage key outlives operational expiry (W3)
        CREATE TABLE lineage (
            record_id TEXT PRIMARY KEY, scope_token BLOB NOT NULL, key_token BLOB NOT NULL,
            version INTEGER NOT NULL, wrapped BLOB, epoch INTEGER, subject_tokens BLOB NOT NULL,
            subjects BLOB, sources TEXT NOT NULL, destroyed_version INTEGER
        ) WITHOUT ROWID;
        CREATE INDEX lineage_slot ON lineage(scope_token, key_token);

        CREATE TABLE record_subjects (
            subject_token BLOB NOT NULL, record_id TEXT NOT NULL,
            PRIMARY KEY (subject_token, record_id)
        ) WITHOUT ROWID;

        CREATE TABLE derivations (
            source_id TEXT NOT NULL, derived_id TEXT NOT NULL, PRIMARY KEY (source_id, derived_id)
        ) WITHOUT ROWID;

        CREATE TABLE tombstones (
            target BLOB NOT NULL, version INTEGER NOT NULL, kind TEXT NOT NULL,
            request_id TEXT NOT NULL, PRIMARY KEY (target, version)
        ) WITHOUT ROWID;

        CREATE TABLE lifts (
            target BLOB NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (target, version)
        ) WITHOUT ROWID;

        CREATE TABLE reauth_tokens (
            digest BLOB PRIMARY KEY, kind TEXT NOT NULL, target BLOB NOT NULL,
            issued_version INTEGER NOT NULL, consumed_version INTEGER
        ) WITHOUT ROWID;

        CREATE TABLE erasures (
            id TEXT PRIMARY KEY, mode TEXT NOT NULL, target_kind TEXT NOT NULL,
            target BLOB NOT NULL, version INTEGER NOT NULL, requested_at TEXT NOT NULL,
            state TEXT NOT NULL, layers TEXT NOT NULL, plan TEXT NOT NULL, probes BLOB,
            horizon TEXT, horizon_reason TEXT, verified_at TEXT, scan TEXT
        );

        CREATE TABLE audit (seq INTEGER PRIMARY KEY, entry TEXT NOT NULL);
        """,
    ),
    (
        2,
        """
        -- ids (random, content-free) of records whose rows a compliance purge removed, so a late
        -- write derived from one is still refused with DerivedFromForgottenError
        CREATE TABLE erased_records (record_id TEXT PRIMARY KEY, version INTEGER NOT NULL) WITHOUT ROWID;
        """,
    ),
    (
        3,
        """
        -- any forget (operational too) marks the lineage row, so a write derived from a
        -- forgotten record is refused even after purge reclaimed the record row
        ALTER TABLE lineage ADD COLUMN forgotten_version INTEGER;
        """,
    ),
    (
        4,
        """
        -- a token from reauthorize(scope[, key], subject=...) names its scope (or key) as kind and
        -- target and the subject here (rows of kind 'subject' predate it and name no scope)
        ALTER TABLE reauth_tokens ADD COLUMN subject BLOB;
        """,
    ),
    (
        5,
        """
        -- the key sealing a pending request's probes, wrapped by the KEK epoch current at the
        -- forget (erasure.planning.probes), deleted when the request verifies
        CREATE TABLE probe_keys (
            request_id TEXT PRIMARY KEY, wrapped BLOB NOT NULL, epoch INTEGER NOT NULL
        ) WITHOUT ROWID;
        """,
    ),
    (
        6,
        """
        -- the search index's vectors at rest, one sealed cell per live record, keyed like the record by
        -- version (index.atrest: sealed under a key derived from the record's own keys). A cell goes with
        -- its record: when the row is deleted (purge, expiry, overwrite) and as soon as the record is
        -- hidden or its key destroyed (a forget), in the same statement.
        CREATE TABLE IF NOT EXISTS vectors (version INTEGER PRIMARY KEY, cell BLOB NOT NULL);
        CREATE TRIGGER IF NOT EXISTS vectors_follow_delete AFTER DELETE ON records
        BEGIN
            DELETE FROM vectors WHERE version = OLD.version;
        END;
        CREATE TRIGGER IF NOT EXISTS vectors_follow_forget AFTER UPDATE OF wrapped, hidden_version ON records
        WHEN NEW.wrapped IS NULL OR NEW.hidden_version IS NOT NULL
        BEGIN
            DELETE FROM vectors WHERE version = OLD.version;
        END;
        """,
    ),
    (
        7,
        """
        -- a large request's cursors, apart from its row (which holds its plan, every id, and is
        -- rewritten whole by any update): a forget that commits its tombstones first and hides
        -- and destroys its records in chunks after (erasure.purge.chunks) counts the plan's record ids
        -- applied (NULL once all are); a purge removing its rows in chunks counts the records done
        -- and the rows removed. No row: nothing in progress (every request from before this
        -- schema was applied whole, and purged in one transaction)
        CREATE TABLE IF NOT EXISTS erasure_progress (
            request_id TEXT PRIMARY KEY, applied INTEGER, purged INTEGER NOT NULL DEFAULT 0,
            rows_removed INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        """,
    ),
    (
        8,
        """
        -- the lean record layout: every row of records and lineage keyed by its version, in the
        -- order it was written (an insert appends; no random-order B-tree holds a whole row); a
        -- record id is indexed once (lineage.record_id, which outlives the record row) and a name
        -- once (lineage_slot): a records row is found through its lineage row, and a slot's record
        -- row is its newest lineage version's (a write replaces the row it finds)
        CREATE TABLE records_v8 (
            version INTEGER PRIMARY KEY, id TEXT NOT NULL, scope_token BLOB NOT NULL,
            key_token BLOB NOT NULL, expires_at REAL, hidden_version INTEGER, hidden_mode TEXT,
            wrapped BLOB, epoch INTEGER, ciphertext BLOB, vector BLOB
        );
        INSERT INTO records_v8 (version, id, scope_token, key_token, expires_at, hidden_version, hidden_mode,
            wrapped, epoch, ciphertext, vector)
            SELECT version, id, scope_token, key_token, expires_at, hidden_version, hidden_mode, wrapped,
            epoch, ciphertext, vector FROM records ORDER BY version;
        DROP TABLE records;
        ALTER TABLE records_v8 RENAME TO records;
        CREATE INDEX records_expiry ON records(expires_at) WHERE expires_at IS NOT NULL;
        CREATE INDEX records_hidden ON records(hidden_version) WHERE hidden_version IS NOT NULL;
        CREATE TRIGGER vectors_follow_delete AFTER DELETE ON records
        BEGIN
            DELETE FROM vectors WHERE version = OLD.version;
        END;
        CREATE TRIGGER vectors_follow_forget AFTER UPDATE OF wrapped, hidden_version ON records
        WHEN NEW.wrapped IS NULL OR NEW.hidden_version IS NOT NULL
        BEGIN
            DELETE FROM vectors WHERE version = OLD.version;
        END;

        CREATE TABLE lineage_v8 (
            version INTEGER PRIMARY KEY, record_id TEXT NOT NULL UNIQUE, scope_token BLOB NOT NULL,
            key_token BLOB NOT NULL, wrapped BLOB, epoch INTEGER, subject_tokens BLOB NOT NULL,
            subjects BLOB, sources TEXT NOT NULL, destroyed_version INTEGER, forgotten_version INTEGER
        );
        INSERT INTO lineage_v8 (version, record_id, scope_token, key_token, wrapped, epoch, subject_tokens,
            subjects, sources, destroyed_version, forgotten_version)
            SELECT version, record_id, scope_token, key_token, wrapped, epoch, subject_tokens, subjects,
            sources, destroyed_version, forgotten_version FROM lineage ORDER BY version;
        DROP TABLE lineage;
        ALTER TABLE lineage_v8 RENAME TO lineage;
        CREATE INDEX lineage_slot ON lineage(scope_token, key_token);
        """,
    ),
    (
        9,
        """
        -- downstream consumers (cenotaph.consumers): who they are, what each took (record ids and
        -- versions, never a value), and what each was asked to delete by an erasure, with its own
        -- acknowledgement (a JSON statement it gave, bounded and validated before it is stored)
        CREATE TABLE IF NOT EXISTS consumers (
            id TEXT PRIMARY KEY, name TEXT NOT NULL, ack_days INTEGER NOT NULL,
            registered_at TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS consumer_takes (
            record_id TEXT NOT NULL, consumer_id TEXT NOT NULL, version INTEGER NOT NULL,
            taken_at TEXT NOT NULL, PRIMARY KEY (record_id, consumer_id)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS consumer_events (
            consumer_id TEXT NOT NULL, request_id TEXT NOT NULL, records TEXT NOT NULL,
            created_at TEXT NOT NULL, deadline TEXT NOT NULL, acknowledged_at TEXT, evidence TEXT,
            PRIMARY KEY (consumer_id, request_id)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS consumer_events_request ON consumer_events(request_id);
        """,
    ),
)
