"""The ``pages`` layer of a PostgreSQL store: after a purge its tables are VACUUMed and every page
of them, their TOAST tables and indexes is read raw (pageinspect) and searched for the request's
probes. The page scan finds a probe planted in a live row (its positive control), finds none once
the row is forgotten and purged, and a role that may not read pages gets the gap named."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from cenotaph import LocalKeyring, Store
from cenotaph.backends import ops
from cenotaph.backends.base import LayerEntry, dump_layers
from cenotaph.backends.physical import PageScan
from cenotaph.backends.postgres import open_postgres
from cenotaph.backends.postgres.health import server_checks
from cenotaph.backends.postgres.pages import PAGE_READER, grant_page_scan
from cenotaph.errors import ErasureNotProvableError
from cenotaph.model import LayerState

from .conftest import drop_schema

SCOPE = "tenant:acme/user:alice"


def _ciphertext(dsn: str, schema: str, record_id: str) -> bytes:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT ciphertext FROM {}.records WHERE id=%s").format(sql.Identifier(schema)),
            (record_id,),
        ).fetchone()
    assert row is not None and isinstance(row[0], bytes)
    return row[0]


def _scan_pages(store: Store, probes: list[bytes]) -> PageScan:
    scan = store._backend.physical.scan_pages(probes)
    assert scan is not None  # PostgreSQL's pages are not files the verifying scan reads
    return scan


def test_the_page_scan_finds_a_live_row_then_none_after_forget_and_purge(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    store = Store(
        open_postgres(pg_dsn, schema=pg_schema), LocalKeyring(tmp_path / "keyring"), auto_purge="off"
    )
    try:
        gone = store.write(SCOPE, "diet", "vegetarian, and a long enough note to seal " * 4)
        kept = store.write(SCOPE, "city", "Lisbon, with a note of its own to keep " * 4)
        gone_probe = _ciphertext(pg_dsn, pg_schema, gone.id)[8:40]
        kept_probe = _ciphertext(pg_dsn, pg_schema, kept.id)[8:40]

        live = _scan_pages(store, [gone_probe, kept_probe])  # the positive control: a live row
        assert live.gap is None and live.matched_probes == {gone_probe, kept_probe}
        assert "records" in live.matched_relations
        assert live.tables > 0 and live.pages > 0 and live.relations > live.tables  # with indexes

        request = store.forget(SCOPE, "diet")
        assert _scan_pages(store, [gone_probe]).matched_probes == {gone_probe}  # shredded, not purged
        store.purge()
        status = request.status()
        assert status.state == "verified", status.gaps
        pages = status.layers["pages"]
        assert pages.state == "done" and pages.evidence["matches"] == 0
        assert pages.evidence["pages"] > 0 and pages.evidence["probes"] > 0
        assert pages.evidence["tables"] == live.tables

        after = _scan_pages(store, [gone_probe, kept_probe])
        assert after.gap is None and after.matched_probes == {kept_probe}  # the kept row is still found
        assert store.confirm_erasure(request.id).layers["pages"].state == "done"
    finally:
        store.close()


@pytest.fixture
def limited_role(pg_dsn: str) -> Iterator[str]:
    """A throwaway login role that may create schemas in the test database, and nothing more;
    its address. Dropped (with what it owns) after the test."""
    role = f"r_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        database = str(conn.info.dbname)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(*map(sql.Identifier, (database, role)))
        )
    try:
        yield psycopg.conninfo.make_conninfo(pg_dsn, user=role)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_role_that_may_not_read_pages_gets_the_gap_named(
    pg_dsn: str, pg_schema: str, limited_role: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # whether or not pageinspect is installed
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (
            True,
        )
    store = Store(
        open_postgres(limited_role, schema=pg_schema), LocalKeyring(tmp_path / "keyring"), auto_purge="off"
    )
    try:
        store.write(SCOPE, "diet", "vegetarian, and a long enough note to seal " * 4)
        request = store.forget(SCOPE, "diet")
        store.purge()
        status = request.status()
        pages = status.layers["pages"]
        assert pages.state == "pending"
        assert "may not" in pages.evidence["gap"] and "superuser" in pages.evidence["release"]
        assert status.state != "verified"
        assert any(g.startswith("layer 'pages' is pending") for g in status.gaps)
        with pytest.raises(ErasureNotProvableError, match="pageinspect"):
            store.confirm_erasure(request.id)
        doctor = {c.name: c for c in server_checks(limited_role, pg_schema, [])}["postgresql page scan"]
        assert doctor.status == "warn" and "superuser" in doctor.detail
    finally:
        store.close()
        drop_schema(pg_dsn, pg_schema)


def _role(dsn: str) -> str:
    return str(conninfo_to_dict(dsn)["user"])


def test_a_role_granted_the_page_reader_verifies_with_its_positive_control(
    pg_dsn: str, pg_schema: str, limited_role: str, tmp_path: Path
) -> None:
    store = Store(
        open_postgres(limited_role, schema=pg_schema), LocalKeyring(tmp_path / "keyring"), auto_purge="off"
    )
    try:
        gone = store.write(SCOPE, "diet", "vegetarian, and a long enough note to seal " * 4)
        kept = store.write(SCOPE, "city", "Lisbon, with a note of its own to keep " * 4)
        gone_probe = _ciphertext(pg_dsn, pg_schema, gone.id)[8:40]
        kept_probe = _ciphertext(pg_dsn, pg_schema, kept.id)[8:40]
        assert _scan_pages(store, [gone_probe]).gap is not None  # before the grant: the gap, as before
        with pytest.raises(PermissionError, match="superuser"):  # only a superuser may install it
            grant_page_scan(limited_role, pg_schema, _role(limited_role))

        grant_page_scan(pg_dsn, pg_schema, _role(limited_role))
        live = _scan_pages(store, [gone_probe, kept_probe])  # the positive control: a live row
        assert live.gap is None and live.matched_probes == {gone_probe, kept_probe}
        assert "records" in live.matched_relations and live.relations > live.tables  # TOAST, indexes

        request = store.forget(SCOPE, "diet")
        store.purge()
        status = request.status()
        assert status.state == "verified", status.gaps
        pages = status.layers["pages"]
        assert pages.state == "done" and pages.evidence["matches"] == 0 and pages.evidence["pages"] > 0
        assert _scan_pages(store, [gone_probe, kept_probe]).matched_probes == {kept_probe}
        doctor = {c.name: c for c in server_checks(limited_role, pg_schema, [])}["postgresql page scan"]
        assert doctor.status == "ok" and PAGE_READER in doctor.detail
    finally:
        store.close()
        drop_schema(pg_dsn, pg_schema)


def test_the_page_reader_refuses_other_schemas_and_roles_without_execute(
    pg_dsn: str, pg_schema: str, limited_role: str, tmp_path: Path
) -> None:
    other = f"{pg_schema}_other"
    stranger = f"s_{uuid.uuid4().hex[:12]}"
    store = Store(
        open_postgres(limited_role, schema=pg_schema), LocalKeyring(tmp_path / "keyring"), auto_purge="off"
    )
    try:
        store.write(SCOPE, "diet", "vegetarian, and a long enough note to seal " * 4)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(other)))
            conn.execute(sql.SQL("CREATE TABLE {} (secret text)").format(sql.Identifier(other, "t")))
            conn.execute(sql.SQL("INSERT INTO {} VALUES ('x')").format(sql.Identifier(other, "t")))
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(stranger)))
            conn.execute(
                sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                    sql.Identifier(pg_schema), sql.Identifier(stranger)
                )
            )
            oids = [  # the attack names a relation by its oid: no lookup of a schema it may not use
                int(str(r[0]))
                for r in conn.execute(
                    "SELECT c.oid FROM pg_class c WHERE c.oid IN (%s::regclass, %s::regclass, %s::regclass) "
                    "UNION SELECT reltoastrelid FROM pg_class WHERE oid = %s::regclass",
                    (
                        "pg_catalog.pg_authid",
                        "pg_catalog.pg_authid_rolname_index",
                        f"{other}.t",
                        f"{other}.t",
                    ),
                ).fetchall()
            ]
            own = int(str(conn.execute("SELECT %s::regclass::oid", (f"{pg_schema}.records",)).fetchone()[0]))  # type: ignore[index]
        assert len(oids) == 4
        grant_page_scan(pg_dsn, pg_schema, _role(limited_role))
        reader = sql.SQL("SELECT length({}(%s::oid::regclass, 0))").format(
            sql.Identifier(pg_schema, PAGE_READER)
        )
        with psycopg.connect(limited_role, autocommit=True) as conn:
            assert conn.execute(reader, (own,)).fetchone() == (8192,)  # its own schema's page: read
            for target in oids:
                with pytest.raises(pg_errors.InsufficientPrivilege, match="reads only the pages of schema"):
                    conn.execute(reader, (target,))
        stranger_dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=stranger)
        with (
            psycopg.connect(stranger_dsn, autocommit=True) as conn,
            pytest.raises(pg_errors.InsufficientPrivilege, match="permission denied for function"),
        ):
            conn.execute(reader, (own,))
    finally:
        store.close()
        drop_schema(pg_dsn, pg_schema)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(other)))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(stranger)))


def test_a_request_made_when_the_replica_layer_was_named_wal_still_verifies(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    store = Store(
        open_postgres(pg_dsn, schema=pg_schema), LocalKeyring(tmp_path / "keyring"), auto_purge="off"
    )
    try:
        store.write(SCOPE, "diet", "vegetarian, and a long enough note to seal " * 4)
        request = store.forget(SCOPE, "diet")
        with store._backend.write() as txn:  # the layers such a request was given at its forget
            row = txn.run(ops.Erasure(request.id))
            assert row is not None
            layers = {n: e for n, e in row.layer_entries.items() if n not in ("replicas", "pages")}
            layers["wal"] = LayerEntry(LayerState.PENDING)
            txn.run(ops.UpdateErasure(request.id, {"layers": dump_layers(layers)}))
        assert "wal" in request.status().layers
        store.purge()
        status = request.status()
        assert status.state == "verified", status.gaps
        assert "wal" not in status.layers and status.layers["replicas"].state == "done"
    finally:
        store.close()
