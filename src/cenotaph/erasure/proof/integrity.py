"""Is the database still a faithful cache of the key provider's ledger? (S9)

The store never lets these rows decide (it asks the ledger, and what a row says about its own
visibility is sealed), so an edit is refused where it would matter. This module is what names
the edit afterwards, for ``verify_audit``, ``cenotaph audit verify`` and ``cenotaph doctor``:
each finding is one sentence with counts only, never an id or a token.
"""

from __future__ import annotations

from collections.abc import Callable

from ...backends import ops
from ...backends.base import RecordRow, Txn
from ...ledger.view import LedgerView
from ...model import ErasureState
from ...records import OpenedRecord

__all__ = ["find_tampering"]

Opener = Callable[[Txn, RecordRow], OpenedRecord | None]


def find_tampering(
    txn: Txn, view: LedgerView, open_row: Opener, verified: set[str], live_epochs: set[int]
) -> list[str]:
    """Every way the database disagrees with the ledger; ``verified``: the requests the verified
    audit log holds a verifying scan for; ``live_epochs``: the KEK epochs not yet destroyed."""
    view.refresh()
    return [
        *_tombstones(txn, view),
        *_records(txn, view),
        *_tokens(txn, view),
        *_requests(txn, view, verified),
        *_clock(txn, view),
        *_sealed_state(txn, open_row, live_epochs),
    ]


def _tombstones(txn: Txn, view: LedgerView) -> list[str]:
    stored = txn.run(ops.TombstoneVersions(list(view.tombstones)))
    missing = sum(1 for t, v in view.tombstones.items() if stored.get(t, -1) < v)
    return (
        [f"{missing} tombstone(s) of the key provider's ledger are missing from the database"]
        if missing
        else []
    )


def _records(txn: Txn, view: LedgerView) -> list[str]:
    found = []
    unhidden = txn.run(ops.Unhidden(list(view.forgotten)))
    if unhidden:
        found.append(f"the hidden mark of {len(unhidden)} forgotten record(s) was cleared")
    keyed = txn.run(ops.Keyed(list(view.destroyed)))
    if keyed:
        found.append(f"the destroyed key(s) of {len(keyed)} erased record(s) are present again")
    return found


def _tokens(txn: Txn, view: LedgerView) -> list[str]:
    found = []
    lifts = [(t, v) for t, v in txn.run(ops.AllLifts()) if view.lifts.get(t, -1) < v]
    if lifts:
        found.append(f"{len(lifts)} lift row(s) the key provider's ledger never recorded")
    forged = 0
    for digest, kind, target, version, consumed, subject in txn.run(ops.AllReauths()):
        grant = view.grants.get(digest)
        if (
            grant is None
            or (grant.kind, grant.target, grant.issued_version, grant.subject)
            != (kind, target, version, subject)
            or (consumed is None and digest in view.consumed)
        ):
            forged += 1
    if forged:
        found.append(
            f"{forged} reauthorization token row(s) differ from what the key provider's ledger issued"
        )
    return found


def _requests(txn: Txn, view: LedgerView, verified: set[str]) -> list[str]:
    planted = misstated = unproven = 0
    for row in txn.run(ops.Erasures()):
        plan = view.plans.get(row.id)
        if plan is None:
            planted += 1
            continue
        if (row.mode, row.target_kind, row.target.hex(), row.version) != (
            plan["mode"],
            plan["target_kind"],
            plan["target"],
            plan["version"],
        ):
            misstated += 1
        if row.state == ErasureState.VERIFIED and row.id not in verified:
            unproven += 1
    found = []
    if planted:
        found.append(f"{planted} erasure request row(s) the key provider's ledger never recorded")
    if misstated:
        found.append(f"{misstated} erasure request row(s) misstate their forget")
    if unproven:
        found.append(f"{unproven} erasure request row(s) say verified, but no audited scan verified them")
    return found


def _clock(txn: Txn, view: LedgerView) -> list[str]:
    return (
        ["the clock was set back behind the key provider's ledger"]
        if txn.run(ops.Count("clock")) < view.max_version
        else []
    )


def _sealed_state(txn: Txn, open_row: Opener, live_epochs: set[int]) -> list[str]:
    """Every row the database says is live must open, with the expiry its column says (a row
    wrapped under a destroyed epoch cannot: a copy from before the horizon dies with it)."""
    failed = expiry = 0
    for row in txn.run(ops.LiveRecords()):
        if row.epoch not in live_epochs:
            continue
        opened = open_row(txn, row)
        if opened is None:
            failed += 1
        elif opened.expires_at != row.expires_at:
            expiry += 1
    found = []
    if failed:
        found.append(f"{failed} record row(s) fail authentication (their version or ciphertext was edited)")
    if expiry:
        found.append(f"the expiry column of {expiry} record row(s) differs from their sealed expiry")
    return found
