"""The erasure side of a store, assembled: one object the store holds, handing each call to the
module whose one job it is, and running purges as the store's purge mode says.

- ``erasure.status``: a request's status, ``confirm_erasure`` and ``wait``
- ``erasure.purge``: row removal, WAL truncation, memory, then the verifying scan
- ``erasure.verification``: the scan and each request's verdict
- ``erasure.horizon``: the horizon and what retains KEK epochs
- ``erasure.attest``: certificates
- ``erasure.audit_check``: the audit log against the key provider's ledger
- ``erasure.rotation`` and ``erasure.backup``: KEK rotation, backups
- ``erasure.applier`` and ``erasure.background``: large forgets' chunks, the worker thread

What it shares with the store is :class:`~cenotaph.memory.StoreMemory` (caches and how fresh
they are) and the :class:`~cenotaph.erasure.ledger.Ledger`; it never calls back into the store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..backends.base import Backend, ErasureRow
from ..clock import Clock
from ..crypto.keys import KeyChain
from ..crypto.provider import KeyProvider
from ..memory import StoreMemory
from ..model import BackupInfo, Certificate, ErasureStatus, PurgeReport, Retention, RotationReport
from .applier import PlanApplier
from .attest import Attestor
from .audit_check import AuditCheck
from .background import ErasureWorker
from .backup import BACKUP_MANIFEST, Backups
from .certificate import Signer
from .horizon import Horizons
from .ledger import Ledger
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
        memory: StoreMemory,
        ledger: Ledger,
        mode: str,
        clock: Clock,
    ) -> None:
        self.mode = mode  # the purge mode (erasure.background.PURGE_MODES)
        self._memory = memory
        self._ledger = ledger
        self.horizons = Horizons(backend, provider)
        self._verifier = Verifier(
            backend, provider, keys, lambda row: self.horizons.horizon(row, retention=())
        )
        self.audit = AuditCheck(backend, provider, memory, ledger)
        self.requests = RequestStatus(backend, self.horizons, self.audit, memory, self.advance)
        self.purger = Purger(backend, provider, self._verifier, memory, clock)
        self.attestor = Attestor(backend, provider, self.requests, self.horizons, self.audit)
        self.rotation = Rotation(backend, provider, keys, self.horizons, memory)
        self.backups = Backups(backend, provider, keys, memory)
        self.applier = PlanApplier(backend, ledger.view, memory)
        self.worker = ErasureWorker(self._background_pass)
        memory.on_replayed_chunks = self.worker.wake

    def resume(self) -> None:
        """A large forget cut short (by a crash) is finished now (W7), and pending requests are
        purged: in the background by default, else here and by purge()."""
        if self.mode == "background":
            if self.applier.pending() or self.purger.pending():
                self.worker.nudge()
        else:
            self.applier.resume()

    def advance(self, timeout: float | None) -> None:
        """Move pending requests forward once, for wait(): a background pass that starts after
        now (its failure raised here), else chunks and a purge in this thread."""
        if self.mode == "background":
            error = self.worker.wait_for(self.worker.nudge(thorough=True), timeout)
            self._memory.check_open()
            if error is not None:
                raise error
        else:
            self.purge_all()

    def purge_all(self, progress: Progress | None = None) -> PurgeReport:
        """Finish a large forget still being applied, then purge (``Store.purge``)."""
        self._memory.check_open()
        self.applier.resume()
        return self.purger.purge(progress)

    def _background_pass(self, check_stop: Callable[[], None], thorough: bool) -> bool:
        """One pass of the background worker: finish chunked forgets, then (background mode) purge
        if a compliance request waits for it (``thorough``: a waiter asked, so stuck requests are
        tried again too). True if a retry may finish what is left."""
        self._ledger.flush_anchors()
        self.applier.resume()
        check_stop()
        if self.mode != "background" or not self.purger.pending(thorough):
            return False
        report = self.purger.purge(check_stop=check_stop, retry_stuck=thorough)
        return self.purger.retry_may_help(report)

    def row(self, request_id: object) -> ErasureRow:
        return self.requests.row(request_id)

    def status(self, request_id: str) -> ErasureStatus:
        return self.requests.status(request_id)

    def confirm(self, request_id: str) -> ErasureStatus:
        return self.requests.confirm(request_id)

    def wait(self, request_id: str, timeout: float | None) -> ErasureStatus:
        return self.requests.wait(request_id, timeout)

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
