"""Forget plans: what one forget tombstones, hides and destroys, as content-free data.

A plan is computed in two steps (``erasure.planning.planner``), mirrored into the key provider's ledger
before its first transaction commits (W7), and can be re-applied from the ledger alone on open
or restore (S5) -- so it holds only tokens, record ids and versions.

Applying a plan has two parts. The *head* -- tombstones, and the scope and subject keys it
destroys -- is O(1) and commits with the plan; from then on the ledger decides (S9) and every
record under a destroyed scope or subject key is shredded at once. The *records* part hides rows
and destroys per-record keys (which is what shreds derived records and copies of a key forget);
it is idempotent and may be split into chunks of ids, each its own transaction
(``erasure.purge.chunks``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends import ops
from ..backends.base import Txn
from ..model import Mode
from .exclusive_keys import unshared_keys

__all__ = ["ForgetPlan", "apply_head", "apply_plan", "apply_records", "reapply_to_records"]


@dataclass
class ForgetPlan:
    request_id: str
    mode: str  # a Mode
    target_kind: str  # "key" | "scope" | "subject"
    target: bytes  # the primary tombstone target token
    version: int  # v_f
    requested_at: str
    tombstones: list[tuple[bytes, str]] = field(default_factory=list)  # (target, kind)
    hide: list[str] = field(default_factory=list)  # record ids hidden (every mode)
    destroy_records: list[str] = field(default_factory=list)  # content + lineage keys destroyed
    destroy_scopes: list[bytes] = field(default_factory=list)
    destroy_subjects: list[bytes] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)  # KEK epochs live at forget time (S5 horizon)
    # a key forget's (scope token, key token): its target can be enumerated again (erasure.planning.planner.sweep)
    key_slot: tuple[bytes, bytes] | None = None
    # a key forget of that one slot only (no descendant scope): its tombstone is key-exact
    exact: bool = False
    # who made it (an owner token, see TokenMaker.owner), and the tokens of the forgotten scope's
    # prefixes, root first: what lets a reauthorization for an owner find every forget inside
    # or above the scope it would reopen (LedgerView.foreign_blockers)
    owner: bytes | None = None
    chain: list[bytes] = field(default_factory=list)
    # also destroy the scope and subject keys only these records use (cenotaph.ledger.exclusive_keys): found
    # again wherever the plan is applied, never listed (a list of tokens would name them)
    unshared: bool = False
    _found: tuple[list[bytes], list[bytes]] | None = field(default=None, repr=False, compare=False)
    _ids: tuple[tuple[int, int, int, int], list[str]] | None = field(default=None, repr=False, compare=False)

    @property
    def compliance(self) -> bool:
        return self.mode == Mode.COMPLIANCE

    @property
    def record_ids(self) -> list[str]:
        """Every record id the plan hides or destroys, sorted: the order chunks follow (computed
        again only when a list is replaced or grows)."""
        lists = (id(self.hide), len(self.hide), id(self.destroy_records), len(self.destroy_records))
        if self._ids is None or self._ids[0] != lists:
            self._ids = (lists, sorted({*self.hide, *self.destroy_records}))
        return self._ids[1]

    def keys_to_destroy(self, txn: Txn) -> tuple[list[bytes], list[bytes]]:
        """(scope tokens, subject tokens) whose keys this plan destroys: those listed, and (if
        ``unshared``) those only its records use, found in ``txn`` (once, before it is applied)."""
        if self.unshared and self._found is None:
            self._found = unshared_keys(txn, self.target_kind, self.target, self.destroy_records)
        scopes, subjects = self._found or ([], [])
        return sorted({*self.destroy_scopes, *scopes}), sorted({*self.destroy_subjects, *subjects})

    def target_keys(self, txn: Txn) -> tuple[list[bytes], list[bytes]]:
        """The scope and subject keys that shred the whole target at once, found without reading
        its records: those listed, and a scope forget's subtree. What else only the plan's records
        use (:meth:`keys_to_destroy`) takes reading them all, so a large plan destroys it last."""
        scopes = (
            txn.run(ops.SubtreeTokens(self.target)) if self.unshared and self.target_kind == "scope" else []
        )
        return sorted({*self.destroy_scopes, *scopes}), sorted(self.destroy_subjects)

    @property
    def key_counts(self) -> tuple[int, int]:
        """How many scope and subject keys it destroys (known once :meth:`keys_to_destroy` ran)."""
        scopes, subjects = self._found or ([], [])
        return len({*self.destroy_scopes, *scopes}), len({*self.destroy_subjects, *subjects})

    def to_entry(self) -> dict[str, Any]:
        entry = {
            "request_id": self.request_id,
            "mode": self.mode,
            "target_kind": self.target_kind,
            "target": self.target.hex(),
            "version": self.version,
            "requested_at": self.requested_at,
            "tombstones": [[t.hex(), kind] for t, kind in self.tombstones],
            "hide": self.hide,
            "destroy_records": self.destroy_records,
            "destroy_scopes": [t.hex() for t in self.destroy_scopes],
            "destroy_subjects": [t.hex() for t in self.destroy_subjects],
            "epochs": self.epochs,
            "unshared": self.unshared,
        }
        if self.key_slot is not None:
            entry["key_slot"] = [self.key_slot[0].hex(), self.key_slot[1].hex()]
        if self.exact:
            entry["exact"] = True
        if self.owner is not None:
            entry["owner"] = self.owner.hex()
        if self.chain:
            entry["chain"] = [t.hex() for t in self.chain]
        return entry

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> ForgetPlan:
        slot = entry.get("key_slot")
        return cls(
            request_id=str(entry["request_id"]),
            mode=str(entry["mode"]),
            target_kind=str(entry["target_kind"]),
            target=bytes.fromhex(entry["target"]),
            version=int(entry["version"]),
            requested_at=str(entry["requested_at"]),
            tombstones=[(bytes.fromhex(t), str(kind)) for t, kind in entry["tombstones"]],
            hide=[str(i) for i in entry["hide"]],
            destroy_records=[str(i) for i in entry["destroy_records"]],
            destroy_scopes=[bytes.fromhex(t) for t in entry["destroy_scopes"]],
            destroy_subjects=[bytes.fromhex(t) for t in entry["destroy_subjects"]],
            epochs=[int(e) for e in entry.get("epochs", [])],
            key_slot=None if slot is None else (bytes.fromhex(slot[0]), bytes.fromhex(slot[1])),
            unshared=entry.get("unshared") is True,
            exact=entry.get("exact") is True,
            owner=None if entry.get("owner") is None else bytes.fromhex(entry["owner"]),
            chain=[bytes.fromhex(t) for t in entry.get("chain", [])],
        )


def apply_head(txn: Txn, plan: ForgetPlan, *, whole: bool = False) -> None:
    """Tombstones and the scope and subject keys that shred the target (``whole``: every key the
    plan destroys, see :meth:`ForgetPlan.keys_to_destroy`). Idempotent."""
    txn.run(ops.Advance("clock", plan.version))
    txn.run(ops.InsertTombstones((t, plan.version, kind, plan.request_id) for t, kind in plan.tombstones))
    if plan.compliance:
        scopes, subjects = plan.keys_to_destroy(txn) if whole else plan.target_keys(txn)
        txn.run(ops.DestroyKeys(scopes, subjects, plan.version))
    txn.run(ops.Advance("forget_epoch"))


def apply_records(txn: Txn, plan: ForgetPlan, ids: Sequence[str]) -> None:
    """Hide ``ids`` and (compliance) destroy their content and lineage keys. Idempotent.
    (Destroying hides too: one update of each row, not two.)"""
    if plan.compliance:
        txn.run(ops.DestroyRecordKeys(ids, plan.version))
    else:
        txn.run(ops.HideRecords(ids, plan.version, plan.mode))


def apply_plan(txn: Txn, plan: ForgetPlan) -> None:
    """The whole plan in the caller's transaction. Idempotent."""
    apply_head(txn, plan, whole=True)
    apply_records(txn, plan, plan.record_ids)


def reapply_to_records(txn: Txn, plan: ForgetPlan) -> None:
    """Re-apply what a plan did to its records (tombstones, hidden marks, destroyed record keys)
    on a copy that says it holds the forget already. Scope and subject keys are left: a scope
    re-keyed after a later reauthorization must keep its new key. Idempotent."""
    txn.run(ops.InsertTombstones((t, plan.version, kind, plan.request_id) for t, kind in plan.tombstones))
    apply_records(txn, plan, plan.record_ids)
