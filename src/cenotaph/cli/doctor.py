"""``cenotaph doctor``: check the data directory (or the PostgreSQL store), the keyring and the
backend's erasure settings (the engine's checks are the backend's: ``DirectoryFormat.settings_checks``
and friends, and for PostgreSQL ``backends.postgres.health``)."""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import asdict
from typing import Any

import click
from rich.console import RenderableType
from rich.text import Text

from cenotaph import Store
from cenotaph.errors import CenotaphError
from cenotaph.model import ErasureState, Mode
from cenotaph.operations import (
    POSTGRES_DEFAULT_SCHEMA,
    Check,
    directory_format,
    keyring_from_env,
    postgres_schema_state,
    postgres_server_checks,
    postgres_version_checks,
)

from .options import DataLocation, data_option, open_existing_store, root_of_trust_warning
from .output import emit, message_cell, new_table, table_option
from .spelling import speak_cli

__all__ = ["doctor"]

_READS_ONLY = "reads work; writes, forgets, purges and key rotation are refused"


@click.command()
@data_option
@table_option
@click.pass_context
def doctor(ctx: click.Context, data: DataLocation, table: bool) -> None:
    """Check the setup; exit 1 if a check fails.

    A warning does not fail. Checks: the data directory exists and is writable; the keyring
    directory is 0700 and its files 0600; whether the keyring is inside the data directory (S8);
    the keyring opens; SQLite reads secure_delete back as 1 on a fresh connection and runs in WAL
    mode; the database passes SQLite's quick_check; the audit chain matches the heads anchored in
    the key provider; the database agrees with the key provider's ledger (tombstones, hidden
    marks, destroyed keys, lifts, tokens, request states, sealed versions and expiries); erasure
    requests not yet verified (a warning with their gaps and next step; a failure if one cannot
    verify by purging); KEK epochs held back from rotation, by whom and what releases them (a
    failure if the holder is such a request); Python and SQLite versions.

    On a PostgreSQL store (--data postgresql://...): the connection; that the schema exists and
    holds a store; the role's privileges on the schema and its tables; each replica listed in
    CENOTAPH_REPLICAS (reachable, replaying, how far behind); when VACUUM is due (dead tuples and
    the last vacuum of the store's tables); then the keyring and store checks above.
    """
    checks = _postgres_doctor(data) if data.url is not None else _directory_doctor(data)
    ok = all(c.status != "fail" for c in checks)
    doc = {"ok": ok, "data": data.shown, "checks": [asdict(c) for c in checks]}
    emit(doc, table=table, render=_checks_table)
    if not ok:
        ctx.exit(1)


def _directory_doctor(data: DataLocation) -> list[Check]:
    # the engine's checks get the absolute directory: a relative one cannot become a file: URI
    assert data.path is not None and data.directory is not None
    engine = directory_format()
    checks = [*_data_checks(data), *_keyring_checks(data), *engine.settings_checks(data.directory)]
    if all(c.status != "fail" for c in checks) and engine.holds_store(data.directory):
        checks.append(engine.integrity_check(data.directory))
        checks += _store_checks(data)
    checks.append(Check("python", "ok", sys.version.split()[0]))
    return checks + engine.version_checks()


def _postgres_doctor(data: DataLocation) -> list[Check]:
    assert data.url is not None
    checks = _schema_checks(data)
    if all(c.status != "fail" for c in checks):
        try:
            listed = dict.fromkeys([*data.replicas(), *data.read_replicas()])
            checks += postgres_server_checks(data.url, list(listed))
        except CenotaphError as exc:
            checks.append(Check("postgresql server", "fail", " ".join(str(exc).split())))
    checks += _keyring_checks(data)
    if all(c.status != "fail" for c in checks):
        checks += _store_checks(data)
    checks.append(Check("python", "ok", sys.version.split()[0]))
    versions = postgres_version_checks()
    return checks + versions


