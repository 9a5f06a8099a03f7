"""``cenotaph keyring``: seal the keyring, move it out of the data directory, export and import it.

Stop every process using the store first: a process that still has the keyring open keeps using
it where it was (and then fails, since it is gone). Each command is crash-safe: at every moment
one whole, valid keyring exists on disk, and running the same command again after a crash
finishes it. Master keys come from the environment only (never an argument: ``ps`` shows those).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

from cenotaph import LocalKeyring
from cenotaph.errors import KeyProviderError
from cenotaph.operations import (
    KEYRING_ENV,
    MASTER_KEY_ENV,
    export_keyring,
    import_keyring,
    keyring_is_sealed,
    master_key_from_env,
    move_keyring,
)

from .interrupts import held, on_interrupt
from .options import DataLocation, data_option, keyring_location
from .output import emit, generic_table, table_option

__all__ = ["keyring"]

NEW_MASTER_KEY_ENV = "CENOTAPH_NEW_MASTER_KEY"
_NEW_KEY_HINT = "e.g. `openssl rand -hex 32`; keep it outside the data directory and its backups"


@click.group()
def keyring() -> None:
    """Seal, move, export and import the keyring.

    The keyring holds every key that can decrypt the store. Kept inside the data directory and
    unsealed, whoever copies the directory has the keys: seal it with a master key
    (CENOTAPH_MASTER_KEY), move it elsewhere, and keep a sealed export with the store's backups.
    """


def _existing_keyring(data: DataLocation) -> Path:
    location = keyring_location(data)
    if not (location / LocalKeyring.KEYRING_FILE).is_file():
        raise click.BadParameter(
            f"no keyring at {location}; point {KEYRING_ENV} at this store's keyring", param_hint="--data"
        )
    return location


def _outside(data: DataLocation, keyring: Path) -> Path:
    """What a moved keyring or an export must lie outside: the data directory (a PostgreSQL
    store has none; the keyring itself then)."""
    return data.path if data.path is not None else keyring


def _required_master(name: str = MASTER_KEY_ENV) -> bytes:
    master = master_key_from_env(name)
    if master is None:
        raise click.UsageError(f"set {name} to the master key (64 hex characters, {_NEW_KEY_HINT})")
    return master


@keyring.command()
@data_option
@table_option
def seal(data: DataLocation, table: bool) -> None:
    """Seal the keyring with the master key in CENOTAPH_MASTER_KEY.

    keyring.json is rewritten sealed (AES-256-GCM) in one atomic step. A keyring sealed already
    is left as it is; to change its master key, set CENOTAPH_MASTER_KEY to the current key and
    CENOTAPH_NEW_MASTER_KEY to the new one. From then on every command needs the key in
    CENOTAPH_MASTER_KEY. The file's old, unsealed bytes may survive on the device: run
    `cenotaph rotate-keys` afterwards so the KEKs that were ever stored in the clear are destroyed.
    """
    location = _existing_keyring(data)
    master = _required_master()
    new = master_key_from_env(NEW_MASTER_KEY_ENV)
    sealed = keyring_is_sealed(location)
    if not sealed and new is not None:
        raise click.UsageError(
            f"the keyring is not sealed yet: set only {MASTER_KEY_ENV}, the key to seal it with"
        )
    opened = LocalKeyring(location, master_key=master if sealed else None)  # the right key, or refused
    target = new if new is not None else master
    changed = not sealed or new is not None
    if changed:
        with held():
            opened.reseal(target)
            on_interrupt("interrupted after keyring.json was sealed")
    doc = {
        "keyring": str(location.resolve()),
        "sealed": True,
        "changed": changed,
        "next": (
            "run `cenotaph rotate-keys`, so no KEK that was stored unsealed survives"
            if changed
            else "already sealed with this key; nothing changed"
        ),
    }
    emit(doc, table=table, render=_with_next)


@keyring.command()
@click.argument("dest", type=click.Path(path_type=Path))
@data_option
@table_option
def move(dest: Path, data: DataLocation, table: bool) -> None:
    """Move the keyring to DEST, outside the data directory.

    DEST is a new or empty directory (never a symbolic link). The keyring is copied, fsynced and
    opened there, then removed from where it was (its key file zeroed first). Afterwards every
    command needs CENOTAPH_KEYRING=DEST. Stop the store's other processes first.
    """
    source = keyring_location(data)
    if not (source / LocalKeyring.KEYRING_FILE).exists() and not (dest / LocalKeyring.KEYRING_FILE).exists():
        _existing_keyring(data)  # nothing to move, and no move to finish
    on_interrupt(f"interrupted: run the same `cenotaph keyring move {dest}` again to finish the move")
    report = move_keyring(source, dest, master_key_from_env(), outside=_outside(data, source))
    report["next"] = f"export {KEYRING_ENV}={report['to']} for every later command"
    emit(report, table=table, render=_with_next)


@keyring.command("export")
@click.argument("out", type=click.Path(path_type=Path))
@data_option
@table_option
def export_(out: Path, data: DataLocation, table: bool) -> None:
    """Write a sealed copy of the keyring to the new file OUT.

    Needs a sealed keyring (`cenotaph keyring seal`) and its key in CENOTAPH_MASTER_KEY; refuses
    an unsealed one (the copy would hold every key in the clear). OUT is never replaced and must
    lie outside the data directory. Keep it apart from the data, with the store's backups, and
    export again after every forget and key rotation (see the README: an old export still holds
    epochs rotation destroyed, and lacks later forgets).
    """
    location = _existing_keyring(data)
    if not keyring_is_sealed(location):
        raise KeyProviderError(
            "the keyring is not sealed: an export would hold every key in the clear; seal it first "
            f"(`cenotaph keyring seal` with {MASTER_KEY_ENV})"
        )
    master = _required_master()
    report = export_keyring(
        LocalKeyring(location, master_key=master), out, master, outside=_outside(data, location)
    )
    report["next"] = (
        "restore: `cenotaph keyring import OUT DIR`, then `cenotaph restore BACKUP --data NEW --keyring DIR`"
    )
    emit(report, table=table, render=_with_next)


@keyring.command("import")
@click.argument("export", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(path_type=Path))
@table_option
def import_(export: Path, dest: Path, table: bool) -> None:
    """Recreate a keyring directory DEST from an export.

    Needs the master key the export was sealed with in CENOTAPH_MASTER_KEY; DEST is a new or
    empty directory. Then restore a backup with it: `cenotaph restore BACKUP --data NEW
    --keyring DEST`.
    """
    report = import_keyring(export, dest, _required_master())
    report["next"] = f"`cenotaph restore BACKUP --data NEW --keyring {report['to']}`"
    emit(report, table=table, render=_with_next)


def _with_next(doc: dict[str, Any]) -> RenderableType:
    fields = {k: v for k, v in doc.items() if k != "next"}
    return Group(generic_table(fields, "keyring"), Text(str(doc["next"]), style="yellow"))
