"""The audit log checked against the key provider's ledger (S7): the chain holds, every anchor
and announced head matches, every forget is in both, nothing was appended behind the ledger's
back. Which requests a verifying scan vouches for, and a request's plan as the ledger holds it,
are read through the same check: a certificate needs more than a row that says verified."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ...audit.chain import AuditEntry, entry_from_dict, verify_chain
from ...backends import ops
from ...backends.base import Backend
from ...caches import StoreCaches
from ...crypto.provider import KeyProvider
from ...errors import StorageError
from ...ledger.journal import AUDIT_CHAIN, Ledger, all_anchors, all_intents

__all__ = ["AuditCheck", "check_tail_announced"]


class AuditCheck:
    def __init__(
        self,
        backend: Backend,
        provider: KeyProvider,
        caches: StoreCaches,
        ledger: Ledger,
    ) -> None:
        self._backend = backend
        self._provider = provider
        self._caches = caches
        self._ledger = ledger
        self._vouched_cache: tuple[tuple[int, int], frozenset[str]] | None = None

    def summary(self) -> dict[str, Any]:
        """``verify_audit``'s answer: entries, head, newest anchored entry."""
        entries, head, anchored = self.verified()
        return {"entries": len(entries), "head": head, "anchored_seq": anchored}

    def verified(self) -> tuple[list[AuditEntry], str, int]:
        """The audit log, checked against the provider's ledger (S7): entries, head, newest anchor.

        The log and the ledger cannot be read in one snapshot, and another process's operation
        appends to the ledger before its COMMIT and after it. A failed check is therefore retried
        after a pause and a sync: an honest race resolves, tampering does not."""
        self._ledger.flush_anchors()  # anchors appended later
        for attempt in range(3):
            try:
                return self._check_once()
            except StorageError:
                if attempt == 2:
                    raise
                time.sleep(0.05 * (attempt + 1))
                self._caches.sync()
        raise AssertionError("unreachable")

    def _check_once(self) -> tuple[list[AuditEntry], str, int]:
        # under the write lock, with the ledger read inside it: no other process can be between
        # its ledger append and its COMMIT, so the log and the ledger agree unless altered
        with self._backend.write() as txn:
            raw = txn.run(ops.AuditEntries())
            chain = txn.run(ops.Meta(AUDIT_CHAIN))
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
        check_tail_announced(entries, anchors, all_intents(ledger, chain))
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

    def vouched(self) -> frozenset[str]:
        """Ids of the requests a scan verified, by audit entries whose chain holds and whose heads
        the ledger announced or anchored (cached until the log or the ledger grows)."""
        with self._backend.read() as txn:
            tail = txn.run(ops.AuditTail())
            mark = (tail[0] if tail else 0, self._provider.ledger_mark())
            if self._vouched_cache is not None and self._vouched_cache[0] == mark:
                return self._vouched_cache[1]
            raw = txn.run(ops.AuditEntries())
            chain = txn.run(ops.Meta(AUDIT_CHAIN))
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

    def ledgered_plan(self, request_id: str) -> dict[str, Any]:
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

    def audited_verification(self, request_id: str) -> dict[str, Any]:
        """The fields of the newest audit entry whose scan verified the request, from the verified
        log: a certificate needs more than the request's row saying verified."""
        entries, _, _ = self.verified()
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


def check_tail_announced(
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
