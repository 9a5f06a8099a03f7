"""Moving, exporting and importing a :class:`LocalKeyring`'s files, crash-safe.

Every step keeps at least one whole, valid keyring on disk: files are written to a staging name,
fsynced and renamed (or hard-linked, to never replace an existing file), directories fsynced,
and the source of a move loses its key material only after the copy was opened and compared.
No path given by the caller may be a symbolic link (a link planted where the keys are to be
written would send them elsewhere), and nothing is ever overwritten.

An export is one file sealed (AES-256-GCM) under the master key: the sealed keyring.json and the
ledger, so it holds no key in the clear and any change to it is detected on import.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..durable import fsync, write_all, write_atomically, write_new
from ..errors import InvalidValueError, KeyProviderError
from ..faults import fault_point
from .aead import open_sealed, seal
from .provider import MASTER_KEY_ENV, SEALED_FORMAT, LocalKeyring

__all__ = ["EXPORT_FORMAT", "export_keyring", "import_keyring", "keyring_is_sealed", "move_keyring"]

EXPORT_FORMAT = "cenotaph-keyring-export/1"
_EXPORT_AAD = EXPORT_FORMAT.encode()
_FILES = (LocalKeyring.KEYRING_FILE, LocalKeyring.LEDGER_FILE)


def move_keyring(source: Path, dest: Path, master_key: bytes | None, *, outside: Path) -> dict[str, Any]:
    """Move the keyring in ``source`` into ``dest`` (new or empty, not under ``outside``) and remove
    it from where it was. Run again after a crash, it finishes the move."""
    with _named_os_errors("move the keyring"):
        _check_target(dest, outside=outside, what="the new keyring directory")
        if source.resolve() in (dest.resolve(), *dest.resolve().parents):
            raise InvalidValueError("the new keyring directory is the keyring itself or inside it")
        if not (source / LocalKeyring.KEYRING_FILE).exists() and (dest / LocalKeyring.KEYRING_FILE).exists():
            # a move that crashed after removing the key material (or that finished): complete it,
            # if the copy is whole and is this keyring's (the same ledger, where one is left)
            LocalKeyring(dest, master_key=master_key)
            left = _read_own_files(source).get(LocalKeyring.LEDGER_FILE) if source.is_dir() else None
            if left is not None and left != _read_own_files(dest).get(LocalKeyring.LEDGER_FILE):
                raise KeyProviderError(
                    f"{source} has lost its keyring.json and {dest} holds another keyring; nothing "
                    "was removed (restore keyring.json from your keyring backup)"
                )
            _remove_keyring_files(source)
            return {"from": str(source), "to": str(dest.resolve()), "sealed": master_key is not None}
        keyring = LocalKeyring(source, master_key=master_key)
        with keyring.exclusive():  # nothing changes the keyring while it moves
            contents = _read_own_files(source)
            if dest.is_dir() and any(dest.iterdir()) and _read_own_files(dest) != contents:
                raise InvalidValueError(
                    "the new keyring directory is not empty; choose a new or empty directory"
                )
            _make_private_dir(dest)
            for name, body in contents.items():
                write_atomically(dest / name, body)
            moved = LocalKeyring(dest, master_key=master_key)  # opens: a whole, valid keyring
            same = moved.erasure_secret() == keyring.erasure_secret()
            if not same or moved.live_epochs() != keyring.live_epochs():
                raise KeyProviderError("the copied keyring differs from the original; nothing was removed")
            fault_point("keyring.copied")
            _remove_keyring_files(source)
    return {"from": str(source), "to": str(dest.resolve()), "sealed": keyring.sealed}


def export_keyring(source: LocalKeyring, out: Path, master_key: bytes, *, outside: Path) -> dict[str, Any]:
    """Write a sealed export of ``source`` (which must itself be sealed) to the new file ``out``."""
    if not source.sealed:
        raise KeyProviderError(
            "the keyring is not sealed: an export would hold every key in the clear; seal it first "
            f"with a master key ({MASTER_KEY_ENV})"
        )
    with _named_os_errors("export the keyring"):
        _check_target(out, outside=outside, what="the export file", directory=False)
        with source.exclusive():
            contents = _read_own_files(source.path)
    payload = {
        "exported_at": datetime.now(UTC).isoformat(),
        "files": {name: body.decode("utf-8") for name, body in contents.items()},
    }
    sealed = seal(master_key, json.dumps(payload, sort_keys=True).encode(), _EXPORT_AAD)
    body = json.dumps({"format": EXPORT_FORMAT, "sealed": sealed.hex()}).encode()
    with _named_os_errors("export the keyring"):
        try:
            write_new(out, body)
        except FileExistsError:
            raise InvalidValueError(f"{out} exists; name a new file (an export never replaces one)") from None
    ledger = contents.get(LocalKeyring.LEDGER_FILE, b"")
    return {
        "out": str(out.resolve()),
        "exported_at": payload["exported_at"],
        "live_epochs": source.live_epochs(),
        "ledger_entries": ledger.count(b"\n"),
    }


def import_keyring(
    export: Path, dest: Path, master_key: bytes, *, outside: Path | None = None
) -> dict[str, Any]:
    """Recreate a keyring directory ``dest`` (new or empty) from an export sealed under ``master_key``."""
    with _named_os_errors("import the keyring"):
        _check_target(dest, outside=outside, what="the keyring directory to import into")
        if dest.is_dir() and any(dest.iterdir()):
            raise InvalidValueError(f"{dest} is not empty; import into a new or empty directory")
        files = _open_export(export, master_key)
        _make_private_dir(dest)
        for name, text in files.items():
            write_atomically(dest / name, text.encode("utf-8"))
        imported = LocalKeyring(dest, master_key=master_key)
    return {"to": str(dest.resolve()), "live_epochs": imported.live_epochs(), "sealed": True}


@contextlib.contextmanager
def _named_os_errors(step: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        raise KeyProviderError(f"cannot {step}:{where} ({exc.strerror}); check permissions there") from exc


def _open_export(export: Path, master_key: bytes) -> dict[str, str]:
    try:
        doc = json.loads(export.read_bytes())
        blob = bytes.fromhex(doc["sealed"]) if doc.get("format") == EXPORT_FORMAT else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidValueError(f"{export} is not a cenotaph keyring export") from exc
    if blob is None:
        raise InvalidValueError(f"{export} is not a cenotaph keyring export")
    opened = open_sealed(master_key, blob, _EXPORT_AAD)
    if opened is None:
        raise KeyProviderError(
            f"{MASTER_KEY_ENV} does not open {export} (the wrong key, or the file was altered); "
            "nothing was written"
        )
    files = json.loads(opened)["files"]
    if not isinstance(files, Mapping) or set(files) - set(_FILES) or LocalKeyring.KEYRING_FILE not in files:
        raise KeyProviderError(f"{export} holds no keyring; nothing was written")
    return {str(k): str(v) for k, v in files.items()}


def keyring_is_sealed(directory: Path) -> bool:
    """Whether the keyring.json in ``directory`` is sealed under a master key (read, not opened)."""
    body = _read_own_files(directory).get(LocalKeyring.KEYRING_FILE)
    if body is None:
        raise KeyProviderError(f"no keyring.json in {directory}")
    try:
        return bool(json.loads(body).get("format") == SEALED_FORMAT)
    except (ValueError, AttributeError) as exc:
        raise KeyProviderError(
            f"{directory / LocalKeyring.KEYRING_FILE} is corrupt; restore it from a trusted copy"
        ) from exc


def _check_target(path: Path, *, outside: Path | None, what: str, directory: bool = True) -> None:
    """``path`` is not a symlink, not inside ``outside``, and (a directory) new or empty, (a file) new."""
    if path.is_symlink():
        raise InvalidValueError(f"{what} {path} is a symbolic link; name a real path")
    if outside is not None and path.resolve().is_relative_to(outside.resolve()):
        raise InvalidValueError(f"{what} is inside the data directory {outside}; choose a place outside it")
    if not path.parent.is_dir():
        raise InvalidValueError(f"the directory {path.parent} does not exist; create it first")
    if not directory and path.exists():
        raise InvalidValueError(f"{path} exists; name a new file (an export never replaces one)")
    if directory and path.exists() and not path.is_dir():
        raise InvalidValueError(f"{what} {path} is a file; name a new or empty directory")


def _read_own_files(directory: Path) -> dict[str, bytes]:
    """The keyring's files, refusing a symlink among them (it could point at another keyring)."""
    found: dict[str, bytes] = {}
    for name in _FILES:
        path = directory / name
        if path.is_symlink():
            raise KeyProviderError(f"{path} is a symbolic link; a keyring's files must be its own")
        if path.exists():
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as handle:
                found[name] = handle.read()
    return found