def _schema_checks(data: DataLocation) -> list[Check]:
    """The server answers, and the URL's schema holds a store (only `cenotaph init` makes one)."""
    assert data.url is not None
    try:
        state = postgres_schema_state(data.url)
    except CenotaphError as exc:
        return [Check("postgresql connection", "fail", " ".join(str(exc).split()))]
    server = f"{state.server} as {state.user!r}, database {state.database!r}, PostgreSQL {state.version}"
    if state.in_recovery:
        connection = Check(
            "postgresql connection",
            "fail",
            f"{server} is in recovery (a standby): it accepts no writes; point --data at the primary",
        )
    else:
        connection = Check("postgresql connection", "ok", server)
    init = f"`cenotaph init --data {data.given}`"
    default = f"a URL without ?schema= names schema {POSTGRES_DEFAULT_SCHEMA!r}"
    if not state.exists:
        schema = Check("postgresql schema", "fail", f"{state.where} does not exist ({default}); run {init}")
    elif not state.holds_store:
        schema = Check(
            "postgresql schema", "fail", f"{state.where} holds no cenotaph store ({default}); run {init}"
        )
    elif state.restoring:
        schema = Check(
            "postgresql schema",
            "fail",
            f"{state.where} holds a restore that did not finish; run the same `cenotaph restore` again",
        )
    else:
        schema = Check(
            "postgresql schema", "ok", f"{state.where} holds a cenotaph store (migration {state.migration})"
        )
    return [connection, schema]


def _data_checks(data: DataLocation) -> list[Check]:
    assert data.path is not None and data.directory is not None
    given, directory = data.path, data.directory
    if not directory.is_dir():
        return [
            Check("data directory", "fail", f"{given} does not exist; run `cenotaph init --data {given}`")
        ]
    if not os.access(directory, os.R_OK | os.X_OK):
        return [Check("data directory", "fail", f"{given} is not readable by this user")]
    if not directory_format().holds_store(directory):
        return [
            Check("data directory", "fail", f"{given} holds no store; run `cenotaph init --data {given}`")
        ]
    denied = directory_format().unwritable(directory)
    if denied:
        names = ", ".join(p.name if p != directory else str(given) for p in denied)
        return [Check("data directory", "warn", f"read-only for this user ({names}): {_READS_ONLY}")]
    return [Check("data directory", "ok", f"{given} exists and is writable")]


def _keyring_checks(data: DataLocation) -> list[Check]:
    try:
        keyring = data.keyring()
    except click.UsageError as exc:
        return [Check("keyring", "fail", exc.format_message())]
    if not keyring.is_dir() or not any(keyring.iterdir()):
        return [
            Check("keyring", "fail", f"no keyring at {keyring}; run `cenotaph init` or set the right path")
        ]
    mode = stat.S_IMODE(keyring.stat().st_mode)
    if mode & 0o077:
        check = Check("keyring directory mode", "fail", f"{mode:04o}; run `chmod 700 {keyring}`")
    elif not os.access(keyring, os.W_OK):
        check = Check("keyring directory mode", "warn", f"{mode:04o}, read-only for this user: {_READS_ONLY}")
    else:
        check = Check("keyring directory mode", "ok", f"{mode:04o}")
    checks = [check]
    # Files that hold bytes must be private; an empty lock file holds nothing.
    loose = sorted(
        f"{p.name} ({stat.S_IMODE(p.stat().st_mode):04o})"
        for p in keyring.iterdir()
        if p.is_file() and p.stat().st_size > 0 and stat.S_IMODE(p.stat().st_mode) & 0o077
    )
    checks.append(
        Check(
            "keyring file modes",
            "fail" if loose else "ok",
            ("readable by others: " + ", ".join(loose) + "; chmod them 600") if loose else "all 0600",
        )
    )
    warning = root_of_trust_warning(data)
    apart = "keyring outside data" if data.path is not None else "keyring apart from the database"
    checks.append(Check("root of trust", "warn" if warning else "ok", warning or apart))
    try:  # after the mode checks: opening the keyring also restores its directory to 0700
        provider = data.provider() if data.directory is None else keyring_from_env(data.directory)
    except CenotaphError as exc:
        checks.append(Check("keyring opens", "fail", " ".join(str(exc).split())))
    else:
        checks.append(Check("keyring opens", "ok", f"root of trust: {provider.root_of_trust}"))
    return checks


