"""Sessions over HTTP (W6): each one a library ``StoreSession`` bound to the API key that opened it.

Kept in the server's memory: a restart ends every session (its id then answers 404, and the
client opens a new one). A session idle for ``IDLE_TIMEOUT`` seconds ends; a key holds at most
``PER_KEY`` sessions at once (opening one more ends its least recently used).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from cenotaph import Scope, Store, StoreSession

from ..apikeys import ApiKey
from .problems import NotVisible

__all__ = ["IDLE_TIMEOUT", "PER_KEY", "Sessions"]

IDLE_TIMEOUT = 3600
PER_KEY = 256
_LIMIT = 65_536


@dataclass
class _Entry:
    key_id: str
    session: StoreSession
    used: float = field(default_factory=time.monotonic)


class Sessions:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, key: ApiKey, scope: Scope) -> str:
        session_id = "ses_" + secrets.token_urlsafe(24)
        with self._lock:
            self._expire(time.monotonic())
            mine = [sid for sid, e in self._entries.items() if e.key_id == key.id]
            for sid in mine[: max(0, len(mine) - PER_KEY + 1)]:
                self._end(sid)
            if len(self._entries) >= _LIMIT:
                self._end(next(iter(self._entries)))
            self._entries[session_id] = _Entry(key.id, StoreSession(self._store, scope))
        return session_id

    def get(self, key: ApiKey, session_id: str) -> StoreSession:
        """The session, if ``key`` opened it and it has not ended; else NotVisible."""
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None or entry.key_id != key.id or now - entry.used > IDLE_TIMEOUT:
                raise NotVisible
            entry.used = now
            self._entries.move_to_end(session_id)
            return entry.session

    def close(self, key: ApiKey, session_id: str) -> None:
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None or entry.key_id != key.id:
                raise NotVisible
            self._end(session_id)

    def close_all(self) -> None:
        with self._lock:
            for sid in list(self._entries):
                self._end(sid)

    def _expire(self, now: float) -> None:
        stale = [sid for sid, e in self._entries.items() if now - e.used > IDLE_TIMEOUT]
        for sid in stale:
            self._end(sid)

    def _end(self, session_id: str) -> None:
        self._entries.pop(session_id).session.close()
