"""Backups: ``backup``, ``release-backup`` and ``restore``.

A backup holds ciphertext only, never key material, and is registered with the keyring so the
KEK epochs it needs survive key rotation until ``release-backup``. ``restore`` therefore needs
the source store's keyring, and replays every forget made since the backup before the restored
store serves anything, so a backup taken before a forget resurrects nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

import cenotaph
from cenotaph.errors import CenotaphError, NotFoundError
from cenotaph.operations import KEYRING_ENV, MASTER_KEY_ENV, postgres_schema_state, restore_committed

from .forgetting import erasure_counts, registered_backups, request_rows
from .interrupts import held, on_interrupt
from .options import DataLocation, data_option, open_existing_store
from .output import emit, generic_table, table_option
from .progress import ProgressCallback, progress_bar

__all__ = ["backup", "release_backup", "restore"]

KEYRING_FILE = "keyring.json"  # what makes a directory a LocalKeyring


@click.command()
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@data_option
@table_option
def backup(dest: Path, data: DataLocation, table: bool) -> None:
    """Back the store up into a new or empty directory.

    The copy holds ciphertext only, never key material: restoring it needs this store's keyring
    (`cenotaph restore DEST --data NEW --keyring DIR`). It is registered with the keyring, which
    keeps the KEK epochs it needs through `cenotaph rotate-keys`, so forgets made after it do not
    reach their erasure horizon until `cenotaph release-backup ID`. Prints the backup's id, path,
    epochs and size.
    """
    on_interrupt("interrupted: no backup was made (the partial copy was removed, nothing registered)")
    with open_existing_store(data) as store:
        info = store.backup(dest.resolve())
        on_interrupt(f"interrupted after backup {info.id} was made and registered")
    emit(info.to_dict(), table=table, render=_backup_table)


def _backup_table(doc: dict[str, Any]) -> RenderableType:
    note = Text(
        "ciphertext only: restoring needs this store's keyring. Until `cenotaph release-backup "
        f"{doc['id']}`, rotate-keys keeps epochs {doc['epochs']}.",
        style="dim",
    )
    return Group(generic_table(doc, "backup"), note)


@click.command("release-backup")
@click.argument("backup_id")
@data_option
@table_option
def release_backup(backup_id: str, data: DataLocation, table: bool) -> None:
    """End a backup's retention, so its KEK epochs can be destroyed.

    After this, `cenotaph rotate-keys` destroys the epochs only BACKUP_ID needed: the backup's
    files stay where they are but can no longer be decrypted, and forgets it held back reach
    their erasure horizon. `cenotaph status` lists the registered backups.
    """
    with open_existing_store(data) as store:
        backups = registered_backups(store)
        if backup_id not in backups:
            raise NotFoundError("no backup with that id is registered; `cenotaph status` lists them")
        with held():
            store.release_backup(backup_id)
            on_interrupt(f"interrupted after backup {backup_id} was released")
    doc = {
        "released": backup_id,
        "epochs": backups[backup_id],
        "next": "run `cenotaph rotate-keys` to destroy the KEK epochs no other backup needs",
    }
    emit(doc, table=table)


@click.command()
@click.argument("src", type=click.Path(exists=True, file_okay=False, path_type=Path))
@data_option
@click.option(
    "--keyring",
    "keyring",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    envvar=KEYRING_ENV,
    show_envvar=True,
    help="The source store's keyring directory (a backup holds no key material).",
)
@table_option
def restore(src: Path, data: DataLocation, keyring: Path | None, table: bool) -> None:
    """Restore a backup into a new data directory (or a new PostgreSQL schema).

    Copies the backup SRC into --data (a new or empty directory) and opens it with the SOURCE
    store's keyring (--keyring DIR, default $CENOTAPH_KEYRING; for a default setup that is
    <source data>/keyring). Every forget made since the backup is replayed and purged before the
    store serves anything, so nothing forgotten comes back. Prints the erasure requests now in
    force and the public key. A PostgreSQL store's backup goes into a new or empty schema:
    --data postgresql://user@host/db?schema=NEW.

    No key material is copied: later commands on the restored directory need the same keyring,
    e.g. CENOTAPH_KEYRING=DIR cenotaph status --data TARGET. Restore replaces a lost or damaged
    store; do not keep both in use, since they share a keyring and rotating keys in one destroys
    epochs the other needs.
    """
    if keyring is None:
        raise click.UsageError(
            "restore needs the source store's keyring (a backup holds no key material): pass "
            f"--keyring DIR or set {KEYRING_ENV}; by default it is <source data directory>/keyring"
        )
    if not (keyring / KEYRING_FILE).is_file():
        raise click.BadParameter(
            f"no keyring in {str(keyring)!r}; pass the source store's keyring directory",
            param_hint="--keyring",
        )
    provider = cenotaph.LocalKeyring(keyring.resolve(), master_key=_master_key())
    keyring = keyring.resolve()
    if data.url is not None:
        store = _restore_into_schema(src, data, provider)
        keyring_inside = False
    else:
        assert data.directory is not None
        store = _restore_into_directory(src, data.directory, provider)
        keyring_inside = keyring == (data.directory / "keyring").resolve()
    with store:
        requests = request_rows(store)
        public_key = store.public_key
    where = "this data directory" if data.url is None else "this store"
    if keyring_inside:
        follow_up = f"later commands on {where} find the keyring inside it"
    else:
        follow_up = (
            f"later commands on {where} need {KEYRING_ENV}={keyring} (its keys are the source "
            "store's and were not copied)"
        )
    doc = {
        "restored_from": str(src.resolve()),
        "data": data.shown,
        "keyring": str(keyring),
        "public_key": public_key,
        "erasures": erasure_counts(requests),
        "requests": requests,
        "next": follow_up,
    }
    emit(doc, table=table, render=_restore_table)


def _restore_into_directory(src: Path, target: Path, provider: cenotaph.KeyProvider) -> cenotaph.Store:
    existed = target.exists()
    before = set(target.iterdir()) if existed and target.is_dir() else set()
    try:
        with progress_bar("restoring: replaying forgets, purging, scanning") as progress:
            return _restore(src.resolve(), target, provider, progress)
    except BaseException:
        _undo(target, existed, before)  # a half-restored copy must neither serve nor block a retry
        _interrupted(restore_committed(target), str(target))
        raise


def _restore_into_schema(src: Path, data: DataLocation, provider: cenotaph.KeyProvider) -> cenotaph.Store:
    """A PostgreSQL store's backup, loaded into the schema --data names; a restore refused or
    interrupted before it committed drops what it loaded itself."""
    assert data.url is not None
    try:
        with progress_bar("restoring: replaying forgets, purging, scanning") as progress:
            return _restore(src.resolve(), data.url, provider, progress)
    except BaseException:
        _interrupted(_schema_committed(data.url), data.given)
        raise


def _schema_committed(url: str) -> bool:
    """Does the schema hold a restored store that committed (only its purge was cut short)?"""
    try:
        state = postgres_schema_state(url)
    except CenotaphError:
        return False
    return bool(state.holds_store and not state.restoring)


def _interrupted(committed: bool, target: str) -> None:
    if committed:
        on_interrupt(
            "interrupted after the restore committed (every forget replayed); run "
            f"`cenotaph purge --data {target}` to finish purging it"
        )
    else:
        on_interrupt("interrupted: the restore was undone; nothing was written")


def _restore(
    src: Path, target: Path | str, provider: cenotaph.KeyProvider, progress: ProgressCallback | None
) -> cenotaph.Store:
    return cenotaph.restore(src, target, key_provider=provider, progress=progress)


def _master_key() -> bytes | None:
    master_hex = os.environ.get(MASTER_KEY_ENV)
    if not master_hex:
        return None
    try:
        return bytes.fromhex(master_hex.strip())
    except ValueError:
        raise click.BadParameter("must be 64 hex characters", param_hint=MASTER_KEY_ENV) from None


def _undo(target: Path, existed: bool, before: set[Path]) -> None:
    if restore_committed(target):
        return  # a whole store already (only its purge was cut short, which resumes): keep it
    if not existed:
        shutil.rmtree(target, ignore_errors=True)
        return
    if not target.is_dir():
        return
    for path in set(target.iterdir()) - before:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _restore_table(doc: dict[str, Any]) -> RenderableType:
    head = {k: doc[k] for k in ("restored_from", "data", "keyring", "public_key")} | doc["erasures"]
    rows = [
        {k: r.get(k) for k in ("id", "mode", "target_kind", "version", "state")}
        | {"horizon": r.get("horizon") or "not reached"}
        for r in doc["requests"]
    ]
    return Group(
        generic_table(head, "restored store"),
        generic_table(rows, "erasure requests replayed"),
        Text(doc["next"], style="yellow"),
    )