def _make_private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, exist_ok=True)
    if path.is_symlink():  # planted since it was checked: the keys must not follow it
        raise InvalidValueError(f"{path} became a symbolic link; nothing was written")
    os.chmod(path, 0o700)
    fsync(path.parent)


def _remove_keyring_files(directory: Path) -> None:
    """Remove a moved keyring: key material first (overwritten, then unlinked), so a crash at any
    point leaves the directory either whole or holding no key."""
    if not directory.is_dir():
        return  # removed already (a finished move run again)
    for path in [
        directory / LocalKeyring.KEYRING_FILE,
        *directory.glob(f".{LocalKeyring.KEYRING_FILE}.*.tmp"),
    ]:
        if path.is_file() and not path.is_symlink():
            _overwrite(path)
            path.unlink()
    fsync(directory)
    fault_point("keyring.unkeyed")
    for name in (LocalKeyring.LEDGER_FILE, ".lock"):
        (directory / name).unlink(missing_ok=True)
    try:
        directory.rmdir()
    except OSError:
        return  # something else lives there: leave it (no key material is left)
    fsync(directory.parent)


def _overwrite(path: Path) -> None:
    """Zero the file in place before unlinking it: on a plain file system its old blocks then hold
    no key (a copy-on-write or flash device may still keep them, see the README)."""
    size = path.stat().st_size
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        write_all(fd, b"\0" * size)
        os.fsync(fd)
    finally:
        os.close(fd)
