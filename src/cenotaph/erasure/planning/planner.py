"""Forget planning (W2, W3): which tombstones to write, which records to hide and which keys to
destroy -- enumerated through tokens only, in two steps so the write lock is held briefly.

1. :meth:`ForgetPlanner.survey` enumerates the target *outside* the write lock (a large subtree
   takes seconds to enumerate), noting the clock before its first read.
2. :meth:`ForgetPlanner.plan`, inside the forget's write transaction, adds what was written since
   (:meth:`Txn.written_since`: a range of versions, a handful of rows) to what the survey found,
   checks the ancestors (W2), and fixes the tombstones and the version. Once the plan is in the
   ledger no write can reach the target any more, so the plan is complete.

:func:`sweep` finds what the target still holds unforgotten (written before the forget): the
W2/W3 postcondition, run once the plan is applied -- and wherever a plan is applied again (a
replay), so nothing written just before a tombstone escapes its key destruction.

Enumeration goes through the ``lineage`` table (every record ever written whose keys still
exist), so expired and overwritten versions are reached too, and follows ``derivations``
transitively for compliance forgets. If an ancestor scope holds the key (a read would fall
through to it), the forget fails closed with ScopeClosureError unless ``include_ancestors``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ...backends import ops
from ...backends.base import LineageRow, Txn, WriteLocks
from ...clock import Clock
from ...crypto.tokens import TokenMaker
from ...errors import ErasureNotProvableError, ScopeClosureError
from ...ledger.exclusive_keys import split_tokens
from ...ledger.plan import ForgetPlan
from ...model import Mode
from ...records import is_visible
from ...scope import Scope, default_subjects

__all__ = [
    "ForgetPlanner",
    "ForgetTarget",
    "Survey",
    "check_postcondition",
    "remains",
    "sweep",
    "with_derived",
]

ALL_VERSIONS = 1 << 62  # a survey bound that excludes nothing

Reading = Callable[[], AbstractContextManager[Txn]]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True)
class ForgetTarget:
    """What a forget names, before anything is read: a key in a scope's subtree, a scope subtree,
    or a subject (``token`` is the scope's or the subject's token)."""

    kind: str  # "key" | "scope" | "subject"
    mode: str  # a Mode
    token: bytes
    scope: Scope | None = None
    key_token: bytes | None = None
    include_ancestors: bool = False
    exact: bool = False  # a key in that one scope only, not its descendants (the slot)
    owner: bytes | None = None  # who forgets (an owner token), recorded in the plan

    @property
    def compliance(self) -> bool:
        return self.mode == Mode.COMPLIANCE


@dataclass
class Survey:
    """What the target held when surveyed outside the write lock; ``since`` is the clock before
    the first read, so whatever was written after it is caught up inside the lock; ``marker`` the
    change marker of its snapshot (the caches' sync learns from it whether anyone committed)."""

    since: int
    marker: Hashable = None  # None: unknown, the caches sync completely
    hide: list[str] = field(default_factory=list)
    destroy: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len({*self.hide, *self.destroy})


class ForgetPlanner:
    def __init__(self, tokens: TokenMaker, clock: Clock) -> None:
        self._tokens = tokens
        self._clock = clock

    # -- targets ---------------------------------------------------------------------
    def scope_or_key(
        self,
        scope: Scope,
        key: str | None,
        mode: str,
        include_ancestors: bool,
        *,
        exact: bool = False,
        owner: bytes | None = None,
    ) -> ForgetTarget:
        """Forget ``key`` in ``scope``'s subtree (``exact``: in ``scope`` only), or
        (``key=None``) the whole subtree."""
        return ForgetTarget(
            "scope" if key is None else "key",
            mode,
            self._tokens.scope(scope),
            scope,
            None if key is None else self._tokens.key(key),
            include_ancestors,
            exact,
            owner,
        )

    def subject(self, token: bytes, owner: bytes | None = None) -> ForgetTarget:
        """Compliance-forget every record carrying the subject, and everything derived from them."""
        return ForgetTarget("subject", Mode.COMPLIANCE, token, owner=owner)

    def locks(self, target: ForgetTarget) -> WriteLocks | None:
        """What the forget's transaction locks where writers are not serialised (PostgreSQL):
        every target its tombstones may name, exclusive (a key forget with its ancestors: the
        key in each ancestor scope, whichever hold it), and the forgets' serial lock. None,
        store-wide, for a compliance forget of a scope or a subject: it also destroys the keys
        of scopes and subjects only its records use, which a write outside its targets could be
        sealing with meanwhile."""
        if target.compliance and target.kind in ("scope", "subject"):
            return None
        if target.kind == "scope":
            return WriteLocks(exclusive=frozenset([target.token]), serial=True)
        assert target.scope is not None and target.key_token is not None
        if target.exact:
            named = [self._tokens.key_exact(target.token, target.key_token)]
        else:
            named = [self._tokens.key_subtree(target.token, target.key_token)]
            if target.include_ancestors:
                named += [
                    self._tokens.key_exact(self._tokens.scope(a), target.key_token)
                    for a in target.scope.ancestors()
                ]
        return WriteLocks(exclusive=frozenset(named), serial=True)

    def read_ahead(self, target: ForgetTarget) -> list[ops.Op[Any]]:
        """What :meth:`plan` reads before anything else, for the write to send with its BEGIN:
        the ancestor scopes' rows of a key (:meth:`_ancestor_holders`)."""
        if target.kind != "key" or target.exact:
            return []
        assert target.scope is not None and target.key_token is not None
        return [
            ops.RecordsInSlots([(self._tokens.scope(a), target.key_token) for a in target.scope.ancestors()])
        ]

    def opening_keys(self, target: ForgetTarget) -> tuple[bytes | None, list[bytes]]:
        """The key rows that open a record of the target's scope, for its probes to read ahead:
        the scope's token (its chain) and the tokens of the subjects its scope gives every record
        written there (``default_subjects``). None and none for a subject's target."""
        if target.scope is None:
            return None, []
        return target.token, [self._tokens.subject(s) for s in default_subjects(target.scope)]

    @staticmethod
    def unshared_reads(target: ForgetTarget, listed: Sequence[str]) -> list[ops.Op[Any]]:
        """What finding the keys only ``listed`` use (``ForgetPlan.keys_to_destroy``, a compliance
        scope or subject forget's) reads first, for its write to send ahead with its locks: the
        records' lineage tokens (an operation equal to the one made where the plan is applied,
        so a record written since, a longer list, reads its own again) and a scope's subtree,
        whose rows also hold the keys that open its records."""
        if not target.compliance or target.kind == "key":
            return []
        reads: list[ops.Op[Any]] = [ops.LineageTokens(list(listed))] if listed else []
        return [*reads, ops.SubtreeRows(target.token)] if target.kind == "scope" else reads

    # -- step 1: outside the write lock ------------------------------------------------
    def survey(self, reading: Reading, target: ForgetTarget) -> Survey:
        """Enumerate ``target`` in read transactions (each short: other threads of this process
        get the connection between them)."""
        if target.kind == "subject":
            with reading() as txn:
                since, marker = txn.run(ops.ClockMarker())
                ids = _unforgotten(txn, target, ALL_VERSIONS)
            survey = Survey(since, marker, hide=ids)
            survey.destroy = survey.hide = with_derived_reading(reading, ids)
            return survey
        # a key's or a scope's: the clock and the marker, then one statement (the subtree, its
        # unforgotten records and, compliance, what derives from them) closing the read, all in
        # one round trip where the backend can (its snapshot still begins after the clock)
        with reading() as txn:
            since, marker, ids = txn.clock_marker_then(
                ops.UnforgottenInSubtree(
                    target.token,
                    target.key_token,
                    ALL_VERSIONS,
                    exact=target.exact,
                    compliance=target.compliance,
                    derived=target.compliance,
                )
            )
        survey = Survey(since, marker, hide=ids)
        if target.compliance:
            survey.destroy = ids  # with its derived records' closure, in the same snapshot
        return survey

    # -- step 2: inside the forget's write transaction --------------------------------
    def plan(
        self, txn: Txn, request_id: str, version: int, target: ForgetTarget, survey: Survey
    ) -> ForgetPlan:
        """The complete plan: ``survey`` plus what was written since, under this transaction's lock."""
        plan = ForgetPlan(request_id, target.mode, target.kind, target.token, version, _now_iso())
        plan.owner = target.owner
        if target.scope is not None:
            plan.chain = list(self._tokens.scope_chain(target.scope))
        ids = set(survey.hide) | set(survey.destroy)
        if target.kind == "subject":
            plan.tombstones.append((target.token, "subject"))
            plan.destroy_subjects = [target.token]
            plan.unshared = True  # and the scopes and other subjects only its records use
        elif target.kind == "scope":
            plan.tombstones.append((target.token, "scope"))
            # the subtree's scope keys (and subjects only its records carry) are found again from
            # the target where the plan is applied: listing them would name every scope in it
            plan.unshared = target.compliance
        elif target.exact:  # the one slot: what a read of it without fall-through would find
            assert target.key_token is not None
            plan.target = self._tokens.key_exact(target.token, target.key_token)
            plan.key_slot = (target.token, target.key_token)
            plan.exact = True
            plan.tombstones.append((plan.target, "key-exact"))
        else:
            assert target.scope is not None and target.key_token is not None
            plan.target = self._tokens.key_subtree(target.token, target.key_token)
            plan.key_slot = (target.token, target.key_token)
            plan.tombstones.append((plan.target, "key"))
            for token in self._ancestor_holders(txn, target):
                plan.tombstones.append((self._tokens.key_exact(token, target.key_token), "key-exact"))
                ids.update(
                    txn.run(ops.LineageIds([token], target.key_token, unforgotten=not target.compliance))
                )
                ids.update(r.id for r in txn.run(ops.RecordsInSlots([(token, target.key_token)])))
        ids.update(_caught_up(txn, target, txn.run(ops.WrittenSince(survey.since)), ids))
        if target.compliance:
            plan.destroy_records = with_derived(txn, sorted(ids - set(survey.destroy)), known=survey.destroy)
            plan.hide = plan.destroy_records
        else:
            plan.hide = sorted(ids)
        return plan

    def _ancestor_holders(self, txn: Txn, target: ForgetTarget) -> list[bytes]:
        assert target.scope is not None and target.key_token is not None
        ancestors = [(a, self._tokens.scope(a)) for a in target.scope.ancestors()]
        rows = {
            r.scope_token: r
            for r in txn.run(ops.RecordsInSlots([(t, target.key_token) for _, t in ancestors]))
        }
        now = self._clock.now()
        holders = [(a, t) for a, t in ancestors if t in rows and is_visible(rows[t], now)]
        if holders and not target.include_ancestors:
            raise ScopeClosureError(
                "the key is also held by ancestor scope(s) "
                + ", ".join(repr(a.path) for a, _ in holders)
                + "; reads would fall through to them. Forget those too with include_ancestors=True, "
                "or forget them first. Nothing was changed.",
                [a.path for a, _ in holders],
            )
        return [t for _, t in holders]


def _unforgotten(txn: Txn, target: ForgetTarget, before: int) -> list[str]:
    """Records of ``target`` written before ``before`` that no forget of this mode covered yet."""
    if target.kind == "subject":
        return txn.run(ops.UnforgottenForSubject(target.token, before, compliance=True))
    return txn.run(
        ops.UnforgottenInSubtree(
            target.token, target.key_token, before, exact=target.exact, compliance=target.compliance
        )
    )


def _caught_up(txn: Txn, target: ForgetTarget, rows: Sequence[LineageRow], planned: set[str]) -> list[str]:
    """Of the records written since the survey (oldest first), those in ``target`` and, for a
    compliance forget, those derived from a planned one (sources precede what derives from them)."""
    if not rows:
        return []
    if target.kind == "subject":
        inside: set[bytes] = set()
    elif target.exact:
        inside = {target.token}
    else:
        inside = _in_subtree(txn, {r.scope_token for r in rows}, target.token)
    found: list[str] = []
    known = set(planned)
    for row in rows:
        if target.kind == "subject":
            hit = target.token in split_tokens(row.subject_tokens)
        else:
            hit = row.scope_token in inside and (
                target.key_token is None or row.key_token == target.key_token
            )
        if hit or (target.compliance and any(s in known for s in row.sources)):
            found.append(row.record_id)
            known.add(row.record_id)
    return found


def _in_subtree(txn: Txn, tokens: Iterable[bytes], root: bytes) -> set[bytes]:
    """Those of ``tokens`` that are ``root`` or below it (walking each scope's parents)."""
    verdict: dict[bytes, bool] = {root: True}
    for token in tokens:
        chain: list[bytes] = []
        current: bytes | None = token
        while current is not None and current not in verdict:
            chain.append(current)
            row = txn.run(ops.ScopeRows([current])).get(current)
            current = None if row is None or row.parent is None else bytes(row.parent)
        answer = verdict.get(current, False) if current is not None else False
        verdict.update((t, answer) for t in chain)
    return {t for t in tokens if verdict.get(t)}


def with_derived(txn: Txn, ids: Sequence[str], *, known: Sequence[str] = ()) -> list[str]:
    """``ids`` and ``known`` with every record derived from ``ids``, transitively (``known``
    already holds its own closure)."""
    return sorted({*known, *ids, *txn.run(ops.DerivedClosure(list(ids)))})


def with_derived_reading(reading: Reading, ids: Sequence[str]) -> list[str]:
    """:func:`with_derived` in a read transaction of its own (``DerivedClosure`` returns the whole
    closure: one snapshot, one operation)."""
    with reading() as txn:
        return with_derived(txn, ids)


def sweep(txn: Txn, plan: ForgetPlan) -> list[str]:
    """What ``plan``'s target still holds unforgotten that was written before it (and, for a
    compliance plan, whatever derives from that and is not destroyed yet): empty once the plan is
    applied, unless a record escaped the enumeration. Key-exact ancestor copies are in the plan."""
    if plan.target_kind == "key":
        if plan.key_slot is None:  # ledgered before plans named it: its records are all listed
            return []
        target = ForgetTarget(
            "key", plan.mode, plan.key_slot[0], key_token=plan.key_slot[1], exact=plan.exact
        )
    else:
        target = ForgetTarget(plan.target_kind, plan.mode, plan.target)
    found = _unforgotten(txn, target, plan.version)
    if not found or not plan.compliance:
        return found
    derived = txn.run(ops.DerivedClosure(found))
    return sorted({*found, *txn.run(ops.Keyed(derived)), *txn.run(ops.Unhidden(derived))})


def check_postcondition(txn: Txn, plan: ForgetPlan, ids: Sequence[str] | None = None) -> None:
    """W2/W3: nothing planned (or of ``ids``) is still readable, and (key and scope forgets) no
    visible record is left anywhere in the forgotten subtree. Raising rolls its transaction back."""
    listed = plan.hide if ids is None else ids
    keyed = (plan.destroy_records if ids is None else ids) if plan.compliance else []
    if (
        ids is not None
        or plan.target_kind == "subject"
        or (plan.target_kind == "key" and plan.key_slot is None)
    ):
        still = txn.run(ops.Unhidden(listed))
        if plan.compliance:
            still += txn.run(ops.Keyed(keyed))
        if ids is None:
            still += sweep(txn, plan)
    else:  # one statement: what it lists, and the target's sweep (what derives from a record
        # the sweep finds only adds to a failure)
        scope, key, exact = (
            (plan.target, None, False) if plan.key_slot is None else (*plan.key_slot, plan.exact)
        )
        still = txn.run(
            ops.StillReadable(
                listed, keyed, scope, key, plan.version, exact=exact, compliance=plan.compliance
            )
        )
    if still:
        done = (
            "nothing was changed"
            if ids is None
            else "the forget itself is in effect (its tombstones and the ledger's hiding hold), this "
            "chunk of it was rolled back"
        )
        raise ErasureNotProvableError(
            f"the forget's postcondition failed (records still readable); {done}. "
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
        ids.update(i for i, version, _ in txn.run(ops.SubjectLineage(plan.target)) if version < plan.version)
    elif plan.target_kind == "scope":
        for token in txn.run(ops.SubtreeTokens(plan.target)):
            ids.update(i for i, version, _ in txn.run(ops.ScopeLineage(token)) if version < plan.version)
    wanted = sorted(ids)
    keys = sum(1 for row in txn.run(ops.Lineage(wanted)).values() if row.wrapped is not None)
    return {"records": len(txn.run(ops.ExistingRecords(wanted))), "keys": keys}
