"""Backups: a consistent copy holding ciphertext only and no freed bytes (the backend's snapshot,
SQLite's ``VACUUM INTO``), registered with the key provider so rotation keeps every KEK epoch it
needs until it is released (restoring one is ``erasure.lifecycle.restoring``)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from ...backends import ops
from ...backends.base import Backend
from ...caches import StoreCaches
from ...crypto.keys import KeyChain
from ...crypto.provider import KeyProvider
from ...durable import fsync, write_atomically
from ...errors import InvalidValueError, NotFoundError, StorageError
from ...ledger.journal import anchor_audit
from ...model import BackupInfo

__all__ = ["BACKUP_MANIFEST", "Backups"]

BACKUP_MANIFEST = "cenotaph-backup.json"


class Backups:
    def __init__(self, backend: Backend, provider: KeyProvider, keys: KeyChain, caches: StoreCaches) -> None:
        self._backend = backend
        self._provider = provider
        self._keys = keys
        self._caches = caches

    def backup(self, dest: Path) -> BackupInfo:
        self._caches.sync()
        try:
            if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
                raise InvalidValueError("the backup destination must be a new or empty directory")
            dest.mkdir(parents=True, exist_ok=True, mode=0o700)
            fsync(dest.parent)
        except OSError as exc:
            raise StorageError(
                f"cannot make the backup directory {dest} ({exc.strerror}); choose a directory this "
                "user may write"
            ) from exc
        backup_id = "bk_" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "_" + os.urandom(4).hex()
        files = self._backend.physical.format.snapshot_files(dest)
        try:
            epochs = self._copy_for_backup(backup_id, dest)
            for file in files:
                fsync(file)
            info = BackupInfo(
                id=backup_id,
                path=str(dest),
                created_at=datetime.now(UTC),
                epochs=tuple(epochs),
                bytes=sum(file.stat().st_size for file in files),
            )
            # the manifest last, atomically: a backup with a manifest is whole and durable
            manifest = json.dumps({"format": "cenotaph-backup/1", **info.to_dict()})
            write_atomically(dest / BACKUP_MANIFEST, manifest.encode())
            with self._backend.write() as txn:
                anchor_audit(self._provider, txn, "backup", {"backup_id": backup_id, "epochs": epochs})
        except BaseException:
            # a backup that failed keeps no epoch alive (it would hold back every horizon) and
            # leaves nothing that looks like a backup
            if backup_id in self._provider.backups():
                self._provider.release_backup(backup_id)
            for file in (dest / BACKUP_MANIFEST, *files):
                file.unlink(missing_ok=True)
            raise
        return info

    def _copy_for_backup(self, backup_id: str, dest: Path) -> list[int]:
        """Copy the database into ``dest`` and register the KEK epochs the copy needs, race-free with a
        rotation in any process: register what is in use, copy, register what the copy itself
        uses, then check none of it was destroyed before that registration (else copy again)."""
        for _ in range(3):
            with self._backend.read() as txn:
                epochs = txn.run(ops.EpochsInUse()) | {self._keys.refresh_epoch()}
            self._provider.register_backup(backup_id, sorted(epochs))
            epochs |= self._backend.physical.snapshot(dest)  # replaces an earlier attempt's copy
            self._provider.register_backup(backup_id, sorted(epochs))  # no rotation destroys these now
            if epochs <= set(self._provider.live_epochs()):
                return sorted(epochs)
        raise StorageError("key rotations kept racing this backup; nothing was kept, run backup again")

    def release_backup(self, backup_id: str) -> None:
        if backup_id not in self._provider.backups():
            raise NotFoundError("no backup with that id is registered; list them with store.backups()")
        self._provider.release_backup(backup_id)
        with self._backend.write() as txn:
            anchor_audit(self._provider, txn, "release_backup", {"backup_id": backup_id})
