"""The purge (S3): remove the rows of every applied plan in bounded chunks, have the backend
reclaim the space they held (``backend.physical.reclaim()``; SQLite truncates the WAL), clear
what memory holds, then hand every request whose purge layers (every layer the backend proves
but the scan) are all done to the verifying scan (``erasure.proof.verification``). Every step resumes
on the next purge."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...backends import ops
from ...backends.base import Backend, LayerEntry, Txn, dump_layers, parse_layers
from ...caches import StoreCaches
from ...clock import Clock
from ...crypto.provider import KeyProvider
from ...faults import fault_point
from ...ledger.exclusive_keys import dead_key_rows
from ...ledger.journal import anchor_audit, chunk_records, pause_between_chunks
from ...ledger.plan import ForgetPlan
from ...model import ErasureState, Layer, LayerState, Mode, PurgeReport
from ..proof.verification import PENDING_STATES, Progress, Verifier

__all__ = ["Purger"]

_ROWS_LAYER: dict[str, Layer] = {
    Mode.COMPLIANCE: Layer.ROWS,
    Mode.OPERATIONAL: Layer.RECLAIM,
}  # the layer a purge's row removal fills


def _done(**evidence: Any) -> LayerEntry:
    return LayerEntry(LayerState.DONE, evidence)


def _pending(**evidence: Any) -> LayerEntry:
    return LayerEntry(LayerState.PENDING, evidence)


class Purger:
    def __init__(
        self,
        backend: Backend,
        provider: KeyProvider,
        verifier: Verifier,
        caches: StoreCaches,
        clock: Clock,
    ) -> None:
        self._clock = clock  # what a sweep of expired records counts as now
        self._backend = backend
        self._provider = provider
        self._verifier = verifier
        self._caches = caches
        # every layer the backend proves but the scan: all done before a request is scanned
        self._purge_layers = tuple(p.layer for p in backend.physical.layers if p.layer != Layer.SCAN)

    def pending(self, retry_stuck: bool = False) -> bool:
        """Is a request waiting for a purge: a compliance one shredded, or purged and not verified
        (and -- if stuck -- worth scanning again, see ``Verifier.worth_scanning``), or an
        operational one whose rows are not reclaimed yet?"""
        with self._backend.read() as txn:
            rows = txn.run(ops.Erasures((ErasureState.TOMBSTONED, *PENDING_STATES)))
        return any(
            not r.layer_entries[Layer.RECLAIM].done
            if r.mode == Mode.OPERATIONAL
            else r.state == ErasureState.SHREDDED
            or (r.state in PENDING_STATES and self._verifier.worth_scanning(r, retry_stuck))
            for r in rows
        )

    @staticmethod
    def retry_may_help(report: PurgeReport) -> bool:
        """Did a purge leave a request short of its purge layers (an open reader blocking WAL
        truncation, say)? Time may finish those; a failed scan waits for someone to act."""
        return any(state == ErasureState.SHREDDED for state in report.requests.values())

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
        self._caches.sync()
        stop = check_stop or (lambda: None)
        reclaimed, cleared = self._remove_rows(stop)
        fault_point("purge.rows")
        left = self._caches.forget(cleared)  # caches and index entries; returns entries left
        space = self._backend.physical.reclaim()  # the freed bytes made unreachable (SQLite: the WAL)
        fault_point("purge.wal")
        requests: dict[str, str] = {}
        scan: dict[str, Any] = {"files": 0, "bytes": 0, "probes": 0, "matches": 0, "positive_control": False}
        with self._backend.write() as txn:
            for row in txn.run(ops.Erasures(PENDING_STATES)):
                layers = {**row.layer_entries, **space.layers}
                layers[Layer.INDEX] = (
                    _done(entries_left_in_memory=0, on_disk_snapshots=0)
                    if left == 0
                    else _pending(entries_left_in_memory=left, gap="vectors are still in the in-memory index")
                )
                state = ErasureState.PURGED if self._purge_layers_done(layers) else row.state
                txn.run(ops.UpdateErasure(row.id, {"layers": dump_layers(layers), "state": state}))
        with self._backend.read() as txn:
            # a request purged earlier is verified only while every purge layer is done now (a
            # reader may block this purge's WAL truncation): no certificate over a pending layer
            to_verify = [
                r
                for r in txn.run(ops.Erasures([ErasureState.PURGED]))
                if self._purge_layers_done(r.layer_entries) and self._verifier.worth_scanning(r, retry_stuck)
            ]
        stop()
        if to_verify:
            scan = self._verifier.verify(to_verify, _with_stop(progress, stop))
        with self._backend.read() as txn:
            for row in txn.run(ops.Erasures()):
                requests[row.id] = row.state
            anchor = {"request_count": len(requests), "reclaimed": reclaimed, "wal_truncated": space.done}
        with self._backend.write() as txn:
            anchor_audit(self._provider, txn, "purge", anchor)
        fault_point("purge.done")
        return PurgeReport(requests=requests, reclaimed=reclaimed, wal_truncated=space.done, scan=scan)

    def _purge_layers_done(self, layers: Mapping[str, LayerEntry]) -> bool:
        return all(layers[name].done for name in self._purge_layers)

    def _remove_rows(self, check_stop: Callable[[], None]) -> tuple[int, list[str]]:
        """Delete the rows of every request whose plan is applied (operational: reclaim its hidden
        rows; compliance: every row of its records, scopes and subjects), then expired rows: at
        most ``chunk_records()`` record ids per transaction, each chunk's progress recorded with it,
        so a large request never holds the write lock long and resumes where it stopped.
        Returns the rows removed and the record ids whose in-memory copies must go."""
        with self._backend.read() as txn:
            rows = [
                r
                for r in txn.run(ops.Erasures([ErasureState.TOMBSTONED, *PENDING_STATES]))
                if r.applied is None
            ]
        work: list[_RowRemoval] = []
        cleared: list[str] = []
        for row in rows:
            plan = ForgetPlan.from_entry(row.plan_entry)
            if plan.compliance:
                cleared += plan.record_ids
            if not row.layer_entries[_ROWS_LAYER[row.mode]].done:
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
                swept = txn.run(ops.SweepExpired(self._clock.now(), chunk_records()))
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
        text = txn.run(ops.ErasureLayers(self.request_id))
        layers = {} if text is None else parse_layers(text)
        if text is None or layers[name].done:
            return 0, 0, True  # another process finished it
        done, total = txn.run(ops.PurgeProgress(self.request_id))
        part = self.ids[done : done + budget]
        finished = done + len(part) >= len(self.ids)
        if self.plan.compliance:
            scopes, subjects = self.keys if finished else ([], [])
            removed = txn.run(ops.PurgeErased(part, scopes, subjects, self.plan.version))
        else:
            removed = txn.run(ops.DeleteHidden(part))
        if finished:
            layers[name] = _done(rows_removed=total + removed, records=len(self.ids))
            txn.run(ops.UpdateErasure(self.request_id, {"layers": dump_layers(layers)}))
            txn.run(ops.SetPurgeProgress(self.request_id, None))
        else:
            txn.run(ops.SetPurgeProgress(self.request_id, done + len(part), total + removed))
        return removed, len(part), finished


def _with_stop(progress: Progress | None, stop: Callable[[], None]) -> Progress:
    """A scan's progress callback that also checks ``stop`` (raising it kills the scan child)."""

    def report(done: int, total: int) -> None:
        stop()
        if progress is not None:
            progress(done, total)

    return report
