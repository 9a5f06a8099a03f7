"""Erasure requests after the forget: purge, horizon, certificates, audit, rotation, backup (the
verifying scan is ``erasure.verification``; why a request is not verified, ``erasure.standing``).

States only move forward on evidence (SPEC W5, S3-S6)::

    tombstoned (operational; stays there)
    shredded   keys destroyed with the tombstone, in the forget's transaction
    purged     rows deleted, WAL truncated, in-memory index and caches cleared
    verified   every owned file scanned: 0 matches of the request's probes, positive control found
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..backends.base import Backend, ErasureRow, Txn
from ..backends.sqlite.backend import DB_NAME, busy_timeout_ms
from ..crypto.keys import KeyChain
from ..crypto.provider import KeyProvider
from ..durable import fsync, write_atomically
from ..errors import ErasureNotProvableError, InvalidValueError, NotFoundError, StorageError
from ..faults import fault_point
from ..model import (
    BackupInfo,
    Certificate,
    ErasureStatus,
    LayerStatus,
    PurgeReport,
    Retention,
    RotationReport,
)
from ..validation import check_token_text
from .audit import AuditEntry, entry_from_dict, verify_chain
from .certificate import Signer
from .forget import ForgetPlan
from .ledger import (
    AUDIT_CHAIN,
    KEK_EPOCH,
    KEKS_DESTROYED,
    all_anchors,
    all_intents,
    anchor_audit,
    chunk_records,
    pause_between_chunks,
)
from .standing import INVESTIGATE, OPERATIONAL_GAP, PURGE, Standing, standing_of
from .unshared import dead_key_rows
from .verification import PENDING_STATES, Progress, Verifier, now_iso

__all__ = ["ErasureService", "BACKUP_MANIFEST", "Progress"]

BACKUP_MANIFEST = "cenotaph-backup.json"
PURGE_LAYERS = ("rows", "wal", "index")
_ROWS_LAYER = {"compliance": "rows", "operational": "reclaim"}  # the layer a purge's row removal fills
ALTERED_GAP = (
    "the database says this request is verified, but the audit log holds no scan that verified it: "
    "the database was altered; check the audit log against the ledger and investigate"
)


def _done(**evidence: Any) -> dict[str, Any]:
    return {"state": "done", "evidence": evidence}


def _pending(**evidence: Any) -> dict[str, Any]:
    return {"state": "pending", "evidence": evidence}


class ErasureService:
    def __init__(
        self,
        backend: Backend,
        provider: KeyProvider,
        keys: KeyChain,
        clear_memory: Callable[[list[str]], int],
        sync: Callable[[], None],
    ) -> None:
        self._backend = backend
        self._provider = provider
        self._keys = keys
        self._clear_memory = clear_memory  # drops caches and index entries; returns entries left
        self._sync = sync
        self._verifier = Verifier(backend, provider, keys, lambda row: self._horizon(row, retention=()))
        # what wait() does to move requests forward once (timeout in seconds): purge here, or
        # ask the store's background worker for a pass and wait for it (erasure.background)
        self.advance: Callable[[float | None], object] = lambda timeout: self.purge()
        self.flush_anchors: Callable[[], None] = lambda: None  # anchors appended later (ledger)
        self._vouched_cache: tuple[tuple[int, int], frozenset[str]] | None = None

    # -- status ------------------------------------------------------------------------
    def row(self, request_id: object) -> ErasureRow:
        checked = check_token_text(request_id, "request_id must be the id returned by store.forget()")
        self._sync()
        with self._backend.read() as txn:
            row = txn.erasure(checked)
        if row is None:
            raise NotFoundError("no erasure request with that id; list them with store.erasures()")
        return row

    def status(self, request_id: str) -> ErasureStatus:
        row = self.row(request_id)
        layers = {
            n: LayerStatus(v["state"], v.get("evidence", {})) for n, v in json.loads(row.layers).items()
        }
        standing = self._standing(row)
        retention = self.retention() if row.mode == "compliance" else []
        horizon, reason = self._horizon(row, retention=retention)
        held: tuple[Retention, ...] = ()
        if row.mode == "compliance" and horizon is None:
            layers["horizon"] = LayerStatus("pending", {"reason": reason})
            epochs = set(ForgetPlan.from_entry(json.loads(row.plan)).epochs)
            held = tuple(r for r in retention if r.epoch in epochs)
        state, gaps, stuck, next_step = row.state, standing.gaps, standing.stuck, standing.next_step
        if state == "verified" and row.mode == "compliance" and row.id not in self._vouched():
            # the row is a cache: only a verifying scan in the audit log, announced in the
            # ledger, makes a request report verified (an edited row must not); no purge changes that
            state, gaps, stuck, next_step = "purged", (ALTERED_GAP, *gaps), True, INVESTIGATE
        return ErasureStatus(state, layers, horizon, gaps, stuck=stuck, next_step=next_step, retained_by=held)

    def _vouched(self) -> frozenset[str]:
        """Ids of the requests a scan verified, by audit entries whose chain holds and whose heads
        the ledger announced or anchored (cached until the log or the ledger grows)."""
        with self._backend.read() as txn:
            tail = txn.audit_tail()
            mark = (tail[0] if tail else 0, self._provider.ledger_mark())
            if self._vouched_cache is not None and self._vouched_cache[0] == mark:
                return self._vouched_cache[1]
            raw = txn.audit_entries()
            chain = txn.meta(AUDIT_CHAIN)
        ledger = self._provider.ledger()
        try:
            entries = [entry_from_dict(json.loads(e)) for e in raw]
            verify_chain(entries)
        except (ValueError, StorageError):
            entries = []  # an altered log vouches for nothing
        anchors = all_anchors(ledger, chain) or {}
        heads = all_intents(ledger, chain)
        heads.update((seq, h) for seq, found in anchors.items() for h in found)
        by_seq = {e.seq: e.head for e in entries}
        # the chain holds, so an anchored or announced head vouches for every entry up to it
        # (entries written before intents existed have no head of their own in the ledger, and a
        # purge announces only the last of the entries it appends in one transaction)
        anchored = max((seq for seq, head in heads if by_seq.get(seq) == head), default=0)
        vouched = frozenset(
            str(e.fields.get("request_id"))
            for e in entries
            if e.event == "verify"
            and e.fields.get("verified") is True
            and (e.seq <= anchored or (e.seq, e.head) in heads)
        )
        self._vouched_cache = (mark, vouched)
        return vouched

    def _standing(self, row: ErasureRow) -> Standing:
        def lookup(request_id: str) -> ErasureRow | None:
            with self._backend.read() as txn:
                return txn.erasure(request_id)

        return standing_of(row, lookup)

    def _horizon(
        self,
        row: ErasureRow,
        epochs: Sequence[int] | None = None,
        retention: Sequence[Retention] | None = None,
    ) -> tuple[datetime | None, str]:
        """S5: reached once every KEK epoch live at the forget (``epochs``; by default the row's
        plan's) is destroyed. Its reason names whatever holds a live one back (``retention``:
        :meth:`retention`, looked up if not given)."""
        if row.mode != "compliance":
            return None, "operational forgets have no erasure horizon"
        if epochs is None:
            epochs = ForgetPlan.from_entry(json.loads(row.plan)).epochs
        live = set(self._provider.live_epochs()) & set(epochs)
        if not live:
            stamp = row.horizon or now_iso()
            return datetime.fromisoformat(stamp), "every KEK epoch that wrapped a destroyed key is destroyed"
        reason = f"KEK epoch(s) {sorted(live)} still exist"
        holders = [r for r in (self.retention() if retention is None else retention) if r.epoch in live]
        backups = sorted({r.id for r in holders if r.holder == "backup"})
        if backups:
            reason += (
                f" and registered backup(s) {backups} need them: release_backup() them, then rotate_keys()"
            )
        requests = [r for r in holders if r.holder == "erasure"]
        if requests:
            reason += (
                " and " if backups else ": "
            ) + "a pending erasure's probes need them until it verifies ("
            reason += "; ".join(f"{r.id}: {r.release}" for r in requests) + ")"
        if not holders:
            reason += ": run rotate_keys() to destroy them"
        return None, reason

    def confirm(self, request_id: str) -> ErasureStatus:
        if self.row(request_id).mode == "operational":
            raise ErasureNotProvableError(OPERATIONAL_GAP, [OPERATIONAL_GAP])
        status = self.status(request_id)
        if ALTERED_GAP in status.gaps:
            self._audited_verification(request_id)  # StorageError: the database was altered
        if status.state != "verified" or status.gaps:  # verified, and no layer short of done
            raise _not_provable(status, "erasure is not provable yet")
        # the row says verified; the ledger must hold the forget and the verified audit log a
        # scan that verified it, or the row was written by someone who can edit the database
        if self._ledgered_plan(request_id)["mode"] != "compliance":
            raise ErasureNotProvableError(OPERATIONAL_GAP, [OPERATIONAL_GAP])
        self._audited_verification(request_id)  # StorageError: the database was altered
        return status

    def wait(self, request_id: str, timeout: float | None) -> ErasureStatus:
        """Purge until the request is verified (operational: reclaimed) or ``timeout`` passes;
        raise ErasureNotProvableError once it cannot verify by purging (see ErasureRequest.wait)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        operational = self.row(request_id).mode == "operational"
        blocked_since: float | None = None
        idle_rounds = 0
        while True:
            before = self.status(request_id)
            if _finished(before, operational):
                return before
            if ALTERED_GAP in before.gaps:  # no purge changes that: say so at once
                raise _not_provable(before, f"erasure request {request_id} cannot verify by waiting")
            # always once: whatever kept it stuck may have been fixed since
            self.advance(None if deadline is None else max(0.0, deadline - time.monotonic()))
            status = self.status(request_id)
            if _finished(status, operational) or operational:
                return status
            if status.stuck:
                raise _not_provable(status, f"erasure request {request_id} cannot verify by waiting")
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return status
            if self._standing(self.row(request_id)).blocked:  # an open reader: it may go away
                blocked_since = now if blocked_since is None else blocked_since
                if deadline is None and now - blocked_since > busy_timeout_ms() / 1000:
                    raise _not_provable(status, f"erasure request {request_id} is still blocked")
            else:  # nothing known blocks it, yet purging did not verify it: never loop on that
                idle_rounds = idle_rounds + 1 if status.state == before.state else 0
                if deadline is None and idle_rounds >= 3:
                    raise _not_provable(status, f"purging does not move erasure request {request_id} forward")
            time.sleep(0.05)

    # -- purge -------------------------------------------------------------------------
    def pending(self, retry_stuck: bool = False) -> bool:
        """Is a compliance request waiting for a purge (shredded, or purged and not verified,
        and -- if stuck -- worth scanning again, see ``Verifier.worth_scanning``)?"""
        with self._backend.read() as txn:
            rows = [r for r in txn.erasures(PENDING_STATES) if r.mode == "compliance"]
        return any(r.state == "shredded" or self._verifier.worth_scanning(r, retry_stuck) for r in rows)

    @staticmethod
    def retry_may_help(report: PurgeReport) -> bool:
        """Did a purge leave a request short of its purge layers (an open reader blocking WAL
        truncation, say)? Time may finish those; a failed scan waits for someone to act."""
        return any(state == "shredded" for state in report.requests.values())

    def purge(
        self,
        progress: Progress | None = None,
        check_stop: Callable[[], None] | None = None,
        *,
        retry_stuck: bool = True,
    ) -> PurgeReport:
        """``check_stop``: called at every step boundary; raising there ends the purge as a crash
        would (every step resumes on the next purge). ``retry_stuck``: scan stuck requests again
        too (a background pass for other requests does not; see ``Verifier.worth_scanning``)."""
        self._sync()
        stop = check_stop or (lambda: None)
        reclaimed, cleared = self._remove_rows(stop)
        fault_point("purge.rows")
        left = self._clear_memory(cleared)
        wal_done, wal_left = self._backend.checkpoint_truncate()
        fault_point("purge.wal")
        requests: dict[str, str] = {}
        scan: dict[str, Any] = {"files": 0, "bytes": 0, "probes": 0, "matches": 0, "positive_control": False}
        with self._backend.write() as txn:
            for row in txn.erasures(["shredded", "purged"]):
                layers = json.loads(row.layers)
                layers["wal"] = (
                    _done(wal_bytes=0)
                    if wal_done
                    else _pending(
                        wal_bytes=wal_left,
                        gap="an open reader blocks wal_checkpoint(TRUNCATE); close it and purge again",
                    )
                )
                layers["index"] = (
                    _done(entries_left_in_memory=0, on_disk_snapshots=0)
                    if left == 0
                    else _pending(entries_left_in_memory=left, gap="vectors are still in the in-memory index")
                )
                state = "purged" if _purge_layers_done(layers) else row.state
                txn.update_erasure(row.id, layers=json.dumps(layers), state=state)
        with self._backend.read() as txn:
            # a request purged earlier is verified only while every purge layer is done now (a
            # reader may block this purge's WAL truncation): no certificate over a pending layer
            to_verify = [
                r
                for r in txn.erasures(["purged"])
                if _purge_layers_done(r) and self._verifier.worth_scanning(r, retry_stuck)
            ]
        stop()
        if to_verify:
            scan = self._verifier.verify(to_verify, _with_stop(progress, stop))
        with self._backend.read() as txn:
            for row in txn.erasures():
                requests[row.id] = row.state
            anchor = {"request_count": len(requests), "reclaimed": reclaimed, "wal_truncated": wal_done}
        with self._backend.write() as txn:
            anchor_audit(self._provider, txn, "purge", anchor)
        fault_point("purge.done")
        return PurgeReport(requests=requests, reclaimed=reclaimed, wal_truncated=wal_done, scan=scan)

    def _remove_rows(self, check_stop: Callable[[], None]) -> tuple[int, list[str]]:
        """Delete the rows of every request whose plan is applied (operational: reclaim its hidden
        rows; compliance: every row of its records, scopes and subjects), then expired rows: at
        most ``chunk_records()`` record ids per transaction, each chunk's progress recorded with it,
        so a large request never holds the write lock long and resumes where it stopped.
        Returns the rows removed and the record ids whose in-memory copies must go."""
        with self._backend.read() as txn:
            rows = [r for r in txn.erasures(["tombstoned", *PENDING_STATES]) if r.applied is None]
        work: list[_RowRemoval] = []
        cleared: list[str] = []
        for row in rows:
            plan = ForgetPlan.from_entry(json.loads(row.plan))
            if plan.compliance:
                cleared += plan.record_ids
            if json.loads(row.layers)[_ROWS_LAYER[row.mode]]["state"] != "done":
                work.append(self._removal(row.id, plan))
        reclaimed = 0
        while work:
            with self._backend.write() as txn:
                budget = max(1, chunk_records() // 4)  # deleting a record's rows costs ~4x hiding it
                while work and budget > 0:
                    removed, used, finished = work[0].remove_some(txn, budget)
                    reclaimed, budget = reclaimed + removed, budget - max(used, 1)
                    if finished:
                        work.pop(0)
            fault_point("purge.chunk")
            check_stop()
            if work:
                pause_between_chunks()
        while True:
            with self._backend.write() as txn:
                swept = txn.sweep_expired(time.time(), chunk_records())
            reclaimed += swept
            if swept < chunk_records():
                return reclaimed, cleared

    def _removal(self, request_id: str, plan: ForgetPlan) -> _RowRemoval:
        """What removing a request's rows takes; the key rows only its records used are found
        before any of their lineage rows is deleted, outside the write lock (reading every record
        of a large plan), and their rows are removed only while their key is still destroyed."""
        if not plan.compliance:
            return _RowRemoval(request_id, plan, plan.hide, ([], []))
        ids = plan.record_ids
        with self._backend.read() as txn:
            listed = (plan.destroy_scopes, plan.destroy_subjects)
            keys = dead_key_rows(txn, plan.target_kind, plan.target, ids, listed)
        return _RowRemoval(request_id, plan, ids, keys)

    # -- certificates ------------------------------------------------------------------
    def signer(self) -> Signer:
        return Signer.from_private_bytes(self._provider.signing_key())

    def attest(self, request_id: str) -> Certificate:
        row = self.row(request_id)
        if row.mode == "operational":
            raise ErasureNotProvableError(OPERATIONAL_GAP, [OPERATIONAL_GAP])
        plan = self._ledgered_plan(request_id)
        if plan["mode"] != "compliance":  # the ledger's word, not the row's
            raise ErasureNotProvableError(OPERATIONAL_GAP, [OPERATIONAL_GAP])
        status = self.confirm(request_id)
        verified = self._audited_verification(request_id)
        row = self.row(request_id)
        horizon, reason = self._horizon(row, plan.get("epochs"))
        # what the certificate states comes from the ledger (the request) and from the verified
        # audit log (the scan), not from the request's row, which the database holds
        fields = {
            "request_id": plan["request_id"],
            "target": plan["target"],
            "target_kind": plan["target_kind"],
            "mode": plan["mode"],
            "requested_at": plan["requested_at"],
            "verified_at": verified.get("verified_at") or row.verified_at,
            "forget_version": plan["version"],
            "layers": {name: layer.to_dict() for name, layer in status.layers.items()},
            "scan": verified.get("scan") or json.loads(row.scan or "{}"),
            "horizon": horizon.isoformat() if horizon else None,
            "horizon_reason": reason,
            "root_of_trust": self._provider.root_of_trust,
        }
        with self._backend.write() as txn:
            anchor_audit(self._provider, txn, "attest", {"request_id": row.id})
            tail = txn.audit_tail()
        fields["audit_head"] = entry_from_dict(json.loads(tail[1])).head if tail else ""
        return self.signer().sign_certificate(fields)

    # -- audit -------------------------------------------------------------------------
    def verify_audit(self) -> dict[str, Any]:
        entries, head, anchored = self._verified_audit()
        return {"entries": len(entries), "head": head, "anchored_seq": anchored}

    def _verified_audit(self) -> tuple[list[AuditEntry], str, int]:
        """The audit log, checked against the provider's ledger (S7): entries, head, newest anchor.

        The log and the ledger cannot be read in one snapshot, and another process's operation
        appends to the ledger before its COMMIT and after it. A failed check is therefore retried
        after a pause and a sync: an honest race resolves, tampering does not."""
        self.flush_anchors()
        for attempt in range(3):
            try:
                return self._check_audit_once()
            except StorageError:
                if attempt == 2:
                    raise
                time.sleep(0.05 * (attempt + 1))
                self._sync()
        raise AssertionError("unreachable")

    def _check_audit_once(self) -> tuple[list[AuditEntry], str, int]:
        # under the write lock, with the ledger read inside it: no other process can be between
        # its ledger append and its COMMIT, so the log and the ledger agree unless altered
        with self._backend.write() as txn:
            raw = txn.audit_entries()
            chain = txn.meta(AUDIT_CHAIN)
            ledger = self._provider.ledger()
        try:
            entries = [entry_from_dict(json.loads(e)) for e in raw]
        except ValueError as exc:
            raise StorageError(
                "an audit entry is not valid JSON: the audit log was altered; restore it from a trusted copy "
                "and investigate"
            ) from exc
        head = verify_chain(entries)
        anchors = all_anchors(ledger, chain)
        if anchors is None:
            raise StorageError(
                "the audit chain id is not registered in the key provider's ledger: the audit log was "
                "altered; restore it from a trusted copy and investigate"
            )
        _check_forgets_audited(ledger, entries)
        by_seq = {e.seq: e.head for e in entries}
        last = max(by_seq, default=0)
        _check_tail_announced(entries, anchors, all_intents(ledger, chain))
        for seq, heads in sorted(anchors.items()):
            if seq > last:
                raise StorageError(
                    f"the audit log was altered (truncated): entry {seq} is anchored in the key provider's ledger but "
                    "missing; restore it from a trusted copy and investigate"
                )
            if len(heads) > 1 or by_seq.get(seq) not in heads:
                raise StorageError(
                    f"audit entry {seq} does not match the head anchored in the key provider's ledger: the "
                    "audit log was altered; restore it from a trusted copy and investigate"
                )
        return entries, head, max(anchors, default=0)

    def _ledgered_plan(self, request_id: str) -> dict[str, Any]:
        """The request's plan as the provider's ledger holds it (a forget ledgers it before it
        commits): a request row the ledger lacks was written into the database by someone else."""
        for entry in self._provider.ledger():
            if entry.get("kind") == "forget" and entry.get("request_id") == request_id:
                plan: dict[str, Any] = entry["plan"]
                return plan
        raise StorageError(
            "this request is not in the key provider's ledger: the database was altered; no "
            "certificate was issued, investigate"
        )

    def _audited_verification(self, request_id: str) -> dict[str, Any]:
        """The fields of the newest audit entry whose scan verified the request, from the verified
        log: a certificate needs more than the request's row saying verified."""
        entries, _, _ = self._verified_audit()
        found = [
            e.fields
            for e in entries
            if e.event == "verify"
            and e.fields.get("request_id") == request_id
            and e.fields.get("verified") is True
        ]
        if not found:
            raise StorageError(
                "the audit log holds no scan that verified this request, although its row says "
                "verified: the database was altered; no certificate was issued, investigate"
            )
        return dict(found[-1])

    # -- rotation ----------------------------------------------------------------------
    def rotate(self, progress: Progress | None = None) -> RotationReport:
        self._sync()
        new_epoch = self._provider.new_epoch()
        with self._backend.write() as txn:
            self._keys.refresh_epoch()
            rows = txn.wrapped_keys()
            rewrapped = []
            for n, (table, pk, wrapped, epoch) in enumerate(rows, start=1):
                key = self._keys.unwrap(wrapped, epoch)
                if key is None:
                    raise StorageError(
                        "a live key could not be unwrapped during rotation; nothing was changed"
                    )
                new_wrapped, _ = self._keys.wrap(key, new_epoch)
                rewrapped.append((table, pk, new_wrapped, new_epoch))
                if progress is not None and n % 1000 == 0:
                    progress(n, len(rows))
            txn.rewrap(rewrapped)
            txn.set_meta(KEK_EPOCH, new_epoch)
            anchor_audit(self._provider, txn, "rotate", {"epoch": new_epoch, "rewrapped": len(rewrapped)})
        # old wrapped bytes must leave the WAL before old epochs can be said to be gone
        self._backend.checkpoint_truncate()
        with self._backend.read() as txn:
            probing = txn.probe_key_epochs()  # pending requests' probes: kept until they verify
        destroyed = [
            epoch
            for epoch in self._provider.live_epochs()
            # the provider decides "no registered backup needs it" and destroys in one step: a
            # backup registering at this moment (another thread or process) never loses its epoch
            if epoch != new_epoch and epoch not in probing and self._provider.destroy_epoch(epoch)
        ]
        self._keys.forget_epoch_sealers()
        self._record_horizons(destroyed=bool(destroyed))
        if progress is not None:
            progress(len(rows), len(rows))
        # every old epoch still alive is held by someone: name each holder, why, and the release
        retained = tuple(r for r in self.retention() if r.epoch != new_epoch)
        return RotationReport(
            new_epoch=new_epoch,
            rewrapped=len(rewrapped),
            destroyed_epochs=tuple(destroyed),
            retained_epochs=tuple(sorted({r.epoch for r in retained})),
            retained=retained,
        )

    def retention(self) -> list[Retention]:
        """Who keeps each live KEK epoch from being destroyed by rotation, why, and what releases
        it: registered backups, and pending requests whose probes that epoch wraps."""
        live = set(self._provider.live_epochs())
        held = [
            Retention(
                epoch,
                "backup",
                backup_id,
                "a registered backup needs this epoch to stay restorable",
                "release_backup() it once the backup is no longer needed, then rotate_keys()",
            )
            for backup_id, epochs in sorted(self._provider.backups().items())
            for epoch in sorted(set(epochs) & live)
        ]
        with self._backend.read() as txn:
            pending = [(r, txn.probe_key(r.id)) for r in txn.erasures(PENDING_STATES)]
        for row, key in pending:
            if key is None or key[1] not in live:
                continue
            standing = self._standing(row)
            why = f"its probes are sealed under this epoch until it verifies; it is {row.state}"
            why += f": {standing.gaps[0]}" if standing.gaps else ""
            release = f"{standing.next_step}, then rotate_keys()"
            if standing.stuck:
                release = f"it cannot verify by purging again: {standing.next_step}; then rotate_keys()"
            held.append(Retention(key[1], "erasure", row.id, why, release, standing.stuck))
        return sorted(held, key=lambda r: (r.epoch, r.holder, r.id))

    def _record_horizons(self, *, destroyed: bool = False) -> None:
        """Persist the instant each request's horizon was reached (first seen after rotation).
        After epochs were ``destroyed``, also commit a change every other process notices at its
        next call, when it drops the destroyed epochs' KEKs from its memory."""
        with self._backend.write() as txn:
            if destroyed:
                txn.set_meta(KEKS_DESTROYED, txn.meta_all().get(KEKS_DESTROYED, 0) + 1)
            for row in txn.erasures():
                if row.mode == "compliance" and row.horizon is None:
                    horizon, reason = self._horizon(row, retention=())  # stored only once reached
                    if horizon is not None:
                        txn.update_erasure(row.id, horizon=horizon.isoformat(), horizon_reason=reason)

    # -- backups -----------------------------------------------------------------------
    def backup(self, dest: Path) -> BackupInfo:
        self._sync()
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
        try:
            epochs = self._copy_for_backup(backup_id, dest / DB_NAME)
            fsync(dest / DB_NAME)
            info = BackupInfo(
                id=backup_id,
                path=str(dest),
                created_at=datetime.now(UTC),
                epochs=tuple(epochs),
                bytes=(dest / DB_NAME).stat().st_size,
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
            for name in (BACKUP_MANIFEST, DB_NAME):
                (dest / name).unlink(missing_ok=True)
            raise
        return info

    def _copy_for_backup(self, backup_id: str, target: Path) -> list[int]:
        """Copy the database and register the KEK epochs the copy needs, race-free with a
        rotation in any process: register what is in use, copy, register what the copy itself
        uses, then check none of it was destroyed before that registration (else copy again)."""
        for _ in range(3):
            with self._backend.read() as txn:
                epochs = txn.epochs_in_use() | {self._keys.refresh_epoch()}
            self._provider.register_backup(backup_id, sorted(epochs))
            target.unlink(missing_ok=True)
            epochs |= self._backend.vacuum_into(target)
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


@dataclass
class _RowRemoval:
    """One request's rows to remove: its record ids, in order, and its dead key rows."""

    request_id: str
    plan: ForgetPlan
    ids: list[str]
    keys: tuple[list[bytes], list[bytes]]  # scope and subject tokens removed with the last chunk

    def remove_some(self, txn: Txn, budget: int) -> tuple[int, int, bool]:
        """Remove the rows of up to ``budget`` more records; returns (rows removed, records
        done, whether the request's rows are all gone). The cursor is read and advanced in
        ``txn``; the request's layers are written once, when its rows are all gone."""
        name = _ROWS_LAYER[self.plan.mode]
        text = txn.erasure_layers(self.request_id)
        layers = {} if text is None else json.loads(text)
        if text is None or layers[name]["state"] == "done":
            return 0, 0, True  # another process finished it
        done, total = txn.purge_progress(self.request_id)
        part = self.ids[done : done + budget]
        finished = done + len(part) >= len(self.ids)
        if self.plan.compliance:
            scopes, subjects = self.keys if finished else ([], [])
            removed = txn.purge_erased(part, scopes, subjects, self.plan.version)
        else:
            removed = txn.delete_hidden(part)
        if finished:
            layers[name] = _done(rows_removed=total + removed, records=len(self.ids))
            txn.update_erasure(self.request_id, layers=json.dumps(layers))
            txn.set_purge_progress(self.request_id, None)
        else:
            txn.set_purge_progress(self.request_id, done + len(part), total + removed)
        return removed, len(part), finished


def _with_stop(progress: Progress | None, stop: Callable[[], None]) -> Progress:
    """A scan's progress callback that also checks ``stop`` (raising it kills the scan child)."""

    def report(done: int, total: int) -> None:
        stop()
        if progress is not None:
            progress(done, total)

    return report


def _finished(status: ErasureStatus, operational: bool) -> bool:
    if operational:
        return status.layers["reclaim"].state == "done"
    return status.state == "verified"


def _not_provable(status: ErasureStatus, what: str) -> ErasureNotProvableError:
    """The error naming every gap and the one thing to do next."""
    gaps = list(status.gaps) or [f"the request is {status.state}, not verified"]
    step = status.next_step or PURGE
    if status.stuck:
        step = "purging again will not change this: " + step
    return ErasureNotProvableError(f"{what}: " + "; ".join(gaps) + f". Next: {step}.", gaps)


def _purge_layers_done(row: ErasureRow | dict[str, Any]) -> bool:
    layers = json.loads(row.layers) if isinstance(row, ErasureRow) else row
    return all(layers[name]["state"] == "done" for name in PURGE_LAYERS)


def _check_forgets_audited(ledger: Sequence[dict[str, Any]], entries: Sequence[AuditEntry]) -> None:
    """The forgets of the audit log and of the provider's ledger are the same, saying the same.

    Anchors cover the log only up to the newest one; a replayed forget's entry, or one whose
    anchor was lost to a crash after COMMIT, may lie beyond it. The ledger itself is trusted and
    every store on this keyring applies every forget in it, so it pins those entries instead:
    each ledger forget has exactly one audit entry, and no audit forget lacks a ledger forget."""
    forgets = [e for e in entries if e.event == "forget"]
    audited = {str(e.fields.get("request_id")): e.fields for e in forgets}
    logged = {
        str(entry["plan"]["request_id"]): entry["plan"] for entry in ledger if entry.get("kind") == "forget"
    }
    for request_id, plan in logged.items():
        fields = audited.get(request_id)
        expected = {
            **{k: plan[k] for k in ("mode", "target_kind", "target", "version")},
            "records": len(plan["destroy_records"]) or len(plan["hide"]),
        }
        if fields is None or any(fields.get(k) != v for k, v in expected.items()):
            raise StorageError(
                "the audit log lacks or misstates a forget recorded in the key provider's ledger: the "
                "audit log was altered; restore it from a trusted copy and investigate"
            )
    if len(audited) != len(forgets) or not audited.keys() <= logged.keys():
        raise StorageError(
            "the audit log holds a forget the key provider's ledger never recorded (or one twice): "
            "the audit log was altered; restore it from a trusted copy and investigate"
        )


def _check_tail_announced(
    entries: Sequence[AuditEntry], anchors: dict[int, set[str]], intents: set[tuple[int, str]]
) -> None:
    """Entries past the newest anchor must have been announced before their COMMIT.

    An entry is vouched for by the newest anchor at or after it, or by an intent naming it or a
    later entry (the hash chain covers everything before a vouched-for entry). Beyond that, only
    a replayed forget may appear (replays are pinned by the ledger, see
    :func:`_check_forgets_audited`): any other entry there was written by someone who can write
    the database but not the key provider."""
    heads = {e.seq: e.head for e in entries}
    vouched = max([0, *anchors, *(seq for seq, head in intents if heads.get(seq) == head)])
    for entry in entries:
        if entry.seq > vouched and not (entry.event == "forget" and entry.fields.get("replayed") is True):
            raise StorageError(
                f"audit entry {entry.seq} was never announced to the key provider's ledger: the audit "
                "log was altered (an entry was appended); restore it from a trusted copy and investigate"
            )
