"""The store's side of its consumers: register and find them, record what they took, list and
acknowledge their events. Every row it writes is content-free (``feed``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from ..backends import ops
from ..backends.base import Backend
from ..crypto.provider import KeyProvider
from ..errors import NotFoundError
from ..ledger.journal import anchor_audit
from ..model import Mode
from ..validation import check_token_text
from . import feed
from .feed import ConsumerEvent, ConsumerInfo

__all__ = ["Registry"]


class Registry:
    def __init__(self, backend: Backend, provider: KeyProvider, now: Callable[[], float]) -> None:
        self._backend = backend
        self._provider = provider
        self._now = now

    def _at(self) -> datetime:
        return datetime.fromtimestamp(self._now(), UTC)

    def register(self, name: object, ack_days: object) -> ConsumerInfo:
        checked = feed.check_consumer_name(name)
        days = feed.check_ack_days(ack_days)
        with self._backend.write() as txn:
            # a name is a label, not an identity: two tenants may each have a "summarizer", and
            # refusing one would tell it the other exists; the id tells consumers apart
            info = ConsumerInfo(feed.new_consumer_id(), checked, days, self._at())
            txn.run(ops.InsertConsumer(info.id, info.name, info.ack_days, info.registered_at.isoformat()))
        return info

    def all(self) -> list[ConsumerInfo]:
        with self._backend.read() as txn:
            return feed.consumers(txn)

    def find(self, consumer_id: object) -> ConsumerInfo:
        checked = check_token_text(
            consumer_id, "consumer_id must be an id store.register_consumer() returned"
        )
        found = next((c for c in self.all() if c.id == checked), None)
        if found is None:
            raise NotFoundError("no consumer with that id; list them with store.consumers()")
        return found

    def took(self, consumer_id: str, taken: Sequence[tuple[str, int]]) -> None:
        """Record what a consumer took. A record a compliance forget reached between its read and
        now (the forget's own notice saw no take of it) asks the consumer here, in this transaction."""
        if not taken:
            return
        with self._backend.write() as txn:
            txn.run(ops.InsertTakes(consumer_id, sorted(set(taken)), self._at().isoformat()))
            ids = sorted({r for r, _ in taken})
            lineage = txn.run(ops.Lineage(ids))
            late: dict[int, list[str]] = {}
            for record_id in ids:
                row = lineage.get(record_id)
                # forgotten: its lineage row says when; purged: the erased ids keep the forget's version
                version = row.forgotten_version if row is not None else txn.run(ops.ErasedVersion(record_id))
                if version is not None:
                    late.setdefault(version, []).append(record_id)
            if late:
                for request in txn.run(ops.Erasures()):
                    if request.mode == Mode.COMPLIANCE and request.version in late:
                        feed.notify(txn, request.id, late[request.version], request.requested_at)

    def events(self, consumer_id: str | None, *, pending_only: bool) -> list[ConsumerEvent]:
        with self._backend.read() as txn:
            found = feed.events(txn, consumer_id=consumer_id)
        return [e for e in found if e.pending or not pending_only]

    def acknowledge(self, consumer_id: str, request_id: object, evidence: object) -> ConsumerEvent:
        checked = check_token_text(
            request_id, "request_id must be the request id of one of the consumer's events"
        )
        text = feed.check_evidence(evidence)
        with self._backend.write() as txn:
            mine = feed.events(txn, consumer_id=consumer_id, request_id=checked)
            if not mine:
                raise NotFoundError(
                    "this consumer has no event for that erasure request (it took none of its records); "
                    "acknowledge only the request ids of its pending events"
                )
            if mine[0].pending:
                txn.run(ops.AcknowledgeConsumerEvent(consumer_id, checked, self._at().isoformat(), text))
                # in the audit log (and so the transparency log) too: a certificate states only
                # acknowledgements the verified log holds, not a row someone edited
                anchor_audit(self._provider, txn, feed.ACK_EVENT, feed.ack_entry(consumer_id, checked, text))
            return feed.events(txn, consumer_id=consumer_id, request_id=checked)[0]
