"""The forget ledger: each forget's plan, durable in the key provider before the database commits.

``commit_plan`` applies a plan in the forget's transaction -- all of it, or for a large plan
its head only (tombstones, scope and subject keys; ``erasure.purge.chunks`` does its records in
chunks after) -- records its erasure request and an audit entry, then appends the content-free
entry (plan + audit head) to the provider's ledger and only then lets the transaction commit
(W7). ``reconcile`` re-applies, on open, restore or when another process's ledger grew, every
entry the database does not have: a forget that reached the ledger happened, even if its
process died before COMMIT.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..audit.chain import GENESIS, chain_entry, entry_from_dict, entry_to_dict
from ..backends import ops
from ..backends.base import ErasureRow, LayerEntry, Txn, dump_layers
from ..crypto.provider import KeyProvider
from ..errors import KeyProviderError
from ..faults import fault_point
from ..model import ErasureState, Layer, LayerState
from .plan import ForgetPlan, apply_head, apply_plan, reapply_to_records
from .view import FORGET_KIND, GRANT_KIND, IMPORT_KIND, LIFT_KIND, LedgerView

__all__ = [
    "CHUNK_RECORDS",
    "Ledger",
    "all_anchors",
    "all_intents",
    "anchor_audit",
    "anchor_audit_many",
    "append_anchor",
    "append_audit",
    "chunk_records",
    "pause_between_chunks",
    "initial_layers",
    "start_audit_chain",
]

AUDIT_CHAIN = "audit_chain"
INTENT_KIND = "audit-intent"  # an audit entry announced before its COMMIT (see anchor_audit)
KEK_EPOCH = "kek_epoch"  # meta: the current KEK epoch, bumped by rotation so writers re-read it
KEKS_DESTROYED = "keks_destroyed"  # meta: bumped after a rotation destroyed epochs (others forget them)

ENTRY_KIND = FORGET_KIND
# plans with more record ids than this commit their head first and their records in chunks of
# this many after (each chunk one short transaction: about 60 ms of row updates)
CHUNK_RECORDS = 2000
# and pause this long between chunks: a writer waiting for the lock (every cenotaph writer polls
# for it every few milliseconds, see SQLiteBackend._begin) takes it in the gap
CHUNK_PAUSE_S = 0.004


def chunk_records() -> int:
    """:data:`CHUNK_RECORDS`, read at each use (tests lower it to exercise chunked forgets)."""
    return CHUNK_RECORDS


def pause_between_chunks() -> None:
    time.sleep(CHUNK_PAUSE_S)


_log = logging.getLogger("cenotaph")


DEFAULT_PROVED = (Layer.ROWS, Layer.WAL, Layer.INDEX, Layer.SCAN)  # SQLite's physical layers


def initial_layers(
    plan: ForgetPlan, *, applied: int | None = None, proved: Sequence[str] = DEFAULT_PROVED
) -> dict[str, LayerEntry]:
    """Per-layer status right after the forget committed (evidence is counts, never content).
    ``applied``: of a plan applied in chunks, how many record ids are done (None: all).
    ``proved``: the physical layers the backend proves (``Physical.layers``), pending until a
    purge (or its verifying scan) settles them."""
    done, pending = LayerState.DONE, LayerState.PENDING
    if not plan.compliance:
        return {
            Layer.TOMBSTONE: LayerEntry(done, {"version": plan.version}),
            Layer.RECLAIM: LayerEntry(pending, {"hidden": len(plan.hide)}),
        }
    keys = done if applied is None else pending
    progress = {} if applied is None else {"applied": applied, "of": len(plan.record_ids)}
    scopes, subjects = plan.key_counts
    return {
        Layer.TOMBSTONE: LayerEntry(done, {"version": plan.version}),
        Layer.KEYS: LayerEntry(
            keys, {"records": len(plan.destroy_records), "scopes": scopes, "subjects": subjects, **progress}
        ),
        Layer.LINEAGE: LayerEntry(keys, {"cascaded": len(plan.destroy_records)}),
        Layer.CACHES: LayerEntry(done, {"cleared": "in-process, others by forget epoch"}),
        **{name: LayerEntry(pending) for name in proved},
    }


def append_audit(txn: Txn, event: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Append one content-free entry to the audit chain; returns its anchor (chain, seq, head)."""
    tail = txn.run(ops.AuditTail())
    prev_seq, prev_head = (
        (0, GENESIS) if tail is None else (tail[0], entry_from_dict(json.loads(tail[1])).head)
    )
    at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    entry = chain_entry(prev_head, prev_seq + 1, at, event, fields)
    txn.run(ops.AppendAudit(entry.seq, json.dumps(entry_to_dict(entry), sort_keys=True)))
    return {"chain": txn.run(ops.Meta(AUDIT_CHAIN)), "audit_seq": entry.seq, "audit_head": entry.head}


