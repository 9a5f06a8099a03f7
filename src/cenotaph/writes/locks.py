"""What a group of record writes locks and reads first, where writers are not serialised
(``Backend.concurrent_writers``: PostgreSQL; see ``backends.postgres.backend``).

Each record's write holds the lock of every tombstone target that covers it
(``WriteTargets.tombstone_targets``: each prefix scope, its key's subtree under each prefix and
the key in its own scope, each subject) shared, so writes of different users run at once and a
forget, which holds the targets its tombstones name exclusive, excludes exactly the writes it
could dominate. The key in its own scope is the record's slot: that one is exclusive, so two
writes of one slot run one after the other (each replaces the row the other left, and a
compare-and-set sees the other's version). A write presenting a reauthorization token holds its targets exclusive: the
token lifts forgets of one of them, and no write covered by it may decide meanwhile. A write
``derived_from`` another record is store-wide: it inherits the sources' subjects, known only
inside the transaction, and a forget of a source reaches it through derivations, which no
target lock covers. A batch naming more than ``MAX_TARGET_LOCKS`` targets is store-wide too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backends import ops
from ..backends.base import WriteLocks
from ..crypto.tokens import TokenMaker
from ..dominance import WriteTargets
from ..scope import default_subjects
from .record_writer import Prepared

__all__ = ["MAX_TARGET_LOCKS", "write_ahead", "write_locks"]

# a batch naming more targets goes store-wide: PostgreSQL keeps every lock in a shared table
# (max_locks_per_transaction per connection), which thousands of them would exhaust
MAX_TARGET_LOCKS = 256


def write_locks(tokens: TokenMaker, group: Sequence[Sequence[Prepared]]) -> WriteLocks | None:
    """The locks of one transaction writing ``group`` (None: store-wide)."""
    shared: set[bytes] = set()
    exclusive: set[bytes] = set()
    for call in group:
        for p in call:
            if p.derived_from:
                return None
            subjects = dict.fromkeys([*default_subjects(p.scope), *p.subjects])
            targets = WriteTargets.build(tokens, p.scope, p.key, tuple(tokens.subject(s) for s in subjects))
            (exclusive if p.reauthorization is not None else shared).update(targets.tombstone_targets())
            exclusive.add(targets.exact_key_target)  # the slot: one write of it at a time
    if len(shared | exclusive) > MAX_TARGET_LOCKS:
        return None
    return WriteLocks(frozenset(shared - exclusive), frozenset(exclusive))


def write_ahead(tokens: TokenMaker, group: Sequence[Sequence[Prepared]]) -> list[ops.Op[Any]]:
    """What the group's transaction reads before it writes, sent with its BEGIN: the counters,
    a block of versions for every record, the slots' current rows (the store puts the change
    marker before them when its caches sync in the write)."""
    slots = list({(tokens.scope(p.scope), tokens.key(p.key)) for call in group for p in call})
    count = sum(len(call) for call in group)
    return [ops.MetaAll(), ops.Reserve(count), ops.RecordsInSlots(slots)]
