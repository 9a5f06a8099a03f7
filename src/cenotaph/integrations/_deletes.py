"""Which deletes an integration made itself, so that a later write may re-create the target.

The frameworks' contracts re-create a deleted item as a matter of course (LangGraph's put after
delete, the memory tool's create after delete); cenotaph's tombstones refuse that without a
reauthorization token. An integration asks for a token only for a write issued after its *own*
delete of that target returned: never for another writer's forget, a subject erasure, or a write
that was already in flight when the delete ran (a stale write). A target is ``(scope, key)``, or
``(scope, None)`` for a whole scope. Entries are keyed by an HMAC under a per-process random
secret, so no name is kept, even in memory.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any

from cenotaph import Record, Store
from cenotaph.errors import DerivedFromForgottenError, ForgottenError

__all__ = ["DeleteState", "OwnDeletes", "Target", "write_reopening"]

Target = tuple[str, str | None]  # (scope, key), or (scope, None) for the scope's whole subtree


class DeleteState(Enum):
    NONE = "none"  # the blocking forget is not one of this integration's deletes
    OWN = "own"  # this integration's delete, returned before the write was issued: reauthorize
    STALE = "stale"  # this integration's delete, returned after the write was issued: refuse


class OwnDeletes:
    def __init__(self) -> None:
        self._secret = os.urandom(32)
        self._lock = threading.Lock()
        # name token -> (the forget's version, sequence number taken when it returned)
        self._entries: dict[bytes, tuple[int, int]] = {}
        self._sequence = itertools.count(1)

    def _token(self, target: Target) -> bytes:
        scope, key = target
        name = f"{scope}\x01" if key is None else f"{scope}\x00{key}"
        return hmac.digest(self._secret, name.encode(), hashlib.sha256)

    def ticket(self) -> int:
        """A number taken when a write is issued, to order it against deletes."""
        with self._lock:
            return next(self._sequence)

    def deleted(self, target: Target, version: int) -> None:
        """Call once the delete (the forget, at ``version``) has returned."""
        token = self._token(target)
        with self._lock:
            self._entries[token] = (version, next(self._sequence))

    def match(
        self, targets: Sequence[Target], version: int, ticket: int
    ) -> tuple[Target | None, DeleteState]:
        """Which of ``targets`` this integration deleted at exactly ``version`` (the forget that
        blocks a write), and whether the write was issued after that delete returned."""
        with self._lock:
            for target in targets:
                entry = self._entries.get(self._token(target))
                if entry is not None and entry[0] == version:
                    return target, DeleteState.OWN if ticket > entry[1] else DeleteState.STALE
        return None, DeleteState.NONE

    def reopened(self, targets: Sequence[Target]) -> None:
        """The targets were written again: forget the deletes recorded for them."""
        with self._lock:
            for target in targets:
                self._entries.pop(self._token(target), None)


def write_reopening(
    store: Store,
    deletes: OwnDeletes,
    items: list[dict[str, Any]],
    ticket: int,
    targets: Callable[[Mapping[str, Any]], list[Target]],
) -> list[Record]:
    """``store.write_many(items)``; where the newest forget blocking an item is this
    integration's own delete, returned before ``ticket`` was taken, obtain the reauthorization
    for it and write again. Any other refusal is raised as cenotaph raised it (ask
    :meth:`OwnDeletes.match` with its version to tell a stale write from a foreign forget)."""
    while True:
        try:
            records = store.write_many(items)
        except DerivedFromForgottenError:
            raise
        except ForgottenError as exc:
            blocked = _own_block(deletes, items, ticket, targets, exc.version)
            if blocked is None:
                raise
            item, target = blocked
            item["reauthorization"] = store.reauthorize(*target)
            continue
        deletes.reopened([t for item in items for t in targets(item)])
        return records


def _own_block(
    deletes: OwnDeletes,
    items: list[dict[str, Any]],
    ticket: int,
    targets: Callable[[Mapping[str, Any]], list[Target]],
    version: int,
) -> tuple[dict[str, Any], Target] | None:
    for item in items:
        if "reauthorization" in item:
            continue  # it already carries a token for our delete: what blocks it now is not ours
        target, state = deletes.match(targets(item), version, ticket)
        if target is not None and state is DeleteState.OWN:
            return item, target
    return None
