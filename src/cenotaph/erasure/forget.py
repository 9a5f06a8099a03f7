"""Forget plans: what one forget tombstones, hides and destroys, as content-free data.

A plan is computed inside the forget's write transaction, applied there, mirrored into the key
provider's ledger before commit (W7), and can be re-applied from the ledger alone on open or
restore (S5) -- so it holds only tokens, record ids and versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import LineageRow, Txn
from .unshared import unshared_keys

__all__ = ["ForgetPlan", "apply_plan", "reapply_to_records"]


@dataclass
class ForgetPlan:
    request_id: str
    mode: str  # "compliance" | "operational"
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
    # also destroy the scope and subject keys only these records use (erasure.unshared): found
    # again wherever the plan is applied, never listed (a list of tokens would name them)
    unshared: bool = False
    _found: tuple[list[bytes], list[bytes]] | None = field(default=None, repr=False, compare=False)

    @property
    def compliance(self) -> bool:
        return self.mode == "compliance"

    def keys_to_destroy(
        self, txn: Txn, lineage: Mapping[str, LineageRow] | None = None
    ) -> tuple[list[bytes], list[bytes]]:
        """(scope tokens, subject tokens) whose keys this plan destroys: those listed, and (if
        ``unshared``) those only its records use, found in ``txn`` (once, before it is applied;
        ``lineage``: its records' lineage rows, if the caller read them already)."""
        if self.unshared and self._found is None:
            self._found = unshared_keys(txn, self.target_kind, self.target, self.destroy_records, lineage)
        scopes, subjects = self._found or ([], [])
        return sorted({*self.destroy_scopes, *scopes}), sorted({*self.destroy_subjects, *subjects})

    @property
    def key_counts(self) -> tuple[int, int]:
        """How many scope and subject keys it destroys (known once :meth:`keys_to_destroy` ran)."""
        scopes, subjects = self._found or ([], [])
        return len({*self.destroy_scopes, *scopes}), len({*self.destroy_subjects, *subjects})

    def to_entry(self) -> dict[str, Any]:
        return {
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

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> ForgetPlan:
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
            unshared=entry.get("unshared") is True,
        )


def apply_plan(txn: Txn, plan: ForgetPlan) -> None:
    """Tombstone, hide and destroy in the caller's transaction. Idempotent."""
    txn.set_clock(plan.version)
    txn.insert_tombstones((t, plan.version, kind, plan.request_id) for t, kind in plan.tombstones)
    txn.hide_records(plan.hide, plan.version, plan.mode)
    if plan.compliance:
        scopes, subjects = plan.keys_to_destroy(txn)
        txn.destroy_record_keys(plan.destroy_records, plan.version)
        txn.destroy_scope_keys(scopes, plan.version)
        txn.destroy_subject_keys(subjects, plan.version)
    txn.bump_forget_epoch()


def reapply_to_records(txn: Txn, plan: ForgetPlan) -> None:
    """Re-apply what a plan did to its records (tombstones, hidden marks, destroyed record keys)
    on a copy that says it holds the forget already. Scope and subject keys are left: a scope
    re-keyed after a later reauthorization must keep its new key. Idempotent."""
    txn.insert_tombstones((t, plan.version, kind, plan.request_id) for t, kind in plan.tombstones)
    txn.hide_records(plan.hide, plan.version, plan.mode)
    if plan.compliance:
        txn.destroy_record_keys(plan.destroy_records, plan.version)
