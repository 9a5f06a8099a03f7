"""A group of write_many calls inside one write transaction, each checked and refused on its own.

Calls that name disjoint keys are sealed and inserted together (one ``write_batch``: the SQL and
the key lookups of a group cost what one batch costs). A refusal -- a tombstone, a stale base, a
forgotten ``derived_from`` source, a base version from the future -- rolls that batch back to its
savepoint and the calls in it are tried one by one, so only the refused call fails; the others land
in call order and version order, as if each had committed on its own. Anything else (a storage or
key provider failure) propagates and fails the whole transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..backends.base import Txn
from ..crypto.keys import KeyChain
from ..errors import ForgottenError, InvalidValueError, StaleWriteError
from ..ledger.view import LedgerView
from ..records import SealedRecord
from .record_writer import Prepared, RecordWriter, TokenUse

__all__ = ["GroupWriter", "REFUSALS"]

# what refuses one write and not its neighbours (checked inside the transaction, W1/W3)
REFUSALS = (ForgottenError, StaleWriteError, InvalidValueError)

Outcome = list[SealedRecord] | BaseException


class GroupWriter:
    def __init__(self, writer: RecordWriter, keys: KeyChain) -> None:
        self._writer = writer
        self._keys = keys

    def write(
        self, txn: Txn, group: Sequence[Sequence[Prepared]], clock: int, view: LedgerView
    ) -> tuple[list[Outcome], list[str], list[TokenUse]]:
        """Write each call of ``group`` at versions after ``clock``: its sealed records or the
        error that refused it, the ids replaced, and the tokens used (for the ledger)."""
        if len(group) == 1:  # alone: a refusal rolls back the whole transaction, as it always did
            alone, alone_replaced, alone_uses = self._writer.write_batch(txn, group[0], clock, view)
            return [alone], alone_replaced, alone_uses
        outcomes: list[Outcome | None] = [None] * len(group)
        replaced: list[str] = []
        uses: list[TokenUse] = []
        for chunk in _disjoint_runs(group):
            merged = [p for i in chunk for p in group[i]]
            txn.savepoint()
            try:
                sealed, chunk_replaced, chunk_uses = self._writer.write_batch(txn, merged, clock, view)
            except REFUSALS as exc:
                self._undo(txn)
                if len(chunk) == 1:
                    outcomes[chunk[0]] = exc
                    continue
                for i in chunk:  # which call was refused: each on its own, in order
                    txn.savepoint()
                    try:
                        one, one_replaced, one_uses = self._writer.write_batch(txn, group[i], clock, view)
                    except REFUSALS as refused:
                        self._undo(txn)
                        outcomes[i] = refused
                        continue
                    txn.release_savepoint()
                    outcomes[i] = one
                    clock += len(group[i])
                    replaced.extend(one_replaced)
                    uses.extend(one_uses)
                continue
            txn.release_savepoint()
            start = 0
            for i in chunk:
                outcomes[i] = sealed[start : start + len(group[i])]
                start += len(group[i])
            clock += len(merged)
            replaced.extend(chunk_replaced)
            uses.extend(chunk_uses)
        done = [o for o in outcomes if o is not None]
        if len(done) != len(group):
            raise RuntimeError("every call of a group gets an outcome")
        return done, replaced, uses

    def _undo(self, txn: Txn) -> None:
        txn.rollback_to_savepoint()
        # keys the rolled-back rows introduced are cached: they must not seal anything that lands
        self._keys.clear()


def _disjoint_runs(group: Sequence[Sequence[Prepared]]) -> list[list[int]]:
    """Consecutive calls whose (scope, key) pairs do not meet: one write_batch each run (a key
    written twice in one group is written in two, in call order)."""
    runs: list[list[int]] = []
    seen: set[tuple[object, str]] = set()
    for i, call in enumerate(group):
        slots = {(p.scope, p.key) for p in call}
        if not runs or not seen.isdisjoint(slots):
            runs.append([])
            seen = set()
        runs[-1].append(i)
        seen |= slots
    return runs
