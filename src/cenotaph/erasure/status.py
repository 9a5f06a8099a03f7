"""Where an erasure request stands, as its caller sees it: ``status``, ``confirm_erasure`` and
``wait`` (why a request is not verified is ``erasure.proof.verdicts``; its horizon ``erasure.lifecycle.horizon``).

States only move forward on evidence::

    tombstoned (operational; stays there)
    shredded   keys destroyed with the tombstone, in the forget's transaction
    purged     rows deleted, WAL truncated, in-memory index and caches cleared
    verified   every owned file scanned: 0 matches of the request's probes, positive control found

A row that says verified is a cache: only a verifying scan in the audit log, announced in the
ledger, makes a request report verified.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..backends import ops
from ..backends.base import Backend, ErasureRow
from ..caches import StoreCaches
from ..consumers import feed as consumer_feed
from ..consumers.feed import ConsumerEvent, ConsumerInfo
from ..errors import ErasureNotProvableError, NotFoundError
from ..ledger.plan import ForgetPlan
from ..model import ErasureState, ErasureStatus, Layer, LayerState, LayerStatus, Mode, Retention
from ..validation import check_token_text
from .lifecycle.horizon import Horizons
from .proof.audit_check import AuditCheck
from .proof.verdicts import INVESTIGATE, OPERATIONAL_GAP, PURGE, Standing, standing_in, standing_of

__all__ = ["ALTERED_GAP", "RequestStatus"]

ALTERED_GAP = (
    "the database says this request is verified, but the audit log holds no scan that verified it: "
    "the database was altered; check the audit log against the ledger and investigate"
)


_NO_REQUEST = "no erasure request with that id; list them with store.erasures()"


class RequestStatus:
    def __init__(
        self,
        backend: Backend,
        horizons: Horizons,
        audit: AuditCheck,
        caches: StoreCaches,
        advance: Callable[[float | None], object],
    ) -> None:
        self._backend = backend
        self._horizons = horizons
        self._audit = audit
        self._caches = caches
        # what wait() does to move requests forward once (timeout in seconds): purge here, or
        # ask the store's background worker for a pass and wait for it (erasure.purge.worker)
        self._advance = advance

    def row(self, request_id: object) -> ErasureRow:
        checked = check_token_text(request_id, "request_id must be the id returned by store.forget()")
        self._caches.sync()
        with self._backend.read() as txn:
            row = txn.run(ops.Erasure(checked))
        if row is None:
            raise NotFoundError(_NO_REQUEST)
        return row

    def status(self, request_id: str) -> ErasureStatus:
        """Where the request stands, read in one transaction: its row, and (compliance) the
        pending requests and their probe epochs and the consumers asked, the same statements
        however many requests are pending."""
        checked = check_token_text(request_id, "request_id must be the id returned by store.forget()")
        self._caches.sync()
        with self._backend.read() as txn:
            found = txn.run(ops.Erasure(checked))
            compliance = found is not None and found.mode == Mode.COMPLIANCE
            pending = Horizons.read_pending(txn) if compliance else None
            asked = consumer_feed.standing(txn, checked) if compliance else []
        if found is None:
            raise NotFoundError(_NO_REQUEST)
        if pending is None:
            return self._judge(found, standing_in(self._backend, found), [], asked)
        by_id = {r.id: r for r in pending[0]}
        # a request it waits for is pending too, else verified (it waits no more)
        return self._judge(found, standing_of(found, by_id.get), self._horizons.retention(pending), asked)

    def statuses(self) -> list[tuple[ErasureRow, ErasureStatus]]:
        """Every request, oldest first, with where it stands: read in one transaction of as many
        statements however many requests there are (every row, the pending ones and their probe
        epochs, the consumers and every request's events), then judged as :meth:`status` does."""
        self._caches.sync()
        with self._backend.read() as txn:
            rows = txn.run(ops.Erasures())
            pending = Horizons.read_pending(txn)
            known = {c.id: c for c in consumer_feed.consumers(txn)}
            events = consumer_feed.events(txn)
        asked: dict[str, list[tuple[ConsumerInfo | None, ConsumerEvent]]] = {}
        for event in events:
            asked.setdefault(event.request_id, []).append((known.get(event.consumer_id), event))
        by_id = {r.id: r for r in rows}
        retention = self._horizons.retention(pending) if rows else []
        judged = []
        for row in rows:
            compliance = row.mode == Mode.COMPLIANCE
            standing = standing_of(row, by_id.get)
            mine = asked.get(row.id, []) if compliance else []
            judged.append((row, self._judge(row, standing, retention if compliance else [], mine)))
        return judged

    def _judge(
        self,
        row: ErasureRow,
        standing: Standing,
        retention: list[Retention],
        asked: list[tuple[ConsumerInfo | None, ConsumerEvent]],
    ) -> ErasureStatus:
        """Where ``row`` stands, from what was read about it: the requests it waits for
        (``standing``), who retains which KEK epoch (compliance), the consumers asked."""
        layers = {n: LayerStatus(e.state, e.evidence) for n, e in row.layer_entries.items()}
        horizon, reason = self._horizons.horizon(row, retention=retention)
        held: tuple[Retention, ...] = ()
        if row.mode == Mode.COMPLIANCE and horizon is None:
            layers[Layer.HORIZON] = LayerStatus(LayerState.PENDING, {"reason": reason})
            epochs = set(ForgetPlan.from_entry(row.plan_entry).epochs)
            held = tuple(r for r in retention if r.epoch in epochs)
        state, gaps, stuck, next_step = row.state, standing.gaps, standing.stuck, standing.next_step
        if (
            state == ErasureState.VERIFIED
            and row.mode == Mode.COMPLIANCE
            and row.id not in self._audit.vouched()
        ):
            # the row is a cache: only a verifying scan in the audit log, announced in the
            # ledger, makes a request report verified (an edited row must not); no purge changes that
            state, gaps, stuck, next_step = ErasureState.PURGED, (ALTERED_GAP, *gaps), True, INVESTIGATE
        if asked:  # compliance only
            layer, owing = consumer_feed.layer(asked)
            layers[Layer.CONSUMERS] = layer
            if owing:
                # verified means every layer done: consumers that took its records answered too
                if state == ErasureState.VERIFIED:
                    state, stuck = ErasureState.PURGED, True
                gaps = (*gaps, *owing)
                next_step = next_step or consumer_feed.ACKNOWLEDGE
        return ErasureStatus(state, layers, horizon, gaps, stuck=stuck, next_step=next_step, retained_by=held)

    def confirm(self, request_id: str) -> ErasureStatus:
        if self.row(request_id).mode == Mode.OPERATIONAL:
            raise ErasureNotProvableError(OPERATIONAL_GAP, [OPERATIONAL_GAP])
        status = self.status(request_id)
        if ALTERED_GAP in status.gaps:
            self._audit.audited_verification(request_id)  # StorageError: the database was altered
        if status.state != ErasureState.VERIFIED or status.gaps:  # verified, and no layer short of done
            raise _not_provable(status, "erasure is not provable yet")
        # the row says verified; the ledger must hold the forget and the verified audit log a
        # scan that verified it, or the row was written by someone who can edit the database
        if self._audit.ledgered_plan(request_id)["mode"] != Mode.COMPLIANCE:
            raise ErasureNotProvableError(OPERATIONAL_GAP, [OPERATIONAL_GAP])
        self._audit.audited_verification(request_id)  # StorageError: the database was altered
        return status

    def wait(self, request_id: str, timeout: float | None) -> ErasureStatus:
        """Purge until the request is verified (operational: reclaimed) or ``timeout`` passes;
        raise ErasureNotProvableError once it cannot verify by purging (see ErasureRequest.wait)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        operational = self.row(request_id).mode == Mode.OPERATIONAL
        blocked_since: float | None = None
        idle_rounds = 0
        while True:
            before = self.status(request_id)
            if _finished(before, operational):
                return before
            if ALTERED_GAP in before.gaps:  # no purge changes that: say so at once
                raise _not_provable(before, f"erasure request {request_id} cannot verify by waiting")
            # always once: whatever kept it stuck may have been fixed since
            self._advance(None if deadline is None else max(0.0, deadline - time.monotonic()))
            status = self.status(request_id)
            if _finished(status, operational) or operational:
                return status
            if status.stuck:
                raise _not_provable(status, f"erasure request {request_id} cannot verify by waiting")
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return status
            if standing_in(self._backend, self.row(request_id)).blocked:  # an open reader: it may go away
                blocked_since = now if blocked_since is None else blocked_since
                if deadline is None and now - blocked_since > self._backend.physical.blocked_wait_s():
                    raise _not_provable(status, f"erasure request {request_id} is still blocked")
            else:  # nothing known blocks it, yet purging did not verify it: never loop on that
                idle_rounds = idle_rounds + 1 if status.state == before.state else 0
                if deadline is None and idle_rounds >= 3:
                    raise _not_provable(status, f"purging does not move erasure request {request_id} forward")
            time.sleep(0.05)


def _finished(status: ErasureStatus, operational: bool) -> bool:
    if operational:
        return status.layers[Layer.RECLAIM].state == LayerState.DONE
    return status.state == ErasureState.VERIFIED


def _not_provable(status: ErasureStatus, what: str) -> ErasureNotProvableError:
    """The error naming every gap and the one thing to do next."""
    gaps = list(status.gaps) or [f"the request is {status.state}, not verified"]
    step = status.next_step or PURGE
    if status.stuck:
        step = "purging again will not change this: " + step
    return ErasureNotProvableError(f"{what}: " + "; ".join(gaps) + f". Next: {step}.", gaps)
