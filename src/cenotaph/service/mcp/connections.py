"""One MCP connection = one store session (W6), plus the forgets that connection issued.

What the agent reads through a connection joins that connection's read set, and everything it
writes afterwards records the read set as ``derived_from``: a summary written from a note dies
with the note (W3), and a summary written after the note was forgotten is refused. A connection
also remembers its own forgets, so a write issued after one of them returned may re-open exactly
what it forgot (see ``memory.MemoryTools.write``).

What a connection is depends on the transport: a stdio process or an in-memory client is one
connection; over streamable HTTP a legacy session (``Mcp-Session-Id``) is one, and the
sessionless 2026 protocol, which has no connection at all, gets one per principal (the API key,
or the whole server on loopback without keys): every request of that principal shares one read
set. That taints more than a true connection would, never less.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from cenotaph.errors import InvalidValueError
from cenotaph.model import Record
from cenotaph.scope import Scope
from cenotaph.session import StoreSession
from cenotaph.store import Store

from ..apikeys import ApiKey
from .confinement import Confinement

__all__ = ["AgentConnection", "ConnectionRegistry", "OwnForget", "STREAM"]

STREAM = "stream"  # the identity of the one connection of a stdio or in-memory stream
SESSION_HEADER = "mcp-session-id"


@dataclass(frozen=True, slots=True)
class OwnForget:
    """A forget this connection issued: at ``version``, of ``key`` (None: the whole scope)."""

    version: int
    scope: Scope
    key: str | None

    def covers(self, scope: Scope, key: str) -> bool:
        return scope.is_within(self.scope) and (self.key is None or self.key == key)


class AgentConnection:
    """The state of one MCP connection: what it may reach, its store session, its forgets."""

    def __init__(self, store: Store, reach: Confinement) -> None:
        self.store = store
        self.reach = reach
        self._exit = contextlib.ExitStack()
        self.session: StoreSession = self._exit.enter_context(store.session(reach.scope.path))
        self._slots: dict[str, tuple[str, str]] = {}  # id of each record read -> (scope, key)
        self._forgets: list[OwnForget] = []
        self._lock = threading.Lock()
        self.last_used = time.monotonic()

    def read(self, records: Iterable[Record]) -> None:
        """Records the session returned to the agent (the session already tainted itself)."""
        with self._lock:
            for record in records:
                self._slots[record.id] = (record.scope, record.key)

    def forgot(self, forget: OwnForget) -> None:
        with self._lock:
            self._forgets.append(forget)

    def forgets(self) -> tuple[OwnForget, ...]:
        """The forgets this connection issued that have returned so far."""
        with self._lock:
            return tuple(self._forgets)

    def derived_from(self, explicit: Iterable[str], *, replacing: tuple[str, str] | None = None) -> list[str]:
        """What a write records as its sources: everything read so far, then ``explicit``. With
        ``replacing`` (a slot this connection itself forgot and now writes again), the copies of
        that slot it read are left out: the new value replaces them rather than derives from them."""
        with self._lock:
            read = [i for i in self.session.read_set if replacing is None or self._slots.get(i) != replacing]
        return list(dict.fromkeys([*read, *explicit]))

    def close(self) -> None:
        self._exit.close()


class ConnectionRegistry:
    """The connections of one stream (exactly one) or of one HTTP server (one per session or
    principal). Legacy HTTP sessions the SDK has dropped for idleness are dropped here too."""

    def __init__(
        self, store: Store, reach: Confinement, *, session_idle_seconds: float | None = None
    ) -> None:
        self._store = store
        self._reach = reach
        self._idle = session_idle_seconds
        self._connections: dict[Hashable, AgentConnection] = {}
        self._lock = threading.Lock()

    def connection(self, headers: Mapping[str, str] | None, key: ApiKey | None) -> AgentConnection:
        """The connection of a request: by its transport (``headers``) and API key, whose prefix
        bounds what it may reach."""
        identity = identity_of(headers, None if key is None else key.id)
        with self._lock:
            self._expire()
            found = self._connections.get(identity)
            if found is None:
                reach = self._reach if key is None else self._reach.narrowed(key.scope)
                if reach is None:  # the gate refuses such keys before any tool runs
                    raise InvalidValueError("this API key's prefix is outside what this server serves")
                found = self._connections[identity] = AgentConnection(self._store, reach)
            found.last_used = time.monotonic()
            return found

    def _expire(self) -> None:
        if self._idle is None:
            return
        # only legacy sessions end; a principal's sessionless connection never does (its taint must stay)
        cutoff = time.monotonic() - self._idle
        for identity, conn in list(self._connections.items()):
            if isinstance(identity, tuple) and identity[1] is not None and conn.last_used < cutoff:
                del self._connections[identity]
                conn.close()

    def close(self) -> None:
        with self._lock:
            for conn in self._connections.values():
                conn.close()
            self._connections.clear()


def identity_of(headers: Mapping[str, str] | None, principal: str | None) -> Hashable:
    """Which connection a request belongs to: the stream's, a legacy HTTP session's, or its
    principal's (sessionless HTTP). ``principal`` is the API key id, or None on loopback."""
    if headers is None:
        return STREAM
    return (principal, headers.get(SESSION_HEADER))
