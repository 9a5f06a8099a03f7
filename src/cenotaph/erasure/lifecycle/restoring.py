"""Restoring a backup's files into a target directory, safe against crashes and a second restore.

Until the restored copy has committed its own audit chain id and replayed the forget ledger, it
still carries the source's chain id and forgets that never reached it: it must never be opened
as a store. So the target is marked (``RESTORE_MARKER``, durable before the copy starts) and
:func:`check_not_restoring` refuses a marked directory; the marker goes once the copy committed.

A restore holds an exclusive ``flock`` on the target directory from its first check to its last
step. The kernel drops the lock when the process dies, so a marked directory whose lock is free
was left by a crash, and running the same restore again starts over from the backup; a held
lock means a restore is running, and a second one is refused instead of replacing its files.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...audit.chain import entry_from_dict, verify_chain
from ...backends import directory_format, looks_like_store, ops
from ...backends.base import Txn
from ...durable import fsync
from ...errors import InvalidValueError, StorageError
from ...faults import fault_point
from ...ledger.journal import AUDIT_CHAIN, all_anchors, all_intents
from ..proof.audit_check import check_tail_announced
from .backup import BACKUP_MANIFEST

__all__ = [
    "RESTORE_MARKER",
    "audited_forgets",
    "check_not_restoring",
    "check_outside_stores",
    "restore_committed",
    "restoring",
]

RESTORE_MARKER = ".restore-incomplete"
KEYRING_DIR = "keyring"  # a target may hold the source's keyring directory, and keeps it
# what an interrupted restore may have left in its target, replaced when it runs again
_LEFT_BY_A_CRASH = frozenset({RESTORE_MARKER, *directory_format().restored_files})


def check_not_restoring(directory: Path) -> None:
    """Refuse to open a directory whose restore has not finished."""
    if (directory / RESTORE_MARKER).exists():
        raise StorageError(
            "a restore into this data directory has not finished (it is running, or it was "
            "interrupted); run the same restore again into it, which starts over from the backup"
        )


def check_outside_stores(path: Path, what: str) -> None:
    """Refuse a backup or restore target inside a data directory: its copy of the database would
    be a file that store owns, and every later erasure scan there would find its bytes."""
    if any(looks_like_store(parent) for parent in path.resolve().parents):
        raise InvalidValueError(f"{what} is inside a store's data directory; choose a directory outside it")


def restore_committed(target: Path) -> bool:
    """Whether ``target`` holds a restored store that committed (it may serve; keep it)."""
    return looks_like_store(target) and not (target / RESTORE_MARKER).exists()


@contextlib.contextmanager
def restoring(src: Path, target: Path) -> Iterator[dict[str, Any]]:
    """Copy the backup ``src`` into ``target`` and yield its manifest; the body opens the copy
    and commits its first transaction. The marker is removed only if the body returns."""
    manifest = _manifest(src)
    check_outside_stores(target, "the restore target")
    if target.exists() and not target.is_dir():
        raise InvalidValueError("the restore target must be a new or empty directory")
    created = not target.exists()
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    fsync(target.parent)
    fd = os.open(target, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InvalidValueError(
                "another restore into this directory is running; wait for it to finish"
            ) from None
        _copy(src, target)
        try:
            yield manifest
        except BaseException:
            _remove_copy(target, created)  # refused before its first commit: leave no trace
            raise
        (target / RESTORE_MARKER).unlink()
        fsync(target)
    finally:
        os.close(fd)  # releases the lock


def _remove_copy(target: Path, created: bool) -> None:
    for name in _LEFT_BY_A_CRASH - {RESTORE_MARKER}:
        (target / name).unlink(missing_ok=True)
    (target / RESTORE_MARKER).unlink(missing_ok=True)  # last: until the copy is gone, it is marked
    if created:
        with contextlib.suppress(OSError):
            target.rmdir()  # only if empty: a keyring created meanwhile stays
    fsync(target.parent if created else target)


def _manifest(src: Path) -> dict[str, Any]:
    manifest_path = src / BACKUP_MANIFEST
    if not manifest_path.is_file() or not directory_format().holds_snapshot(src):
        raise InvalidValueError(
            "the source is not a cenotaph backup (no manifest); pass a directory made by store.backup()"
        )
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    return manifest


def _copy(src: Path, target: Path) -> None:
    """Under the lock: mark the target durably, then replace any half-done copy with the backup."""
    marker = target / RESTORE_MARKER
    allowed = {KEYRING_DIR, *(_LEFT_BY_A_CRASH if marker.exists() else ())}
    if any(p.name not in allowed for p in target.iterdir()):
        raise InvalidValueError("the restore target must be a new or empty directory")
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600)  # its existence is what counts
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync(target)
    for name in _LEFT_BY_A_CRASH - {RESTORE_MARKER}:
        (target / name).unlink(missing_ok=True)
    directory_format().install_snapshot(src, target)
    fsync(target)
    fault_point("restore.copied")


_ALTERED_BACKUP = (
    "the backup was altered: {}; nothing was restored. Restore from another backup and investigate"
)


def audited_forgets(txn: Txn, ledger: list[dict[str, Any]], logged: set[str]) -> set[str]:
    """The forgets a backup's copy holds, as its audit log says -- after checking that log, still
    under the source's chain id, against the key provider's ledger (``ledger``; ``logged``: its
    forgets' request ids): the chain links, every anchored entry the copy holds matches its
    anchor, entries past the newest such anchor were announced, and every forget it holds was
    ledgered. The copy may end anywhere (it is a prefix of the source's history), but a copy
    whose log was edited is refused before it serves anything (S9)."""
    try:
        entries = [entry_from_dict(json.loads(e)) for e in txn.run(ops.AuditEntries())]
    except ValueError:
        raise StorageError(_ALTERED_BACKUP.format("an audit entry is not valid JSON")) from None
    try:
        verify_chain(entries)
    except StorageError as exc:
        raise StorageError(_ALTERED_BACKUP.format("its audit log's hash chain is broken")) from exc
    last = max((e.seq for e in entries), default=0)
    heads = {e.seq: e.head for e in entries}
    anchors = all_anchors(ledger, txn.run(ops.Meta(AUDIT_CHAIN)))
    if anchors is None and entries:
        raise StorageError(_ALTERED_BACKUP.format("its audit chain id is not in the key provider's ledger"))
    held = {seq: found for seq, found in (anchors or {}).items() if seq <= last}
    if any(len(found) > 1 or heads.get(seq) not in found for seq, found in held.items()):
        raise StorageError(_ALTERED_BACKUP.format("an audit entry differs from its anchor in the ledger"))
    try:
        check_tail_announced(entries, held, all_intents(ledger, txn.run(ops.Meta(AUDIT_CHAIN))))
    except StorageError as exc:
        raise StorageError(_ALTERED_BACKUP.format("its audit log holds an entry never announced")) from exc
    forgets = {str(e.fields.get("request_id")) for e in entries if e.event == "forget"}
    if not forgets <= logged:
        raise StorageError(_ALTERED_BACKUP.format("its audit log holds a forget the ledger never recorded"))
    return forgets