def start_audit_chain(provider: KeyProvider, txn: Txn) -> None:
    """Give this database's audit chain a fresh id, registered in the ledger. A restored copy gets
    a new id, so anchors of the source's later history do not apply to it."""
    chain = secrets.randbits(62)
    txn.run(ops.SetMeta(AUDIT_CHAIN, chain))
    provider.append_ledger({"kind": "chain", "chain": chain})


Sampler = Callable[[Txn, ForgetPlan, Any, bool], bytes | None]


class Ledger:
    def __init__(
        self, provider: KeyProvider, sampler: Sampler, proved: Sequence[str] = DEFAULT_PROVED
    ) -> None:
        self._provider = provider
        self.proved = tuple(proved)  # the backend's physical layers (initial_layers)
        self._sampler = sampler  # seals probes of what a compliance plan destroys (S4)
        self._mark: int | None = None
        self._replayed = False  # set when a replay changed the database: caches must be rechecked
        self._anchor: dict[str, Any] | None = None  # a forget's audit anchor, appended later
        self._anchor_lock = threading.Lock()
        self.view = LedgerView(provider)  # what decides; the database's rows only cache it (S9)
        # what else a replayed forget does in its transaction, as its first commit would have
        # (set by the erasure side: the consumers it asks); the ledger knows nothing of it
        self.on_replay: Callable[[Txn, ForgetPlan], None] = lambda txn, plan: None

    def changed(self, mark: int | None = None) -> bool:
        return (self._provider.ledger_mark() if mark is None else mark) != self._mark

    def settled(self) -> bool:
        """Is all of the ledger this process has read known to be in the database, with no
        replay left for the caches to act on? (Memory only: no ``stat``.)"""
        return self.view.mark == self._mark and not self._replayed

    def missing(self, txn: Txn) -> bool:
        """Cheap check (a read): does the ledger hold forgets the database lacks? Marks the ledger
        as seen when it does not."""
        mark = self._provider.ledger_mark()
        self.view.refresh()
        if not self.view.plans.keys() <= txn.run(ops.ErasureIds()):
            return True
        self._mark = mark
        return False

    def take_replayed(self) -> bool:
        replayed, self._replayed = self._replayed, False
        return replayed

    def reconcile_if_changed(self, txn: Txn) -> int:
        return self.reconcile(txn) if self.changed() else 0

    def reconcile(self, txn: Txn, audited: set[str] | None = None) -> int:
        """Apply every ledger forget the database lacks.

        ``audited`` (a restore): the forgets the copy's verified audit log holds. Every other
        ledger forget is replayed whatever the copy's request rows say (a row is no proof: anyone
        who can write the backup's file can plant one), and those it holds are re-applied to
        their records (idempotent), so no edit of the copy's rows survives the restore.

        Nothing flows the other way: a request row the ledger lacks was never ledgered by a
        forget (which ledgers before it commits), so it was written into the database by someone
        else. Copying it into the ledger would let whoever can edit the database plant a forget
        plan every restore then applies, and have a purge verify and certify it. ``verify_audit``
        reports such a row's audit entry instead."""
        mark = self._provider.ledger_mark()
        self.view.refresh()
        known = txn.run(ops.ErasureIds()) if audited is None else audited
        applied = 0
        for request_id, entry in list(self.view.plans.items()):
            if request_id not in known:
                # not anchored: a stale copy or a rolled-back database opened on the same keyring
                # would otherwise fork this chain's anchors; the next anchor covers the entry.
                # A restore applies every plan whole (nobody else uses the copy yet); elsewhere a
                # large one commits its head here and its records in chunks after
                plan = ForgetPlan.from_entry(entry)
                whole = True if audited is not None else None
                self._record(txn, plan, replayed=True, replace=audited is not None, whole=whole)
                self.on_replay(txn, plan)
                applied += 1
            elif audited is not None:
                reapply_to_records(txn, ForgetPlan.from_entry(entry))
        if (
            txn.run(ops.Count("clock")) < self.view.max_version
        ):  # a clock set back would reuse forgotten versions
            txn.run(
                ops.Advance("clock", self.view.max_version)
            )  # (checked first: a read-only store cannot UPDATE)
        # Seen: the ledger as it was read above, not as it is now (an entry appended since, by a
        # process that does not share this database's lock, is still unseen; our own appends
        # cost one extra `missing` check). And only once the replay is committed: a caller's
        # transaction that rolls back (a refused write, a forget that failed closed) must leave
        # the entries to replay again.
        txn.after_commit(lambda: self._seen(mark, replayed=applied > 0))
        return applied

    def _seen(self, mark: int, *, replayed: bool) -> None:
        self._mark = mark
        if replayed:
            self._replayed = True

    def commit_plan(
        self, txn: Txn, plan: ForgetPlan, check: Callable[[Txn, ForgetPlan], None], sample: Any = None
    ) -> bool:
        """Apply ``plan`` (whole if small; else its head, see ``erasure.purge.chunks``), run ``check``
        on a whole plan (the postcondition; raising rolls everything back), then make the plan
        durable in the provider; the caller commits right after. ``sample``: probes of the plan's
        records taken before (outside this transaction). Returns whether it was applied whole."""
        anchor, whole = self._record(txn, plan, replayed=False, sample=sample)
        if whole:
            check(txn, plan)
        fault_point("forget.applied")
        # the plan must be durable before COMMIT (W7); its audit anchor only after it, like every
        # anchor (a forget that never commits is replayed, and its replay is anchored instead)
        self._provider.append_ledger(self._entry(plan.to_entry(), intent=anchor))
        # authoritative from here on, in every process (S9); this process's view reads it once
        # the transaction commits (the caller's after-commit action), not under the write lock:
        # parsing a large plan's entry takes a while
        # anchored later, off the forget's path: its own intent (in the entry above) vouches for
        # it until then, and a crash that loses the anchor only leaves it for the next to cover
        txn.after_commit(lambda: self._defer_anchor(anchor))
        mark = self._provider.ledger_mark()
        txn.after_commit(lambda: self._seen(mark, replayed=False))  # uncommitted: replay it later
        fault_point("forget.ledgered")
        return whole

    def _defer_anchor(self, anchor: dict[str, Any]) -> None:
        with self._anchor_lock:
            pending = self._anchor
            if pending is None or int(anchor["audit_seq"]) > int(pending["audit_seq"]):
                self._anchor = anchor  # the newest covers every entry before it

    def flush_anchors(self) -> None:
        """Append the newest deferred forget anchor (the background worker, an audit check and
        ``close`` call this): one ledger line for any number of forgets since the last flush."""
        with self._anchor_lock:
            anchor, self._anchor = self._anchor, None
        if anchor is not None:
            append_anchor(self._provider, anchor)

    def grant(self, digest: bytes, kind: str, target: bytes, version: int, subject: bytes | None) -> None:
        """Record a reauthorization token's issue in the ledger (before its COMMIT): a token row
        the ledger lacks is no token."""
        self._provider.append_ledger(
            {
                "kind": GRANT_KIND,
                "digest": digest.hex(),
                "target_kind": kind,
                "target": target.hex(),
                "version": version,
                "subject": None if subject is None else subject.hex(),
            }
        )

    def lift(self, digest: bytes, version: int, lifts: Sequence[tuple[bytes, int]]) -> None:
        """Record a token's use and what it lifted (before the write's COMMIT). A write that then
        never commits leaves the token used and its target reopened, as its holder asked."""
        self._provider.append_ledger(
            {
                "kind": LIFT_KIND,
                "digest": digest.hex(),
                "version": version,
                "lifts": [[t.hex(), v] for t, v in lifts],
            }
        )

    def import_cache(self, txn: Txn) -> None:
        """Once per key provider: carry the lifts and tokens of a store from before the ledger
        decided them into the ledger. Trust on first use: the database is believed this once."""
        self.view.refresh()
        if self.view.imported:
            return
        self._provider.append_ledger(
            {
                "kind": IMPORT_KIND,
                "lifts": [[t.hex(), v] for t, v in txn.run(ops.AllLifts())],
                "grants": [
                    [d.hex(), kind, t.hex(), v, None if s is None else s.hex(), used]
                    for d, kind, t, v, used, s in txn.run(ops.AllReauths())
                ],
            }
        )
        self.view.refresh()

    def _record(
        self,
        txn: Txn,
        plan: ForgetPlan,
        *,
        replayed: bool,
        replace: bool = False,
        sample: Any = None,
        whole: bool | None = None,
    ) -> tuple[dict[str, Any], bool]:
        if not plan.epochs:
            plan.epochs = self._provider.live_epochs()
        if whole is None:
            whole = len(plan.record_ids) <= chunk_records()
        probes = self._sampler(txn, plan, sample, whole) if plan.compliance else None
        if whole:
            apply_plan(txn, plan)
        else:
            apply_head(txn, plan)  # its records, and keys only they use, in chunks after
        applied = None if whole else 0
        txn.run(
            ops.InsertErasure(
                ErasureRow(
                    id=plan.request_id,
                    mode=plan.mode,
                    target_kind=plan.target_kind,
                    target=plan.target,
                    version=plan.version,
                    requested_at=plan.requested_at,
                    state=ErasureState.SHREDDED if plan.compliance and whole else ErasureState.TOMBSTONED,
                    layers=dump_layers(initial_layers(plan, applied=applied, proved=self.proved)),
                    plan=json.dumps(plan.to_entry()),
                    probes=probes,
                    horizon=None,
                    horizon_reason=None,
                    verified_at=None,
                    scan=None,
                    applied=applied,
                ),
                replace=replace,
            )
        )
        anchor = append_audit(
            txn,
            "forget",
            {
                "request_id": plan.request_id,
                "mode": plan.mode,
                "target_kind": plan.target_kind,
                "target": plan.target.hex(),
                "version": plan.version,
                "records": len(plan.destroy_records) or len(plan.hide),
                "replayed": replayed,
            },
        )
        return anchor, whole

    @staticmethod
    def _entry(plan: dict[str, Any], intent: dict[str, Any] | None = None) -> dict[str, Any]:
        entry = {"kind": ENTRY_KIND, "request_id": plan["request_id"], "plan": plan}
        return entry if intent is None else {**entry, "intent": intent}


