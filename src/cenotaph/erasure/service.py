"""The erasure side of a store, assembled: one object the store holds, handing each call to the
module whose one job it is.

- ``erasure.status``: a request's status, ``confirm_erasure`` and ``wait``
- ``erasure.purge``: row removal, WAL truncation, memory, then the verifying scan
- ``erasure.verification``: the scan and each request's verdict
- ``erasure.horizon``: the horizon and what retains KEK epochs
- ``erasure.attest``: certificates
- ``erasure.audit_check``: the audit log against the key provider's ledger
- ``erasure.rotation`` and ``erasure.backup``: KEK rotation, backups
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..backends.base import Backend, ErasureRow
from ..crypto.keys import KeyChain
from ..crypto.provider import KeyProvider
from ..model import BackupInfo, Certificate, ErasureStatus, PurgeReport, Retention, RotationReport
from .attest import Attestor
from .audit_check import AuditCheck
from .backup import BACKUP_MANIFEST, Backups
from .certificate import Signer
from .horizon import Horizons
from .purge import Purger
from .rotation import Rotation
from .status import RequestStatus
from .verification import Progress, Verifier

__all__ = ["ErasureService", "BACKUP_MANIFEST", "Progress"]


class ErasureService:
    def __init__(
        self,
        backend: Backend,
        provider: KeyProvider,
        keys: KeyChain,
        clear_memory: Callable[[list[str]], int],
        sync: Callable[[], None],
        advance: Callable[[float | None], object],
        flush_anchors: Callable[[], None],
    ) -> None:
        self.horizons = Horizons(backend, provider)
        self._verifier = Verifier(
            backend, provider, keys, lambda row: self.horizons.horizon(row, retention=())
        )
        self.audit = AuditCheck(backend, provider, sync, flush_anchors)
        self.requests = RequestStatus(backend, self.horizons, self.audit, sync, advance)
        self.purger = Purger(backend, provider, self._verifier, clear_memory, sync)
        self.attestor = Attestor(backend, provider, self.requests, self.horizons, self.audit)
        self.rotation = Rotation(backend, provider, keys, self.horizons, sync)
        self.backups = Backups(backend, provider, keys, sync)

    def row(self, request_id: object) -> ErasureRow:
        return self.requests.row(request_id)

    def status(self, request_id: str) -> ErasureStatus:
        return self.requests.status(request_id)

    def confirm(self, request_id: str) -> ErasureStatus:
        return self.requests.confirm(request_id)

    def wait(self, request_id: str, timeout: float | None) -> ErasureStatus:
        return self.requests.wait(request_id, timeout)

    def pending(self, retry_stuck: bool = False) -> bool:
        return self.purger.pending(retry_stuck)

    def purge(
        self,
        progress: Progress | None = None,
        check_stop: Callable[[], None] | None = None,
        *,
        retry_stuck: bool = True,
    ) -> PurgeReport:
        return self.purger.purge(progress, check_stop, retry_stuck=retry_stuck)

    def retry_may_help(self, report: PurgeReport) -> bool:
        return self.purger.retry_may_help(report)

    def signer(self) -> Signer:
        return self.attestor.signer()

    def attest(self, request_id: str) -> Certificate:
        return self.attestor.attest(request_id)

    def verify_audit(self) -> dict[str, Any]:
        return self.audit.summary()

    def retention(self) -> list[Retention]:
        return self.horizons.retention()

    def rotate(self, progress: Progress | None = None) -> RotationReport:
        return self.rotation.rotate(progress)

    def backup(self, dest: Path) -> BackupInfo:
        return self.backups.backup(dest)

    def release_backup(self, backup_id: str) -> None:
        self.backups.release_backup(backup_id)
