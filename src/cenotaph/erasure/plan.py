"""Forget planning (W2, W3): which tombstones to write, which records to hide and which keys to
destroy -- enumerated inside the forget's transaction, through tokens only.

Enumeration goes through the ``lineage`` table (every record ever written whose keys still
exist), so expired and overwritten versions are reached too, and follows ``derivations``
transitively for compliance forgets. If an ancestor scope holds the key (a read would fall
through to it), the forget fails closed with ScopeClosureError unless ``include_ancestors``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from ..backends.base import RecordRow, Txn
from ..crypto.tokens import TokenMaker
from ..errors import ErasureNotProvableError, ScopeClosureError
from ..records import is_visible
from ..scope import Scope
from .forget import ForgetPlan

__all__ = ["ForgetPlanner", "check_postcondition", "remains", "with_derived"]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


class ForgetPlanner:
    def __init__(self, tokens: TokenMaker) -> None:
        self._tokens = tokens

    def scope_or_key(
        self,
        txn: Txn,
        request_id: str,
        version: int,
        scope: Scope,
        key: str | None,
        mode: str,
        include_ancestors: bool,
    ) -> ForgetPlan:
        """Forget ``key`` in ``scope``'s subtree, or (``key=None``) the whole subtree."""
        scope_token = self._tokens.scope(scope)
        subtree = txn.subtree_tokens(scope_token)
        kind = "scope" if key is None else "key"
        # compliance destroys every version whose keys still exist; operational only marks the
        # versions no forget marked yet (re-marking them would grow each plan with the history)
        unforgotten = mode != "compliance"
        plan = ForgetPlan(request_id, mode, kind, scope_token, version, _now_iso())
        if key is None:
            plan.tombstones.append((scope_token, "scope"))
            live = txn.records_in_scopes(subtree)
            affected = txn.lineage_ids(subtree, None, unforgotten=unforgotten)
            # the subtree's scope keys (and subjects only its records carry) are found again from
            # the target where the plan is applied: listing them would name every scope in it
            plan.unshared = mode == "compliance"
        else:
            key_token = self._tokens.key(key)
            plan.target = self._tokens.key_subtree(scope_token, key_token)
            plan.tombstones.append((plan.target, "key"))
            live = [r for r in txn.records_in_scopes(subtree) if r.key_token == key_token]
            affected = txn.lineage_ids(subtree, key_token, unforgotten=unforgotten)
            for token, row in self._ancestor_holders(txn, scope, key_token, include_ancestors):
                plan.tombstones.append((self._tokens.key_exact(token, key_token), "key-exact"))
                live.append(row)
                affected.extend(txn.lineage_ids([token], key_token, unforgotten=unforgotten))
        # every version of the target ever written is forgotten, not only the live one: hiding
        # marks the lineage too, so no overwritten or expired version can be derived from (W3)
        plan.hide = sorted({*(r.id for r in live), *affected})
        if mode == "compliance":
            plan.destroy_records = with_derived(txn, affected)
            plan.hide = sorted({*plan.hide, *plan.destroy_records})
        return plan

    def _ancestor_holders(
        self, txn: Txn, scope: Scope, key_token: bytes, include_ancestors: bool
    ) -> list[tuple[bytes, RecordRow]]:
        ancestors = [(a, self._tokens.scope(a)) for a in scope.ancestors()]
        rows = {r.scope_token: r for r in txn.records_in_slots([(t, key_token) for _, t in ancestors])}
        now = time.time()
        holders = [(a, t) for a, t in ancestors if t in rows and is_visible(rows[t], now)]
        if holders and not include_ancestors:
            raise ScopeClosureError(
                "the key is also held by ancestor scope(s) "
                + ", ".join(repr(a.path) for a, _ in holders)
                + "; reads would fall through to them. Forget those too with include_ancestors=True, "
                "or forget them first. Nothing was changed.",
                [a.path for a, _ in holders],
            )
        return [(t, rows[t]) for _, t in holders]

    def subject(self, txn: Txn, request_id: str, version: int, token: bytes) -> ForgetPlan:
        """Compliance-forget every record carrying the subject, and everything derived from them."""
        plan = ForgetPlan(request_id, "compliance", "subject", token, version, _now_iso())
        plan.tombstones.append((token, "subject"))
        plan.destroy_records = with_derived(txn, txn.lineage_ids_for_subject(token))
        plan.hide = list(plan.destroy_records)
        plan.destroy_subjects = [token]
        plan.unshared = True  # and the scopes and other subjects only these records use
        return plan


def with_derived(txn: Txn, ids: Sequence[str]) -> list[str]:
    return sorted({*ids, *txn.derived_closure(list(ids))})


def check_postcondition(txn: Txn, plan: ForgetPlan) -> None:
    """W2/W3, checked inside the forget's transaction: nothing planned is still readable, and
    (key and scope forgets) no visible record is left anywhere in the forgotten subtree."""
    now = time.time()
    still = txn.unhidden(plan.hide)  # one query per 500 ids (a row each was 0.85 s for 100k)
    if plan.compliance:
        still += [i for i, row in txn.lineage(plan.destroy_records).items() if row.wrapped is not None]
    if plan.target_kind == "scope":
        still += [r.id for r in txn.records_in_scopes(txn.subtree_tokens(plan.target)) if is_visible(r, now)]
    if still:
        raise ErasureNotProvableError(
            "the forget's postcondition failed (records still readable); nothing was changed. "
            "This is a bug in cenotaph; please report it.",
            ["postcondition"],
        )


def remains(txn: Txn, plan: ForgetPlan) -> dict[str, int]:
    """What of a compliance forget's target, written before it, is still in the database: record
    rows (ciphertext) and live record keys -- of the records it planned, and of any record the
    target covers now (a subject's records; a scope subtree's). Zero for a verified request;
    records written after a reauthorization (newer than the forget) are not the target's past."""
    ids = {*plan.destroy_records, *plan.hide}
    if plan.target_kind == "subject":
        ids.update(i for i, version, _ in txn.subject_lineage(plan.target) if version < plan.version)
    elif plan.target_kind == "scope":
        for token in txn.subtree_tokens(plan.target):
            ids.update(i for i, version, _ in txn.scope_lineage(token) if version < plan.version)
    wanted = sorted(ids)
    keys = sum(1 for row in txn.lineage(wanted).values() if row.wrapped is not None)
    return {"records": len(txn.existing_records(wanted)), "keys": keys}