def _store_checks(data: DataLocation) -> list[Check]:
    """Checks that need the open store: the audit chain, the ledger, open erasure requests."""
    checks: list[Check] = []
    try:
        with open_existing_store(data) as store:
            try:
                audit = store.verify_audit()
            except CenotaphError as exc:
                checks.append(Check("audit chain", "fail", " ".join(str(exc).split())))
            else:
                checks.append(
                    Check(
                        "audit chain",
                        "ok",
                        f"{audit['entries']} entries, anchored up to {audit['anchored_seq']}",
                    )
                )
            checks.append(_ledger_agreement(store))
            checks += _erasure_checks(store)
    except (CenotaphError, click.BadParameter) as exc:
        return [Check("store opens", "fail", " ".join(str(exc).split()))]
    return checks


def _erasure_checks(store: Store) -> list[Check]:
    """Compliance requests not verified yet, each with what moves it forward (a stuck one, which
    purging cannot verify, fails); and every KEK epoch held back from rotation, and by whom. The
    doctor's report is the CLI's own document: it speaks CLI."""
    pending = [
        (request.id, status)
        for request, status in store.erasure_statuses()  # one read transaction for them all
        if request.mode == Mode.COMPLIANCE and status.state != ErasureState.VERIFIED
    ]
    detail = "; ".join(
        f"{rid}: {status.state}{', stuck' if status.stuck else ''} ({', '.join(status.gaps) or 'no gap'}); "
        f"next: {speak_cli(status.next_step or '')}"
        for rid, status in pending
    )
    stuck = any(status.stuck for _, status in pending)
    requests = Check(
        "erasure requests",
        "fail" if stuck else "warn" if pending else "ok",
        detail or "every compliance request is verified",
    )
    return [requests, _retention_check(store)]


def _retention_check(store: Store) -> Check:
    """Which KEK epochs rotation must keep, who holds each, why, and what releases it. A backup
    is a choice (a warning); an erasure request that cannot verify holds every horizon it shares
    back for good, so it fails."""
    held = store.retention()
    if not held:
        return Check("epoch retention", "ok", "no KEK epoch is held back from rotation")
    detail = "; ".join(
        f"epoch {r.epoch} held by {r.holder} {r.id}: {r.reason}; release: {speak_cli(r.release)}"
        for r in held
    )
    return Check("epoch retention", "fail" if any(r.stuck for r in held) else "warn", detail)


def _ledger_agreement(store: Store) -> Check:
    """The database is a faithful cache of the key provider's ledger: no tombstone deleted, no
    hidden mark cleared, no destroyed key back, no lift, token or request state planted, no row
    whose sealed version or expiry disagrees with its columns (S9)."""
    try:
        found = store.check_integrity()
    except CenotaphError as exc:
        return Check("ledger agreement", "fail", " ".join(str(exc).split()))
    if found:
        return Check("ledger agreement", "fail", "the database was altered: " + "; ".join(found))
    return Check("ledger agreement", "ok", "the database agrees with the key provider's ledger")


_STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


def _checks_table(doc: dict[str, Any]) -> RenderableType:
    table = new_table("check", "status", "detail", title=f"cenotaph doctor: {doc['data']}", free=("detail",))
    for check in doc["checks"]:
        table.add_row(
            check["name"], Text(check["status"], style=_STYLE[check["status"]]), message_cell(check["detail"])
        )
    return table
