"""Applying a large forget's records in bounded chunks, resumable from the ledger after a crash.

A plan with more than ``CHUNK_RECORDS`` record ids commits only its head with the ledger entry
(tombstones; scope and subject keys destroyed), with its apply cursor set to 0 (``applied``,
kept apart from the request's row, which holds the whole plan and is rewritten whole by any
update).
From that commit on the ledger decides in every process: writes to the target are refused, and
every id the plan lists is hidden from every read (S9). :class:`PlanApplier` then:

1. hides and destroys the plan's record ids, ``CHUNK_RECORDS`` at a time, each chunk one write
   transaction that also checks the chunk's postcondition and advances ``applied`` -- so an
   unrelated writer waits one chunk at most, and a crash loses at most the chunk in flight;
2. sweeps the target (outside the write lock: no write can reach it any more) for anything it
   still holds unforgotten from before the forget -- a record written just before the tombstone
   that the enumeration missed -- and finds the scope and subject keys only the plan's records
   use (``cenotaph.ledger.exclusive_keys``: reading every one of them); then, in one last transaction, it
   destroys those keys (except any a write since has used), hides and destroys what the sweep
   found and what derives from it, checks it, and marks the request applied (``shredded``).

Whoever finds a request with ``applied`` set finishes it: the forget that started it, the
background worker of any process that opens the store, or ``purge()``. Chunks are idempotent
and each reads the cursor inside its own transaction, so two appliers share the work safely.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...backends import ops
from ...backends.base import Backend, LineageRow, Txn, dump_layers
from ...caches import StoreCaches
from ...faults import fault_point
from ...ledger.exclusive_keys import split_tokens
from ...ledger.journal import chunk_records, initial_layers, pause_between_chunks
from ...ledger.plan import ForgetPlan, apply_records
from ...ledger.view import LedgerView
from ...model import ErasureState
from ..planning.planner import check_postcondition, sweep

__all__ = ["PlanApplier"]


class PlanApplier:
    def __init__(self, backend: Backend, view: LedgerView, caches: StoreCaches) -> None:
        self._backend = backend
        self._view = view  # plans come from the ledger: the request row is only a cache of one
        self._caches = caches  # what this process holds of the plan's records is dropped there

    def pending(self) -> list[str]:
        """Ids of the requests whose plan is not applied whole yet, oldest first."""
        with self._backend.read() as txn:
            return [row.id for row in txn.run(ops.UnappliedErasures())]

    def resume(self) -> int:
        """Finish every request not applied whole; returns how many this call finished."""
        finished = 0
        for request_id in self.pending():
            self._view.refresh()
            entry = self._view.plans.get(request_id)
            if entry is not None:  # a row the ledger lacks was planted: integrity names it
                finished += self.run(ForgetPlan.from_entry(entry))
        return finished

    def run(self, plan: ForgetPlan) -> bool:
        """Apply ``plan``'s records from its cursor on; True if this call marked it applied."""
        ids = plan.record_ids
        while True:
            with self._backend.write() as txn:
                start = txn.run(ops.ApplyCursor(plan.request_id))
                if start is None:
                    return False  # applied whole already (by another applier)
                part = ids[start : start + chunk_records()]
                if not part:
                    break
                apply_records(txn, plan, part)
                check_postcondition(txn, plan, part)
                txn.run(ops.SetApplied(plan.request_id, start + len(part)))
            fault_point("forget.chunk")
            pause_between_chunks()
        with self._backend.read() as txn:  # reading the whole target: outside the lock
            seen = txn.run(ops.Count("clock"))
            missed = sweep(txn, plan)
            unshared = plan.keys_to_destroy(txn) if plan.compliance else ([], [])
        with self._backend.write() as txn:
            if txn.run(ops.ApplyCursor(plan.request_id)) is None:
                return False
            if plan.compliance:
                scopes, subjects = _still_unshared(txn, unshared, txn.run(ops.WrittenSince(seen)))
                txn.run(ops.DestroyKeys(scopes, subjects, plan.version))
            if missed:
                # under the lock again: what derives from a missed record may have been written
                # since the sweep read it (its source is in no plan the ledger holds)
                if plan.compliance:
                    missed = sorted({*missed, *txn.run(ops.DerivedClosure(missed))})
                apply_records(txn, plan, missed)
                check_postcondition(txn, plan, missed)
            state = ErasureState.SHREDDED if plan.compliance else ErasureState.TOMBSTONED
            txn.run(
                ops.UpdateErasure(
                    plan.request_id, {"state": state, "layers": dump_layers(initial_layers(plan))}
                )
            )
            txn.run(ops.SetApplied(plan.request_id, None))
            txn.run(
                ops.Advance("forget_epoch")
            )  # other processes drop cached keys of what was just destroyed
            txn.after_commit(self._caches.forget_all)
        fault_point("forget.chunk")
        return True


def _still_unshared(
    txn: Txn, keys: tuple[list[bytes], list[bytes]], newer: Sequence[LineageRow]
) -> tuple[list[bytes], list[bytes]]:
    """Of the scope and subject keys found unshared before this transaction, those no record
    written since uses (a reauthorized write may have used one: its key must stay)."""
    scopes, subjects = keys
    if not newer:
        return scopes, subjects
    used_scopes: set[bytes] = set()
    for token in {bytes(r.scope_token) for r in newer}:
        current: bytes | None = token
        while current is not None and current not in used_scopes:
            used_scopes.add(current)
            found = txn.run(ops.ScopeRows([current])).get(current)
            current = None if found is None or found.parent is None else bytes(found.parent)
    used_subjects = {t for r in newer for t in split_tokens(r.subject_tokens)}
    return [t for t in scopes if t not in used_scopes], [t for t in subjects if t not in used_subjects]
