"""``cenotaph doctor``: check the data directory, the keyring and the backend's erasure settings
(the engine's checks are the backend's: ``DirectoryFormat.settings_checks`` and friends)."""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from rich.console import RenderableType
from rich.text import Text

from cenotaph.backends import directory_format
from cenotaph.backends.physical import Check
from cenotaph.crypto.provider import keyring_from_env
from cenotaph.errors import CenotaphError
from cenotaph.model import ErasureState, Mode
from cenotaph.store import Store

from .options import data_option, keyring_location, open_existing_store, root_of_trust_warning
from .output import emit, message_cell, new_table, table_option
from .spelling import speak_cli

__all__ = ["doctor"]

_READS_ONLY = "reads work; writes, forgets, purges and key rotation are refused"


@click.command()
@data_option
@table_option
@click.pass_context
def doctor(ctx: click.Context, data: Path, table: bool) -> None:
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
    """
    engine = directory_format()
    checks = [*_data_checks(data), *_keyring_checks(data), *engine.settings_checks(data)]
    if all(c.status != "fail" for c in checks) and engine.holds_store(data):
        checks += _store_checks(data)
    checks.append(Check("python", "ok", sys.version.split()[0]))
    checks += engine.version_checks()
    ok = all(c.status != "fail" for c in checks)
    doc = {"ok": ok, "data": str(data.resolve()), "checks": [asdict(c) for c in checks]}
    emit(doc, table=table, render=_checks_table)
    if not ok:
        ctx.exit(1)


def _data_checks(data: Path) -> list[Check]:
    if not data.is_dir():
        return [Check("data directory", "fail", f"{data} does not exist; run `cenotaph init --data {data}`")]
    if not os.access(data, os.R_OK | os.X_OK):
        return [Check("data directory", "fail", f"{data} is not readable by this user")]
    if not directory_format().holds_store(data):
        return [Check("data directory", "fail", f"{data} holds no store; run `cenotaph init --data {data}`")]
    denied = directory_format().unwritable(data)
    if denied:
        names = ", ".join(p.name if p != data else str(p) for p in denied)
        return [Check("data directory", "warn", f"read-only for this user ({names}): {_READS_ONLY}")]
    return [Check("data directory", "ok", f"{data} exists and is writable")]


def _keyring_checks(data: Path) -> list[Check]:
    keyring = keyring_location(data)
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
    checks.append(Check("root of trust", "warn" if warning else "ok", warning or "keyring outside data"))
    try:  # after the mode checks: opening the keyring also restores its directory to 0700
        provider = keyring_from_env(data)
    except CenotaphError as exc:
        checks.append(Check("keyring opens", "fail", " ".join(str(exc).split())))
    else:
        checks.append(Check("keyring opens", "ok", f"root of trust: {provider.root_of_trust}"))
    return checks


def _store_checks(data: Path) -> list[Check]:
    """Checks that need the open store: file integrity, the audit chain, open erasure requests."""
    checks: list[Check] = []
    try:
        with open_existing_store(data) as store:
            checks.append(directory_format().integrity_check(data))
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
        for request in store.erasures()
        if request.mode == Mode.COMPLIANCE and (status := request.status()).state != ErasureState.VERIFIED
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
