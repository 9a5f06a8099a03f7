"""Which deletes this adapter made itself, so that a later put may re-create the item.

LangGraph's contract lets a put re-create a deleted item; cenotaph's tombstones refuse it without
a reauthorization token. The adapter asks for a token only for a put issued after its *own*
delete of that item returned: never for another writer's forget, a subject erasure, or a put that
was already in flight when the delete ran (a stale write). Entries are keyed by an HMAC under a
per-process random secret, so no item name is kept, even in memory.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import threading
from enum import Enum

__all__ = ["DeleteState", "OwnDeletes"]


class DeleteState(Enum):
    NONE = "none"  # this adapter did not delete the item
    OWN = "own"  # deleted by this adapter before the put was issued: reauthorize
    STALE = "stale"  # deleted by this adapter while the put was in flight: refuse


class OwnDeletes:
    def __init__(self) -> None:
        self._secret = os.urandom(32)
        self._lock = threading.Lock()
        self._entries: dict[bytes, int] = {}  # name token -> sequence number at the delete's return
        self._sequence = itertools.count(1)

    def _token(self, scope: str, key: str) -> bytes:
        return hmac.digest(self._secret, f"{scope}\x00{key}".encode(), hashlib.sha256)

    def ticket(self) -> int:
        """A number taken when a put is issued, to order it against deletes."""
        with self._lock:
            return next(self._sequence)

    def deleted(self, scope: str, key: str) -> None:
        """Call once the delete (the forget) has returned."""
        token = self._token(scope, key)
        with self._lock:
            self._entries[token] = next(self._sequence)

    def state(self, scope: str, key: str, ticket: int) -> DeleteState:
        with self._lock:
            done = self._entries.get(self._token(scope, key))
        if done is None:
            return DeleteState.NONE
        return DeleteState.OWN if ticket > done else DeleteState.STALE

    def reopened(self, scope: str, key: str, ticket: int) -> None:
        """The item was written again: later puts need no token (unless it is deleted again)."""
        token = self._token(scope, key)
        with self._lock:
            done = self._entries.get(token)
            if done is not None and done < ticket:
                del self._entries[token]