def anchor_audit(provider: KeyProvider, txn: Txn, event: str, fields: dict[str, Any]) -> None:
    """Append an audit entry, announce it to the provider's ledger before COMMIT (an *intent*),
    and anchor its head there once it commits (S7).

    The anchor never comes before COMMIT: one that outlived a transaction which never committed
    would name a head the chain never had, and every later ``audit verify`` would report
    tampering. The intent may outlive such a transaction harmlessly -- verification never asks
    for an intent's entry -- and it is what lets verification tell an entry whose anchor a crash
    lost from one appended by someone who can write only the database."""
    anchor_audit_many(provider, txn, [(event, fields)])


def anchor_audit_many(provider: KeyProvider, txn: Txn, entries: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """:func:`anchor_audit` for several entries of one transaction, with one intent and one
    anchor, both of the last: the hash chain vouches for every entry before it (a purge that
    concludes many requests appends two ledger lines, not two per request)."""
    anchors = [append_audit(txn, event, fields) for event, fields in entries]
    if anchors:
        provider.append_ledger({"kind": INTENT_KIND, **anchors[-1]})
        anchor_after_commit(provider, txn, anchors[-1])


def anchor_after_commit(provider: KeyProvider, txn: Txn, anchor: dict[str, Any]) -> None:
    """Anchor an audit entry's head in the provider's ledger once its transaction commits.

    Best effort: the entry has committed by then, so a failing ledger (a full disk) must not turn
    a committed purge or forget into an error. The entry stays unanchored, which the next anchor
    covers through the hash chain; the failure is logged (its sequence number only)."""

    txn.after_commit(lambda: append_anchor(provider, anchor))


def append_anchor(provider: KeyProvider, anchor: dict[str, Any]) -> None:
    """Append one anchor, best effort (see :func:`anchor_after_commit`)."""
    try:
        provider.append_ledger({"kind": "anchor", **anchor})
    except (KeyProviderError, OSError) as exc:
        _log.warning(
            "could not anchor audit entry %s in the key provider's ledger (%s); the next anchor covers it",
            anchor.get("audit_seq"),
            type(exc).__name__,  # the class only: messages may carry paths
        )


def all_anchors(entries: Sequence[dict[str, Any]], chain: int | None) -> dict[int, set[str]] | None:
    """Every head the ledger anchored for ``chain``, by sequence number (two heads for one seq =
    a rewrite); ``None`` if the chain id was never registered (the id itself was tampered with)."""
    if not any(e.get("kind") == "chain" and e.get("chain") == chain for e in entries):
        return None
    anchors: dict[int, set[str]] = {}
    for entry in entries:
        if "audit_head" in entry and entry.get("chain") == chain and entry.get("kind") != INTENT_KIND:
            anchors.setdefault(int(entry["audit_seq"]), set()).add(str(entry["audit_head"]))
    return anchors


def all_intents(entries: Sequence[dict[str, Any]], chain: int | None) -> set[tuple[int, str]]:
    """Every (seq, head) announced before a COMMIT for ``chain``: by :func:`anchor_audit`, and by
    each forget's own ledger entry. An intent whose transaction never committed names an entry
    that does not exist, which is fine: it only ever vouches for an entry that does."""
    found: set[tuple[int, str]] = set()
    for entry in entries:
        intent = entry if entry.get("kind") == INTENT_KIND else entry.get("intent")
        if isinstance(intent, dict) and intent.get("chain") == chain and "audit_head" in intent:
            found.add((int(intent["audit_seq"]), str(intent["audit_head"])))
    return found
