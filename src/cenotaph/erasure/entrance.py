"""The one entrance to erasure: forget, purge, status and attest, and the rest of what a store
asks of its erasure side, each handed to the module whose one job it is.

A forget runs here from start to end: the target is surveyed outside the write lock, its plan
committed with its ledger entry (whole if small, else its head), a large plan's records applied
in chunks, and its purge run as the store's purge mode says. The store validates what a caller
gave and enters here once; nothing here calls back into the store.

- ``erasure.planning``: the plan (``planner``) and its probes (``probes``, ``sampling``)
- ``erasure.purge``: row removal, WAL truncation, caches, then the verifying scan (``purger``);
  large forgets' chunks (``chunks``) and the worker thread (``worker``)
- ``erasure.proof``: the scan and each request's verdict, the audit log against the key
  provider's ledger, the database against the ledger (``integrity``)
- ``erasure.status``: a request's status, ``confirm_erasure`` and ``wait``
- ``erasure.certify``: certificates
- ``erasure.lifecycle``: the horizon and what retains KEK epochs, KEK rotation, backups,
  restore, and what a store's opening settles (``opening``)

What it shares with the store is :class:`~cenotaph.caches.StoreCaches` (caches and how fresh
they are) and the :class:`~cenotaph.ledger.journal.Ledger`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from datetime import datetime
from pathlib import Path
from typing import Any

from ..audit.chain import verified_requests
from ..backends import ops
from ..backends.base import Backend, ErasureRow, Txn, WriteLocks
from ..caches import StoreCaches
from ..clock import Clock
from ..consumers import feed as consumer_feed
from ..crypto.keys import KeyChain
from ..crypto.provider import KeyProvider
from ..crypto.tokens import TokenMaker
from ..errors import ErasureNotProvableError, StorageError
from ..faults import fault_point
from ..ledger.journal import AUDIT_CHAIN, Ledger, chunk_records
from ..ledger.plan import ForgetPlan
from ..model import (
    BackupInfo,
    Certificate,
    ErasureRequest,
    ErasureStatus,
    PurgeReport,
    Retention,
    RotationReport,
)
from ..records import RecordCrypto
from ..scope import Scope
from .certify.attest import Attestor
from .certify.certificate import Signer
from .certify.sanitization import Requester
from .lifecycle.backup import BACKUP_MANIFEST, Backups
from .lifecycle.horizon import Horizons
from .lifecycle.opening import settle_at_open
from .lifecycle.rotation import Rotation
from .planning.planner import ForgetPlanner, ForgetTarget, Survey, check_postcondition
from .planning.probes import RecordSample, sample_reads
from .planning.sampling import ProbeSampler
from .proof.audit_check import AuditCheck
from .proof.integrity import find_tampering
from .proof.verification import Progress, Verifier
from .purge.chunks import PlanApplier
from .purge.purger import Purger
from .purge.worker import CLOSE_PASS_S, ErasureWorker, failure_for_caller, purge_mode
from .status import RequestStatus

__all__ = ["BACKUP_MANIFEST", "CLOSE_PASS_S", "ESCAPE_RETRIES", "Erasure", "Progress", "purge_mode"]

# surveys again of a forget whose postcondition found a write that escaped its survey (target locks)
ESCAPE_RETRIES = 8


class Erasure:
    def __init__(
        self,
        backend: Backend,
        provider: KeyProvider,
        keys: KeyChain,
        tokens: TokenMaker,
        crypto: RecordCrypto,
        sampler: ProbeSampler,
        caches: StoreCaches,
        ledger: Ledger,
        auto_purge: object,
        clock: Clock,
    ) -> None:
        self._mode = purge_mode(auto_purge)  # the purge mode (erasure.purge.worker.PURGE_MODES)
        self._backend = backend
        self._provider = provider
        self._tokens = tokens
        self._crypto = crypto
        self._sampler = sampler
        self._caches = caches
        self._ledger = ledger
        self._planner = ForgetPlanner(tokens, clock)
        self.horizons = Horizons(backend, provider)
        self._verifier = Verifier(
            backend, provider, keys, lambda row: self.horizons.horizon(row, retention=())
        )
        self.audit = AuditCheck(backend, provider, caches, ledger)
        self.requests = RequestStatus(backend, self.horizons, self.audit, caches, self.advance)
        self.purger = Purger(backend, provider, self._verifier, caches, clock)
        self.attestor = Attestor(backend, provider, self.requests, self.horizons, self.audit)
        self.rotation = Rotation(backend, provider, keys, self.horizons, caches)
        self.backups = Backups(backend, provider, keys, caches)
        self.applier = PlanApplier(backend, ledger.view, caches)
        self.worker = ErasureWorker(self._background_pass)
        caches.on_replayed_chunks = self.worker.wake
        ledger.on_replay = self._ask_consumers  # a forget replayed from the ledger asks them too

    # -- the purge mode and the worker ---------------------------------------------------
    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: object) -> None:
        self._mode = purge_mode(value)

    def open(self, *, restored: bool) -> None:
        """Open the store: settle its database in one write transaction (keyring, audit chain,
        a restored copy's audit, the ledger: ``lifecycle.opening``), then resume its work."""
        with self._backend.write() as txn:
            settle_at_open(txn, self._provider, self._tokens, self._ledger, self._caches, restored=restored)
        self.resume()

    def resume(self) -> None:
        """A large forget cut short (by a crash) is finished now (W7), and pending requests are
        purged: in the background by default, else here and by purge()."""
        if self._mode == "background":
            if self.applier.pending() or self.purger.pending():
                self.worker.nudge()
        else:
            self.applier.resume()

    def finish(self, timeout: float) -> None:
        """Let work still due have one more background pass, for at most ``timeout`` seconds."""
        self.worker.finish(timeout)

    def close(self) -> None:
        """Stop the worker at its next step boundary."""
        self.worker.close()

    def raise_background_failure(self) -> None:
        """Raise, once, a background pass's failure that no caller has been told of."""
        failure = self.worker.take_failure()
        if failure is not None:
            raise failure_for_caller(failure)

    def advance(self, timeout: float | None) -> None:
        """Move pending requests forward once, for wait(): a background pass that starts after
        now (its failure raised here), else chunks and a purge in this thread."""
        if self._mode == "background":
            error = self.worker.wait_for(self.worker.nudge(thorough=True), timeout)
            self._caches.check_open()
            if error is not None:
                raise error
        else:
            self.purge_all()

    def _background_pass(self, check_stop: Callable[[], None], thorough: bool) -> bool:
        """One pass of the background worker: finish chunked forgets, then (background mode) purge
        if a compliance request waits for it (``thorough``: a waiter asked, so stuck requests are
        tried again too). True if a retry may finish what is left."""
        self._ledger.flush_anchors()
        self.applier.resume()
        check_stop()
        if self._mode != "background" or not self.purger.pending(thorough):
            return False
        report = self.purger.purge(check_stop=check_stop, retry_stuck=thorough)
        return self.purger.retry_may_help(report)

    # -- forgetting ----------------------------------------------------------------------
    def forget_scope(
        self,
        scope: Scope,
        key: str | None,
        mode: str,
        include_ancestors: bool,
        *,
        exact: bool,
        owner: bytes | None,
    ) -> ErasureRequest:
        """Forget ``key`` in ``scope``'s subtree (``exact``: in ``scope`` only), or (``key=None``)
        the whole subtree; the arguments were checked by the store."""
        target = self._planner.scope_or_key(scope, key, mode, include_ancestors, exact=exact, owner=owner)
        return self._forget(target)

    def forget_subject(self, subject: bytes, owner: bytes | None) -> ErasureRequest:
        """Compliance-forget every record carrying the subject (its token), and what derived from them."""
        return self._forget(self._planner.subject(subject, owner))

    def _forget(self, target: ForgetTarget) -> ErasureRequest:
        """Survey the target outside the write lock, commit the plan (whole if small, else its
        head: tombstones and scope/subject keys) with its ledger entry, apply a large plan's
        records in chunks, then purge as the purge mode says."""
        locks = self._planner.locks(target) if self._backend.concurrent_writers else None
        for attempt in range(ESCAPE_RETRIES + 1):
            survey = self._survey(target)
            sample = (
                self._sample_ahead(survey) if target.compliance and survey.size > chunk_records() else None
            )
            try:
                plan, whole = self._commit_forget(target, survey, sample, locks)
                break
            except ErasureNotProvableError as exc:
                # under target locks, a write of the target that took its version before the
                # survey's clock and committed after the survey read escapes both the survey and
                # "written since": the postcondition found it and nothing was changed. Surveyed
                # again, it is seen (ESCAPE_RETRIES bounds a target written without pause)
                if locks is None or exc.gaps != ("postcondition",) or attempt == ESCAPE_RETRIES:
                    raise
        else:  # pragma: no cover - the loop breaks or raises
            raise AssertionError("unreachable")
        fault_point("forget.committed")
        if not whole:
            self._finish_chunked(plan)
        if plan.compliance and self._mode == "sync":
            self.purge_all()
        elif self._mode == "background":  # an operational forget's rows are reclaimed too
            self.worker.nudge()
        return self.handle(plan.request_id, plan.version, plan.mode, plan.target_kind, plan.requested_at)

    def _survey(self, target: ForgetTarget) -> Survey:
        """The target surveyed outside the write lock, the caches synced around it with no round
        trip of their own: the change marker comes with the survey's clock."""

        def surveyed() -> tuple[Hashable, Survey]:
            survey = self._planner.survey(self._backend.read, target)
            return survey.marker, survey

        return self._caches.sync_around(surveyed)

    def _commit_forget(
        self, target: ForgetTarget, survey: Survey, sample: RecordSample | None, locks: WriteLocks | None
    ) -> tuple[ForgetPlan, bool]:
        """The forget's transaction: plan, postcondition, ledger append, COMMIT; the plan and
        whether it was applied whole."""
        if locks is not None and self._ledger.changed():
            locks = None  # a ledger this process has not replayed: store-wide, where replaying is safe
        # what the transaction reads first goes with its BEGIN and lock (PostgreSQL: one round
        # trip): the counters, its version, the slots the plan checks for ancestor copies, what
        # was written since the survey's clock, the audit log's tail and the audit chain id, and
        # (compliance) its records' sample, the target scope's key rows and the consumers that
        # took one of its records, and (scope or subject) where the keys only its records use
        # are found. Read once the lock is held, so as current as if each were
        # read where it is used (the audit log, the chain id and the consumers' takes change only
        # in a transaction the lock excludes; the sample and its keys are used before this one
        # writes); a write drops what it may change (a ledger replay's, the forget's own), read
        # again where used, as is a list that "written since" made longer
        ahead: list[ops.Op[Any]] = [ops.MetaAll(), ops.Reserve(1, self._ledger.view.max_version)]
        ahead += self._planner.read_ahead(target)
        ahead += [ops.WrittenSince(survey.since), ops.AuditTail(), ops.Meta(AUDIT_CHAIN)]
        if target.compliance:  # its records, as the plan lists them unless some were written since
            listed = sorted(set(survey.destroy))
            keys = self._planner.opening_keys(target)
            ahead += sample_reads(listed, *keys) if sample is None and listed else []
            ahead += consumer_feed.notify_reads(listed)
            ahead += self._planner.unshared_reads(target, listed) if len(listed) <= chunk_records() else []
        with self._backend.write(locks, ahead) as txn:
            if locks is None:  # under target locks another forget may be between ledger and COMMIT
                self._ledger.reconcile_if_changed(txn)
            # another process forgot since our last sync: its records are not in our plan
            before = txn.run(ops.MetaAll())["forget_epoch"]
            others = before != self._caches.forget_epoch or self._ledger.view.refresh() > 0
            request_id = "er_" + os.urandom(12).hex()
            # a version of its own (above every version reserved before, and the ledger's
            # newest): under target locks others take theirs meanwhile
            version = txn.run(ops.Reserve(1, self._ledger.view.max_version)) + 1
            plan = self._planner.plan(txn, request_id, version, target, survey)
            fault_point("forget.planned")
            whole = self._ledger.commit_plan(txn, plan, check_postcondition, sample)
            self._ask_consumers(txn, plan)
            # the plan's head advanced the epoch once (``apply_head``), and no other transaction
            # can meanwhile: forgets are serial, and whatever else moves it (a replay, a chunk)
            # is store-wide, excluded by this transaction's locks
            epoch = before + 1

            def forgotten() -> None:
                # under the backend lock, right after COMMIT: no other thread may see the forget
                # in the database and still be answered from memory; the ledger view learns this
                # plan now (and any other process's since: then their records are not in ours)
                fresh = self._ledger.view.refresh()
                self._forgotten(plan, epoch, others or fresh > 1)

            txn.after_commit(forgotten)
        return plan, whole

    @staticmethod
    def _ask_consumers(txn: Txn, plan: ForgetPlan) -> None:
        """In a compliance forget's transaction (first commit or replay): each consumer that took
        a record of it is asked to delete it (``consumers.feed``; never twice)."""
        if plan.compliance:
            consumer_feed.notify(txn, plan.request_id, plan.record_ids, plan.requested_at)

    def _finish_chunked(self, plan: ForgetPlan) -> None:
        try:
            self.applier.run(plan)
        except Exception as exc:
            self.worker.nudge()  # the forget is in effect: its chunks go on in the background
            raise StorageError(
                f"the forget is in effect (request {plan.request_id} is tombstoned: its target refuses "
                "writes and its records are hidden), but destroying its records' keys was cut short "
                f"({type(exc).__name__}); it resumes in the background or at the next open: poll "
                "store.erasure(request_id)"
            ) from exc

    def _sample_ahead(self, survey: Survey) -> RecordSample:
        """Probes of a large forget's records, sampled before its transaction (keys still exist)."""
        with self._backend.read() as txn:
            return self._sampler.sample_ahead(txn, survey.destroy)

    def _forgotten(self, plan: ForgetPlan, epoch: int, others: bool) -> None:
        """This process's forget committed at ``epoch``: drop what memory holds of it."""
        self._caches.forget(None if others else [*plan.hide, *plan.destroy_records])
        self._caches.forget_epoch = epoch

    # -- erasure requests ----------------------------------------------------------------
    def handle(
        self, request_id: str, version: int, mode: Any, kind: str, requested_at: str
    ) -> ErasureRequest:
        return ErasureRequest(
            id=request_id,
            version=version,
            mode=mode,
            target_kind=kind,
            requested_at=datetime.fromisoformat(requested_at),
            _status=self.requests.status,
            _wait=self.requests.wait,
        )

    def request(self, request_id: object) -> ErasureRequest:
        """The handle of an earlier forget, to poll."""
        row = self.row(request_id)
        return self.handle(row.id, row.version, row.mode, row.target_kind, row.requested_at)

    def all_requests(self) -> list[ErasureRequest]:
        """Every erasure request of the store, oldest first."""
        self._caches.sync()
        with self._backend.read() as txn:
            rows = txn.run(ops.Erasures())
        return [self.handle(r.id, r.version, r.mode, r.target_kind, r.requested_at) for r in rows]

    def all_statuses(self) -> list[tuple[ErasureRequest, ErasureStatus]]:
        """Every erasure request, oldest first, with its status: one read transaction in all."""
        return [
            (self.handle(r.id, r.version, r.mode, r.target_kind, r.requested_at), status)
            for r, status in self.requests.statuses()
        ]

    def row(self, request_id: object) -> ErasureRow:
        return self.requests.row(request_id)

    def status(self, request_id: str) -> ErasureStatus:
        return self.requests.status(request_id)

    def confirm(self, request_id: str) -> ErasureStatus:
        """The request's status if verified; else ErasureNotProvableError naming every gap (and a
        background purge's failure, if no caller has been told of it yet)."""
        try:
            return self.requests.confirm(request_id)
        except ErasureNotProvableError as exc:
            failure = self.worker.take_failure()
            if failure is None:
                raise
            raise ErasureNotProvableError(f"{exc}; {failure_for_caller(failure)}", exc.gaps) from failure

    def wait(self, request_id: str, timeout: float | None) -> ErasureStatus:
        return self.requests.wait(request_id, timeout)

    # -- purge, certificates, audit ------------------------------------------------------
    def purge_all(self, progress: Progress | None = None) -> PurgeReport:
        """Finish a large forget still being applied, then purge (``Store.purge``)."""
        self._caches.check_open()
        self.applier.resume()
        return self.purger.purge(progress)

    def signer(self) -> Signer:
        return self.attestor.signer()

    def attest(
        self, request_id: str, requester_key_id: str | None, requester_name: str | None
    ) -> Certificate:
        return self.attestor.attest(request_id, Requester(requester_key_id, requester_name))

    def verify_audit(self) -> dict[str, Any]:
        return self.audit.summary()

    def integrity(self) -> list[str]:
        """Every way the database disagrees with the key provider's ledger (S9), one sentence
        each; the audit log was verified just before."""
        # under the write lock: no other process is between its ledger append and its COMMIT,
        # and the log, the requests and the ledger are read as of one instant
        with self._backend.write() as txn:
            self._ledger.reconcile_if_changed(txn)  # a forget whose process died before COMMIT
            verified = verified_requests(txn.run(ops.AuditEntries()))  # a log verify_audit just checked
            live = set(self._provider.live_epochs())
            return find_tampering(txn, self._ledger.view, self._crypto.open, verified, live)

    # -- key lifecycle -------------------------------------------------------------------
    def retention(self) -> list[Retention]:
        return self.horizons.retention()

    def rotate(self, progress: Progress | None = None) -> RotationReport:
        return self.rotation.rotate(progress)

    def backup(self, dest: Path) -> BackupInfo:
        return self.backups.backup(dest)

    def release_backup(self, backup_id: str) -> None:
        self.backups.release_backup(backup_id)
