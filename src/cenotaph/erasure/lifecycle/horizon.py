"""The erasure horizon (S5) and what holds it back: a compliance request reaches its horizon
once every KEK epoch live at its forget is destroyed; registered backups and pending requests'
probes keep epochs alive, each with why and what releases it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ...backends import ops
from ...backends.base import Backend, ErasureRow, Txn
from ...crypto.provider import KeyProvider
from ...ledger.journal import KEKS_DESTROYED
from ...ledger.plan import ForgetPlan
from ...model import Mode, Retention
from ..proof.verdicts import standing_of
from ..proof.verification import PENDING_STATES, now_iso

__all__ = ["Horizons", "Pending"]

Pending = tuple[list[ErasureRow], dict[str, int]]  # pending requests, their probe keys' epochs


class Horizons:
    def __init__(self, backend: Backend, provider: KeyProvider) -> None:
        self._backend = backend
        self._provider = provider

    def horizon(
        self,
        row: ErasureRow,
        epochs: Sequence[int] | None = None,
        retention: Sequence[Retention] | None = None,
    ) -> tuple[datetime | None, str]:
        """S5: reached once every KEK epoch live at the forget (``epochs``; by default the row's
        plan's) is destroyed. Its reason names whatever holds a live one back (``retention``:
        :meth:`retention`, looked up if not given)."""
        if row.mode != Mode.COMPLIANCE:
            return None, "operational forgets have no erasure horizon"
        if epochs is None:
            epochs = ForgetPlan.from_entry(row.plan_entry).epochs
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

    @staticmethod
    def read_pending(txn: Txn) -> Pending:
        """The pending requests and their probe keys' epochs: two statements, however many."""
        return txn.run(ops.Erasures(PENDING_STATES)), txn.run(ops.ProbeEpochs())

    def retention(self, pending: Pending | None = None) -> list[Retention]:
        """Who keeps each live KEK epoch from being destroyed by rotation, why, and what releases
        it: registered backups, and pending requests whose probes that epoch wraps (``pending``:
        :meth:`read_pending`, read here if not given)."""
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
        if pending is None:
            with self._backend.read() as txn:
                pending = self.read_pending(txn)
        rows, epochs = pending
        by_id = {r.id: r for r in rows}
        for row in rows:
            epoch = epochs.get(row.id)
            if epoch is None or epoch not in live:
                continue
            # a request it waits for is pending too (else verified: it waits no more)
            standing = standing_of(row, by_id.get)
            why = f"its probes are sealed under this epoch until it verifies; it is {row.state}"
            why += f": {standing.gaps[0]}" if standing.gaps else ""
            release = f"{standing.next_step}, then rotate_keys()"
            if standing.stuck:
                release = f"it cannot verify by purging again: {standing.next_step}; then rotate_keys()"
            held.append(Retention(epoch, "erasure", row.id, why, release, standing.stuck))
        return sorted(held, key=lambda r: (r.epoch, r.holder, r.id))

    def record(self, *, destroyed: bool = False) -> None:
        """Persist the instant each request's horizon was reached (first seen after rotation).
        After epochs were ``destroyed``, also commit a change every other process notices at its
        next call, when it drops the destroyed epochs' KEKs from its memory."""
        with self._backend.write() as txn:
            if destroyed:
                txn.run(ops.SetMeta(KEKS_DESTROYED, txn.run(ops.MetaAll()).get(KEKS_DESTROYED, 0) + 1))
            for row in txn.run(ops.Erasures()):
                if row.mode == Mode.COMPLIANCE and row.horizon is None:
                    horizon, reason = self.horizon(row, retention=())  # stored only once reached
                    if horizon is not None:
                        txn.run(
                            ops.UpdateErasure(
                                row.id, {"horizon": horizon.isoformat(), "horizon_reason": reason}
                            )
                        )
